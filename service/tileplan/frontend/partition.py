"""Which fused quantized ops run on the accelerator, why the others do not, and what an offloaded one computes.

`offload_reason(op)` is None when a QuantOp (patterns.py) can run on a Gemmini-like accelerator, else the reason
it stays on the host.  `kernel_spec(op)` turns an offloadable op into what code generation needs: a workload
layer, Gemmini's epilogue, the kernel ABI, the int8 weights in the kernel's [G, R, S, C, K] layout and the int32
bias with the zero points folded in.

Numerics (all integer until the final requantisation, as onnxruntime's QLinearConv / QLinearMatMul):

    acc   = sum (x_q - z_x) * w_q + b_q                      (z_w must be 0)
    q_y   = sat8(round_half_even(acc * M) + z_y),  M = float32(float32(s_x * s_w) / s_y)

- z_x: the kernel pads the input with z_x and the bias absorbs -z_x * sum_{c,r,s} w (per output channel), so
  the accelerator's sum of x_q * w_q plus that bias is exactly acc.
- Gemmini's mvout computes sat8(round_half_even(float(acc) * M)) with one scale and no zero point.  Where that
  is the whole requantisation (z_y = 0, per-tensor scales) the kernel stores int8 (a ReLU is the mvout's; a Clip
  clamps the int8 result on the host, exact since quantisation is monotone).  Otherwise (an output zero point,
  per-channel weight scales) the kernel stores the int32 accumulators and the host requantizes them exactly as
  onnxruntime does: clamp(round_half_even(float(acc) * M_k) + z_y, lo, hi).  (Folding round(z_y / M) into the
  bias instead would be cheaper but is off by one step whenever acc * M lies within M / 2 of a rounding
  boundary; in a deep network those steps compound far beyond 1 LSB.)
- An int32 result (QuantOp.int_output: MatMulInteger / ConvInteger of int8 operands without zero points, as
  dynamic.split_integer_products leaves the products of inputs quantized at run time): the kernel stores the
  int32 accumulators (read at full width, no bias, no scaling) and they are the op's result.
- A float result (QGemm without an output scale, QuantOp.float_output): the kernel stores the int32
  accumulators (bias and z_x folded in as above) and the host computes float(acc) * M_k with M_k = s_x * s_w[k]
  in float32, as onnxruntime's QGemm does (its output processor scales the int32 sum, bias included, once).
  A float bias (a Gemm the quantizer left with dequantized operands and a float bias, ViT's attention output
  projection) is added after that, in float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tileplan.codegen.targets.gemmini import Epilogue, KernelABI
from tileplan.frontend.patterns import ActMatmul, QuantOp
from tileplan.workload import Conv2dLayer, MatmulLayer

INT32 = 2**31


@dataclass
class Requant:
    """The host's requantisation of an accelerator op's int32 accumulators (KernelABI.acc_output)."""

    multipliers: np.ndarray  # float32 [channels]: M_k = s_x * s_w[k] / s_y
    zero_point: int
    lo: int
    hi: int
    inner: int  # elements between consecutive channels (NCHW: P * Q; row-major matmul: 1)
    float_output: bool = False  # float32 out, float(acc) * M_k, no rounding or clamp (QGemm without y_scale)
    float_bias: np.ndarray | None = None  # float_output: float32 [channels] added after the scaling


@dataclass
class ActGlue:
    """How the program runs an activation x activation matmul (patterns.ActMatmul): one kernel call per batch
    element (A at a_step elements apart, B at b_step, 0 where an operand is broadcast), the kernel multiplying
    the raw int8 operands; with zero points the kernel stores int32 and the host adds the zero points' terms
    before requantizing (QLinearMatMul's sum (a - z_a)(b - z_b) = sum ab - z_b rowsum(A) - z_a colsum(B)
    + K z_a z_b)."""

    batch: int
    m: int
    k: int
    n: int
    a_step: int
    b_step: int
    a_zp: int
    b_zp: int


@dataclass
class KernelSpec:
    """What one offloaded op needs from code generation and from the program."""

    layer: Conv2dLayer | MatmulLayer
    epilogue: Epilogue
    abi: KernelABI
    weights: np.ndarray  # int8 [G, R, S, C, K]
    bias: np.ndarray  # int32 [G * K], the input zero point folded in
    clamp: tuple[int, int] | None  # int8 output: host clamp (an activation that survived quantisation)
    multiplier: float  # M = s_x * s_w / s_y (float32; the first channel's with per-channel scales)
    requant: Requant | None = None  # int32 output: the host requantizes
    act: ActGlue | None = None  # both operands activations: the kernel takes B at run time, batch loop

    @property
    def tag(self) -> str:
        if self.act is not None:
            return "matmul_act"
        if isinstance(self.layer, MatmulLayer):
            return "matmul"
        d = self.layer.dims()
        return "depthwise_conv2d" if d["G"] > 1 and d["C"] == 1 and d["K"] == 1 else "conv2d"


def _scalar(a: np.ndarray) -> float | None:
    a = np.asarray(a)
    if a.size != 1:
        return None
    return float(a.reshape(()))


def _scale_reason(scales: str, values: list[float]) -> str:
    if any(np.isposinf(values)):
        return (f"a scale of inf ({scales}): no int8 requantization exists; computed on the host in float as ONNX "
                "defines it, as onnxruntime does (see the compile's warning on infinite scales)")
    return f"scales must be positive and finite ({scales})"


def offload_reason(op: QuantOp | ActMatmul) -> str | None:
    """None when `op` can run on the accelerator, else why not (shown in the summary)."""
    if isinstance(op, ActMatmul):
        return act_offload_reason(op)
    if op.x_dtype != "int8" or (op.y_dtype != "int8" and not (op.float_output and op.y_dtype == "float32")
                                and not (op.int_output and op.y_dtype == "int32")):
        return (f"{op.x_dtype} input / {op.y_dtype} output: the accelerator's datapath is int8 (quantize with "
                "activation_type=QInt8)")
    if op.w.dtype != np.int8:
        return f"{op.w.dtype} weights: the accelerator multiplies int8 weights"
    if np.any(np.asarray(op.w_zp) != 0):
        zw = np.unique(np.asarray(op.w_zp)).tolist()
        return (f"weight zero point {zw[0] if len(zw) == 1 else zw[:4]} is not 0 (uint8 weights are stored as int8, "
                "so their zero point here is theirs - 128): the accelerator multiplies the raw int8 weights")
    if _scalar(op.x_scale) is None or _scalar(op.y_scale) is None:
        return "per-channel activation scales: the accelerator needs per-tensor input and output scales"
    if _scalar(op.x_zp) is None or _scalar(op.y_zp) is None:
        return "per-channel activation zero points are not supported"
    sx, sy = float(op.x_scale), float(op.y_scale)
    sw = np.asarray(op.w_scale, dtype=np.float64).reshape(-1)
    channels = op.w.shape[0] if op.kind == "conv2d" else op.w.shape[1]
    if sw.size not in (1, channels):
        return f"{sw.size} weight scales for {channels} output channels"
    if not (sx > 0 and sy > 0 and np.all(sw > 0) and np.all(np.isfinite(sx * sw / sy))):
        return _scale_reason(f"s_x={sx}, s_w={sw[:3]}, s_y={sy}", [sx, sy, *sw])
    if op.bias is not None:
        if op.bias.dtype not in (np.int8, np.uint8, np.int16, np.uint16, np.int32):
            return f"{op.bias.dtype} bias: the accelerator's accumulator takes an integer bias"
        bs = np.asarray(op.bias_scale, dtype=np.float64).reshape(-1)
        if bs.size not in (1, channels):
            return f"{bs.size} bias scales for {channels} output channels"
        if np.asarray(op.bias_zp).size not in (1, channels):
            return f"{np.asarray(op.bias_zp).size} bias zero points for {channels} output channels"
        if not np.all(np.isfinite(bs)):
            return f"bias scale must be finite ({bs[:3]})"
    if op.kind == "conv2d":
        if op.layouts != ("NCHW", "OIHW", "NCHW"):
            return f"layouts {op.layouts}: expected NCHW / OIHW"
        top, left, bottom, right = op.padding
        if (top, left) != (bottom, right):
            return f"asymmetric padding {list(op.padding)}: the kernel pads symmetrically"
        if len(op.x_shape) != 4:
            return f"a {len(op.x_shape) - 2}-D convolution: the accelerator runs 2-D ones"
    try:
        spec = kernel_spec(op)
    except ValueError as exc:
        return str(exc)
    worst = int(np.abs(spec.bias.astype(np.int64)).max(initial=0))
    d = spec.layer.dims()
    worst += 128 * 128 * d["C"] * d["R"] * d["S"]
    if worst >= INT32:
        return f"the int32 accumulator could overflow (|bias| + 128*128*C*R*S = {worst})"
    return None


def bias_in_accumulator_units(op: QuantOp) -> tuple[np.ndarray | None, bool]:
    """The op's int bias in accumulator units (s_x * s_w[k]) as int64, and whether it had to be rescaled.

    onnxruntime's quantizer writes each bias with scale s_x * s_w, but a bias shared by several convs (PyTorch's
    exporter passes one zero bias to many through Identity nodes) keeps the scale of the first: its real value
    b_q * s_b is then rounded to the nearest accumulator step, an error of at most half a step (M / 2 output
    LSB, M = s_x * s_w / s_y), and none at all for the zero biases of such exports.  The same holds for a bias
    the quantizer wrote as an int8 activation with its own scale and zero point (a bias reaching the conv through
    an Identity: ConvNeXt's): its value (b_q - z_b) * s_b is a constant, rounded to the accumulator's step."""
    if op.bias is None:
        return None, False
    b = np.asarray(op.bias).astype(np.int64).reshape(-1) - np.asarray(op.bias_zp).astype(np.int64).reshape(-1)
    sx = float(np.asarray(op.x_scale).reshape(()))
    sw = np.asarray(op.w_scale, dtype=np.float64).reshape(-1)
    bs = np.asarray(op.bias_scale, dtype=np.float64).reshape(-1)
    step = sx * sw
    if np.all(np.abs(bs - step) <= 1e-6 * step):
        return b, False
    return np.rint(b * (bs / step)).astype(np.int64), True


def multipliers(op: QuantOp) -> np.ndarray:
    """M_k = s_x * s_w[k] / s_y in float32, in onnxruntime's order of operations (one per weight scale)."""
    sx, sy = np.float32(float(op.x_scale)), np.float32(float(op.y_scale))
    sw = np.asarray(op.w_scale, dtype=np.float32).reshape(-1)
    return ((sx * sw) / sy).astype(np.float32)


def _batch_step(shape: tuple[int, ...], batch: int, step: int, which: str) -> int:
    """Elements between consecutive batch elements of an operand: `step` when it has the whole batch, 0 when it
    is broadcast over it (ValueError for a partial broadcast)."""
    own = int(np.prod(shape[:-2], dtype=np.int64)) if len(shape) > 2 else 1
    if own == batch:
        return step if batch > 1 else 0
    if own == 1:
        return 0
    raise ValueError(f"operand {which} {list(shape)} is broadcast over only some of the batch dimensions: the "
                     "program's batch loop steps through each operand with one stride")


def act_offload_reason(op: ActMatmul) -> str | None:
    """None when the activation x activation matmul can run on the accelerator, else why not."""
    if op.a_dtype != "int8" or op.b_dtype != "int8" or op.y_dtype != "int8":
        return (f"{op.a_dtype} x {op.b_dtype} -> {op.y_dtype} matmul of two activations: the accelerator's "
                "datapath is int8 (quantize with activation_type=QInt8)")
    for what, arr in (("scale", op.a_scale), ("zero point", op.a_zp), ("scale", op.b_scale),
                      ("zero point", op.b_zp), ("scale", op.y_scale), ("zero point", op.y_zp)):
        if _scalar(arr) is None:
            return f"per-channel activation {what}s: the matmul of two activations needs per-tensor ones"
    sa, sb, sy = float(op.a_scale), float(op.b_scale), float(op.y_scale)
    if not (sa > 0 and sb > 0 and sy > 0 and np.isfinite(sa * sb / sy)):
        return _scale_reason(f"s_a={sa}, s_b={sb}, s_y={sy}", [sa, sb, sy])
    if len(op.a_shape) < 2 or len(op.b_shape) < 2:
        return (f"a matrix-vector product ({list(op.a_shape)} x {list(op.b_shape)}): Tileplan offloads products "
                "of two matrices")
    try:
        spec = act_kernel_spec(op)
    except ValueError as exc:
        return str(exc)
    assert spec.act is not None
    if spec.act.k * 255 * 255 >= INT32:
        return (f"the int32 accumulator could overflow: K = {spec.act.k}, |sum (a - z_a)(b - z_b)| up to "
                f"{spec.act.k * 255 * 255}")
    return None


def act_kernel_spec(op: ActMatmul) -> KernelSpec:
    """The layer (one batch element's M x K x N), epilogue, ABI and batch loop of an activation x activation
    matmul.  The kernel reads B where the program keeps it (KernelABI.b_in_place: unpadded row-major [K, N],
    row stride N, no copy), no bias; Gemmini's mvout requantizes where it is the whole requantisation (no zero
    points), else the kernel stores int32 and the host adds the zero points' terms and requantizes as
    onnxruntime's QLinearMatMul."""
    a, b, y = op.a_shape, op.b_shape, op.y_shape
    m, k, n = int(a[-2]), int(a[-1]), int(b[-1])
    if int(b[-2]) != k or len(y) < 2 or (int(y[-2]), int(y[-1])) != (m, n):
        raise ValueError(f"matmul shapes {list(a)} x {list(b)} -> {list(y)} do not agree")
    batch = int(np.prod(y[:-2], dtype=np.int64)) if len(y) > 2 else 1
    glue = ActGlue(batch, m, k, n, _batch_step(a, batch, m * k, "A"), _batch_step(b, batch, k * n, "B"),
                   int(np.asarray(op.a_zp).reshape(())), int(np.asarray(op.b_zp).reshape(())))
    sa, sb, sy = (np.float32(float(v)) for v in (op.a_scale, op.b_scale, op.y_scale))
    mult = np.asarray([(sa * sb) / sy], np.float32)
    zy = int(np.asarray(op.y_zp).reshape(()))
    layer = MatmulLayer(name=op.name, M=m, K=k, N=n).model_copy(update={"bias": False})
    weights = np.zeros((1, 1, 1, k, n), np.int8)  # not a constant: B arrives at run time (shape only)
    bias = np.zeros(n, np.int32)
    if glue.a_zp == 0 and glue.b_zp == 0 and zy == 0:
        return KernelSpec(layer, Epilogue(scale=float(mult[0]), zero_point=0, relu=False, bias=False),
                          KernelABI("NHWC", 0, prelaid=True, b_in_place=True), weights, bias, None,
                          float(mult[0]), act=glue)
    return KernelSpec(layer, Epilogue(scale=1.0, zero_point=0, relu=False, bias=False),
                      KernelABI("NHWC", 0, prelaid=True, acc_output=True, b_in_place=True), weights, bias, None,
                      float(mult[0]),
                      Requant(mult, zy, -128, 127, 1), act=glue)


def kernel_spec(op: QuantOp | ActMatmul) -> KernelSpec:
    """The layer, epilogue, ABI, laid-out weights and folded bias of an offloadable op (ValueError if the op's
    shapes do not make a layer)."""
    if isinstance(op, ActMatmul):
        return act_kernel_spec(op)
    zx, zy = int(np.asarray(op.x_zp).reshape(())), int(np.asarray(op.y_zp).reshape(()))
    ms = multipliers(op)
    m = float(ms[0])
    w = op.w.astype(np.int64)
    if op.kind == "matmul":
        kred, n = w.shape
        rows = int(np.prod(op.x_shape[:-1])) if len(op.x_shape) > 1 else 1
        if op.x_shape[-1] != kred:
            raise ValueError(f"matmul shapes {op.x_shape} x {w.shape} do not agree")
        layer: Conv2dLayer | MatmulLayer = MatmulLayer(name=op.name, M=rows, K=kred, N=n)
        wl = op.w.astype(np.int8).reshape(1, 1, 1, kred, n)
        wsum = w.sum(axis=0)  # per output column
        abi = KernelABI("NHWC", 0, prelaid=True)
        inner = 1
    else:
        kout, cg, r, s = w.shape
        n, cin, h, wd = op.x_shape
        g = op.groups
        if cin != cg * g or kout % g:
            raise ValueError(f"groups={g} do not divide the channels ({cin} in, {kout} out)")
        top, left, _, _ = op.padding
        layer = Conv2dLayer(name=op.name, batch=n, in_channels=cin, out_channels=kout, in_h=h, in_w=wd,
                            kernel=(r, s), stride=op.strides, padding=(top, left), dilation=op.dilation, groups=g)
        if (layer.out_h, layer.out_w) != tuple(op.y_shape[2:]):
            raise ValueError(f"output {op.y_shape} does not match the convolution's {layer.out_h}x{layer.out_w}")
        wl = op.w.astype(np.int8).reshape(g, kout // g, cg, r, s).transpose(0, 3, 4, 2, 1)
        wsum = w.reshape(kout, -1).sum(axis=1)
        abi = KernelABI("NCHW", zx if (top or left) else 0, prelaid=True)
        inner = layer.out_h * layer.out_w
    acc_bias, _ = bias_in_accumulator_units(op)
    b = acc_bias if acc_bias is not None else np.zeros(wsum.shape, np.int64)
    if b.size != wsum.size:
        raise ValueError(f"{b.size} bias values for {wsum.size} output channels")
    # z_x: padded pixels hold z_x (the ABI's pad value), so the correction is one constant per output channel
    folded = b - zx * wsum
    if np.abs(folded).max(initial=0) >= INT32:
        raise ValueError("the bias with the input zero point folded in does not fit int32")
    # the kernel loads a bias when the model has one or the input zero point left a correction: the layer says
    # so, so that its plan (and the library's, its baseline) is costed with the bias load the kernel makes, as
    # `tileplan schedule --model` costs the same conv (a bias input: bias true)
    has_bias = op.bias is not None or bool(np.any(folded != 0))
    layer = layer.model_copy(update={"bias": has_bias})
    qlo, qhi = -128, 127
    if op.act is not None:  # quantize(act(v)) = clamp(quantize(v), quantize(lo), quantize(hi))
        _, lo, hi = op.act
        sy = np.float32(float(op.y_scale))
        qlo = -128 if lo == -np.inf else int(np.clip(np.rint(np.float32(lo) / sy) + zy, -128, 127))
        qhi = 127 if hi == np.inf else int(np.clip(np.rint(np.float32(hi) / sy) + zy, -128, 127))
    if op.int_output:  # the int32 product itself: the accumulators, read at full width, are the result
        abi = KernelABI(abi.layout, abi.pad_value, abi.prelaid, acc_output=True)
        return KernelSpec(layer, Epilogue(scale=1.0, zero_point=0, relu=False, bias=has_bias), abi, wl,
                          folded.astype(np.int32), None, 1.0)
    if op.float_output:  # the host converts the int32 accumulators to float as QGemm does: float(acc) * s_x * s_w
        abi = KernelABI(abi.layout, abi.pad_value, abi.prelaid, acc_output=True)
        fb = None
        if op.float_bias is not None:
            if op.float_bias.size not in (1, wsum.size):
                raise ValueError(f"a float bias of shape {list(op.float_bias.shape)} for {wsum.size} output columns")
            fb = np.broadcast_to(op.float_bias.astype(np.float32).reshape(-1), (wsum.size,)).copy()
        return KernelSpec(layer, Epilogue(scale=1.0, zero_point=0, relu=False, bias=has_bias), abi, wl,
                          folded.astype(np.int32), None, m,
                          Requant(ms, 0, qlo, qhi, inner, float_output=True, float_bias=fb))
    if zy == 0 and ms.size == 1:  # Gemmini's mvout is the whole requantisation (a ReLU included)
        relu = op.act is not None and op.act[0] == "relu"
        clamp = None if (qlo, qhi) == (-128, 127) or (relu and qhi == 127) else (qlo, qhi)
        return KernelSpec(layer, Epilogue(scale=m, zero_point=0, relu=relu, bias=has_bias), abi, wl,
                          folded.astype(np.int32), clamp, m)
    abi = KernelABI(abi.layout, abi.pad_value, abi.prelaid, acc_output=True)
    return KernelSpec(layer, Epilogue(scale=1.0, zero_point=0, relu=False, bias=has_bias), abi, wl,
                      folded.astype(np.int32), None, m, Requant(ms, zy, qlo, qhi, inner))


def describe(op: QuantOp | ActMatmul, spec: KernelSpec) -> str:
    """The accelerator decision's reason: what runs and how the quantisation maps onto it."""
    if isinstance(op, ActMatmul):
        g = spec.act
        assert g is not None
        parts = [f"matmul of two int8 activations: {g.batch} call(s) of {g.m} x {g.k} x {g.n}"
                 + (" (batch dimensions as a loop of calls" + (", A broadcast" if not g.a_step else "")
                    + (", B broadcast" if not g.b_step else "") + ")" if g.batch > 1 else ""),
                 "B, computed at run time, is read in place by the kernel's loads (row stride "
                 f"{g.n}, no copy)"]
        if spec.requant is None:
            parts.append(f"no zero points: mvout requantizes (x{spec.multiplier:.4g})")
        else:
            zy = spec.requant.zero_point
            parts.append(f"int32 accumulators out; the host adds the zero points' terms (z_a = {g.a_zp}, "
                         f"z_b = {g.b_zp}) and requantizes as QLinearMatMul (output zero point {zy})")
        return "; ".join(parts)
    zx, zy = int(np.asarray(op.x_zp).reshape(())), int(np.asarray(op.y_zp).reshape(()))
    parts = [f"{spec.tag} on int8", *op.notes]
    if bias_in_accumulator_units(op)[1]:
        parts.append("bias rescaled to accumulator units (its scale was not s_x * s_w)")
    if zx:
        parts.append(f"input zero point {zx} folded into the bias" + (" and the padding" if spec.abi.pad_value else ""))
    rq = spec.requant
    if op.int_output:
        parts.append("the int32 product itself (MatMulInteger / ConvInteger without zero points: the run-time "
                     "quantized input's zero point terms are the host's, dynamic.py): int32 accumulators read at "
                     "full width")
    elif rq is not None and rq.float_output:
        parts.append("float output (no output scale, as QGemm without y_scale): int32 accumulators out, the host "
                     f"computes float(acc) * s_x * s_w (x{spec.multiplier:.4g}"
                     + (f", {rq.multipliers.size} per-channel scales" if rq.multipliers.size > 1 else "") + ")"
                     + ("; the float bias added after, in float" if rq.float_bias is not None else ""))
    elif rq is None:
        parts.append(f"mvout requantizes (x{spec.multiplier:.4g})")
        if op.act is not None:
            parts.append(f"{op.act[0]} as a host clamp to {list(spec.clamp)}" if spec.clamp
                         else f"{op.act[0]} in the mvout")
    else:
        why = [f"output zero point {zy}"] if zy else []
        if rq.multipliers.size > 1:
            why.append(f"{rq.multipliers.size} per-channel scales")
        parts.append(f"int32 accumulators out, the host requantizes ({' and '.join(why)}: Gemmini's mvout has one "
                     "scale and no zero point)")
        if op.act is not None:
            parts.append(f"{op.act[0]} in the requantisation (clamp to [{rq.lo}, {rq.hi}])")
    return "; ".join(parts)


def kernel_key(spec: KernelSpec) -> tuple[Any, ...]:
    """Ops with equal keys share one kernel (the weights and bias are arguments)."""
    return (spec.layer.model_dump_json(exclude={"name"}), float(np.float32(spec.epilogue.scale)),
            spec.epilogue.relu, spec.abi)
