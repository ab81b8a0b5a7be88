"""Gemmini as a code generation target: TE computes of its layers and tensor intrinsics for its ISA.

Computes (registered with `register_core_compute`): int8 convolution / matmul / depthwise convolution with int32
accumulation, the bias as the accumulator's initial value, and a requantize epilogue
`clip(nearbyint(float32(acc) * scale) [+ zero_point], lo, 127)` (ReLU: lo = zero point).  Loop bounds are the
plan's tile grid (whole tiles; the real extents are clipped inside the intrinsics).

Internal layouts: input I_p[N, G, Hp, Wp, C], weights W_p[G, R, S, C, K], bias_p[G, K],
accumulator / output [N, G, P, Q, K].  The kernel's external layouts are NHWC input, [G, R, S, C, K] weights
(HWIO when G = 1; [K, N] for a matmul), [G*K] bias and NHWC output.

Intrinsics (registered with `register_hw_intrinsic`), one per stage of a tile, the way Gemmini's library runs a
layer (one `sp_tiled_conv` / `loop_conv_ws` call per iteration of the DRAM loops; see tileplan.cost.gemmini):
- gemmini.tile_init   accumulator tile <- bias (armed here, loaded by the tile's first call: mvin3, stride 0)
- gemmini.tile_call   one call: config, input tile (one mvin row per input pixel and up to 64 B of channels, as
                      gemmini.h's MAX_BLOCK_LEN; zero-fill for padding) and weight tile (one row per (r, s, c) and
                      up to 64 output channels) to the scratchpad,
                      then per (DIM output channels, r, s, DIM input channels) one weight preload and one compute
                      per (batch, output row, <= DIM consecutive output columns), accumulating
- gemmini.tile_store  accumulator tile -> DRAM with scale, ReLU and saturation (mvout, one row per output pixel and
                      DIM output channels), straight into an NHWC output (`ComputeDef.store_target`: the
                      caller's, or for an NCHW caller a staging copy the CPU transposes; the schedule drops the
                      padded output stage)
Their implementations call small C functions (`tp_init`, `tp_call`, `tp_store`, see `call_support_c`) that the C
emitter prints into the kernel file: the tile extents are clipped to the layer there (edge tiles), the scratchpad
halves alternate per call and the accumulator halves per output tile (two calls in flight).

The support code uses only names and arities of Gemmini's own include/gemmini.h (ucb-bar/gemmini-rocc-tests),
which the stand-in header (codegen/emulator/gemmini.h) declares the same way; local address bits, which that header
does not name, are the kernel's own TP_* macros.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tvm import te, tirx

from tileplan import emittable
from tileplan.codegen.registry import register_core_compute, register_hw_intrinsic
from tileplan.cost.gemmini import max_block_len

ACC_BIT = 1 << 31
ACCUMULATE_BIT = 1 << 30
GARBAGE = 0xFFFFFFFF
LOCAL_ADDR = "__tp_local_addr"
SPAD_SCOPE = "global.spad"
ACC_SCOPE = "global.acc"


def ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class Epilogue:
    """acc (int32, bias included when `bias`) -> int8: clip(nearbyint(float32(acc) * scale) + zero_point, lo, 127)."""

    scale: float = 1.0
    zero_point: int = 0
    relu: bool = False
    bias: bool = True

    @property
    def lo(self) -> int:
        return self.zero_point if self.relu else -128


@dataclass(frozen=True)
class ConvGeometry:
    """A grouped convolution in canonical sizes plus the padded loop bounds the schedule uses."""

    N: int
    G: int
    K: int
    C: int
    H: int
    W: int
    P: int
    Q: int
    R: int
    S: int
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    padded: dict[str, int] = field(default_factory=dict)  # loop bounds after padding, per dim (N,G,K,C,P,Q,R,S)
    # Groups packed into one (Mapping.group_pack): G, C and K above are then the packed layer's (G / pack groups
    # of pack x C input and pack x K output channels, block-diagonal weights); the caller's weights keep the
    # layer's own grouping (`weight_shape`), the input, output and bias layouts are the same either way.
    pack: int = 1

    @property
    def weight_shape(self) -> tuple[int, int, int, int, int]:
        """The caller's weights [G, R, S, C, K] in the layer's own grouping."""
        return (self.G * self.pack, self.R, self.S, self.C // self.pack, self.K // self.pack)

    def unpacked(self) -> ConvGeometry:
        """The layer's own geometry (one group per group), without the padded bounds."""
        if self.pack == 1:
            return self
        g, r, s, c, k = self.weight_shape
        return replace(self, G=g, C=c, K=k, pack=1, padded={})

    def bound(self, d: str) -> int:
        return self.padded.get(d, getattr(self, d))

    @property
    def folds_stride(self) -> bool:
        """A 1x1 filter reads only every stride-th pixel: the host copy subsamples, the array sees stride 1."""
        return self.bound("R") == 1 and self.bound("S") == 1 and self.stride != (1, 1)

    @property
    def array_stride(self) -> tuple[int, int]:
        """The stride the accelerator's loop nest uses on the (host-prepared) input I_p."""
        return (1, 1) if self.folds_stride else self.stride

    @property
    def Hp(self) -> int:
        return (self.bound("P") - 1) * self.array_stride[0] + (self.bound("R") - 1) * self.dilation[0] + 1

    @property
    def Wp(self) -> int:
        return (self.bound("Q") - 1) * self.array_stride[1] + (self.bound("S") - 1) * self.dilation[1] + 1


@dataclass(frozen=True)
class KernelABI:
    """How a kernel meets its caller.  The defaults are the per-layer kernels' ABI (NHWC, zero padding, W and
    bias copied into the padded layouts on every call); a whole-model program (tileplan.frontend) asks for:

    - `layout="NCHW"`: a convolution's input and output in the model's own NCHW layout (the host-side padding
      copy reads it and the un-padding copy writes it, so no separate transposes); a matmul is row-major either way;
    - `pad_value`: the int8 value of the input's spatial padding (a quantized model's input zero point, so that
      padded pixels contribute (z_x - z_x) * w = 0 once the bias absorbs -z_x * sum(w)); with a non-zero value the
      kernel reads padding rows from memory instead of zero-filling them;
    - `prelaid=True`: the weights and bias arrive already in the kernel's padded layouts, W_p[G_p, R_p, S_p, C_p,
      K_p] int8 and bias_p[G_p, K_p] int32 (`CallLayout.padded`), so no per-call weight copy; the kernel's
      parameters are then (I, W_p, bias_p, out, workspace);
    - `acc_output=True`: the kernel stores the int32 accumulators (bias included; mvout with the read-full bit,
      no scale or activation) and the caller requantizes: exact where Gemmini's mvout cannot be (an output zero
      point, per-channel scales);
    - `b_in_place=True` (a matmul, with `prelaid`): the second operand is the caller's unpadded row-major
      B [K, N] (an activation computed at run time), read where it lies: the weight loads use row stride N
      instead of the padded layout's K_p (they only ever read the real rows and columns), so nothing copies or
      pads it; the `W_p` parameter is B itself."""

    layout: str = "NHWC"
    pad_value: int = 0
    prelaid: bool = False
    acc_output: bool = False
    b_in_place: bool = False

    def __post_init__(self) -> None:
        if self.b_in_place and not self.prelaid:
            raise ValueError("b_in_place reads the caller's B as the W_p parameter: it needs prelaid=True")
        if self.layout not in ("NHWC", "NCHW"):
            raise ValueError(f"layout must be NHWC or NCHW, got {self.layout!r}")
        if not -128 <= self.pad_value <= 127:
            raise ValueError(f"pad_value must be an int8, got {self.pad_value}")


def pack_weights(weights: Any, pack: int) -> Any:
    """Weights [G, R, S, C, K] (numpy) as the packed layer's [G / pack, R, S, pack x C, pack x K]: group i of each
    pack on the diagonal, zeros elsewhere (ConvGeometry.pack; what the kernel's W_p stage computes)."""
    import numpy as np

    if pack == 1:
        return weights
    g, r, s, c, k = weights.shape
    if g % pack:
        raise ValueError(f"{pack} does not divide the {g} groups")
    out = np.zeros((g // pack, r, s, pack * c, pack * k), weights.dtype)
    for i in range(pack):
        out[:, :, :, i * c:(i + 1) * c, i * k:(i + 1) * k] = weights[i::pack]
    return out


@dataclass
class ComputeDef:
    geometry: ConvGeometry
    epilogue: Epilogue
    inputs: list[te.Tensor]  # external: I (NHWC or NCHW), W ([G,R,S,C,K]) or W_p, bias ([G*K]) or bias_p
    output: te.Tensor  # external: NHWC or NCHW
    acc: te.Tensor
    out_padded: te.Tensor
    bias_padded: te.Tensor
    pad_stages: list[str]
    # The tile store writes the NHWC tensor named `store_target` directly (each output pixel's G x K channels
    # contiguous), so the padded out_p and the CPU's copy of it go away: the caller's `out` itself, or, for an
    # NCHW output, an NHWC staging copy in the workspace that the CPU transposes into `out` after the fence.
    store_target: str = "out"
    abi: KernelABI = field(default_factory=KernelABI)

    @property
    def params(self) -> list[te.Tensor]:
        """The PrimFunc's parameters: the external tensors, then bias_p as a trailing workspace parameter unless
        it is an input (prelaid)."""
        extra = [] if self.abi.prelaid else [self.bias_padded]
        return [*self.inputs, self.output, *extra]


def _requant(x: tirx.PrimExpr, epi: Epilogue) -> tirx.PrimExpr:
    v = tirx.nearbyint(tirx.Cast("float32", x) * tirx.const(epi.scale, "float32"))
    if epi.zero_point:
        v = v + tirx.const(float(epi.zero_point), "float32")
    v = tirx.min(v, tirx.const(127.0, "float32"))
    v = tirx.max(v, tirx.const(float(epi.lo), "float32"))
    return tirx.Cast("int8", v)


def build_conv(geo: ConvGeometry, epi: Epilogue, abi: KernelABI | None = None) -> ComputeDef:
    """TE of a grouped int8 convolution with fused bias and requantize, padded for DIM-block tiling."""
    abi = abi or KernelABI()
    N, G, K, C = geo.bound("N"), geo.bound("G"), geo.bound("K"), geo.bound("C")
    P, Q, R, S = geo.bound("P"), geo.bound("Q"), geo.bound("R"), geo.bound("S")
    sh, sw = geo.array_stride
    fh, fw = (geo.stride if geo.folds_stride else (1, 1))  # host-side subsampling of the input
    dh, dw = geo.dilation
    ph, pw = geo.padding
    nchw = abi.layout == "NCHW"
    if nchw:
        I = te.placeholder((geo.N, geo.G * geo.C, geo.H, geo.W), "int8", name="I")
    else:
        I = te.placeholder((geo.N, geo.H, geo.W, geo.G * geo.C), "int8", name="I")
    zero8 = tirx.const(0, "int8")
    pad8 = tirx.const(abi.pad_value, "int8")
    stages = []

    def load_i(n: tirx.PrimExpr, h: tirx.PrimExpr, w: tirx.PrimExpr, ch: tirx.PrimExpr) -> tirx.PrimExpr:
        return I[n, ch, h, w] if nchw else I[n, h, w, ch]

    Hp, Wp = geo.Hp, geo.Wp
    I_p = te.compute(
        (N, G, Hp, Wp, C),
        lambda n, g, h, w, c: tirx.if_then_else(
            tirx.all(n < geo.N, g < geo.G, c < geo.C, h * fh >= ph, h * fh < geo.H + ph, w * fw >= pw,
                     w * fw < geo.W + pw),
            load_i(tirx.min(n, geo.N - 1), tirx.min(tirx.max(h * fh - ph, 0), geo.H - 1),
                   tirx.min(tirx.max(w * fw - pw, 0), geo.W - 1),
                   tirx.min(g, geo.G - 1) * geo.C + tirx.min(c, geo.C - 1)),
            pad8),
        name="I_p")
    stages.append("I_p")
    if abi.prelaid:  # already padded, in the layouts the calls read
        W_p = te.placeholder((G, R, S, C, K), "int8", name="W_p")
        b_p = te.placeholder((G, K), "int32", name="bias_p")
        inputs = [I, W_p, b_p]
    else:
        Wt = te.placeholder(geo.weight_shape, "int8", name="Wt")
        bias = te.placeholder((geo.G * geo.K,), "int32", name="bias")
        if geo.pack == 1:
            W_p = te.compute(
                (G, R, S, C, K),
                lambda g, r, s, c, k: tirx.if_then_else(
                    tirx.all(g < geo.G, r < geo.R, s < geo.S, c < geo.C, k < geo.K),
                    Wt[tirx.min(g, geo.G - 1), tirx.min(r, geo.R - 1), tirx.min(s, geo.S - 1), tirx.min(c, geo.C - 1),
                       tirx.min(k, geo.K - 1)],
                    zero8),
                name="W_p")
        else:  # block-diagonal: packed channel c of group g is channel c % C1 of the layer's group g * pack + c // C1
            _, _, _, c1, k1 = geo.weight_shape
            W_p = te.compute(
                (G, R, S, C, K),
                lambda g, r, s, c, k: tirx.if_then_else(
                    tirx.all(g < geo.G, r < geo.R, s < geo.S, c < geo.C, k < geo.K, c // c1 == k // k1),
                    Wt[tirx.min(g, geo.G - 1) * geo.pack + tirx.min(c, geo.C - 1) // c1, tirx.min(r, geo.R - 1),
                       tirx.min(s, geo.S - 1), tirx.min(c, geo.C - 1) % c1, tirx.min(k, geo.K - 1) % k1],
                    zero8),
                name="W_p")
        stages.append("W_p")
        b_p = te.compute(
            (G, K),
            lambda g, k: tirx.if_then_else(tirx.all(g < geo.G, k < geo.K, tirx.const(bool(epi.bias))),
                                           bias[tirx.min(g, geo.G - 1) * geo.K + tirx.min(k, geo.K - 1)],
                                           tirx.const(0, "int32")),
            name="bias_p")
        stages.append("bias_p")
        inputs = [I, Wt, bias]
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    c = te.reduce_axis((0, C), name="c")
    acc = te.compute(
        (N, G, P, Q, K),
        lambda n, g, p, q, k: te.sum(
            I_p[n, g, p * sh + r * dh, q * sw + s * dw, c].astype("int32") * W_p[g, r, s, c, k].astype("int32"),
            axis=[r, s, c]),
        name="acc")
    if abi.acc_output:  # the int32 accumulators themselves: the caller requantizes
        out_p = te.compute((N, G, P, Q, K), lambda n, g, p, q, k: acc[n, g, p, q, k], name="out_p")
    else:
        out_p = te.compute((N, G, P, Q, K), lambda n, g, p, q, k: _requant(acc[n, g, p, q, k], epi), name="out_p")
    nhwc = te.compute((geo.N, geo.P, geo.Q, geo.G * geo.K),
                      lambda n, p, q, gk: out_p[n, gk // geo.K, p, q, gk % geo.K], name="out_nhwc" if nchw else "out")
    if nchw:  # the mvouts cannot write NCHW (channels are a row): they write an NHWC staging copy (rows G x K
        # channels apart, as the cost model counts them), which the CPU transposes into `out` after the fence
        out = te.compute((geo.N, geo.G * geo.K, geo.P, geo.Q), lambda n, gk, p, q: nhwc[n, p, q, gk], name="out")
        return ComputeDef(geo, epi, inputs, out, acc, out_p, b_p, stages, store_target="out_nhwc", abi=abi)
    return ComputeDef(geo, epi, inputs, nhwc, acc, out_p, b_p, stages, abi=abi)


@register_core_compute(tag="gemmini.conv2d")
def conv2d_compute(geo: ConvGeometry, epi: Epilogue, abi: KernelABI | None = None) -> ComputeDef:
    return build_conv(geo, epi, abi)


@register_core_compute(tag="gemmini.depthwise_conv2d")
def depthwise_compute(geo: ConvGeometry, epi: Epilogue, abi: KernelABI | None = None) -> ComputeDef:
    if geo.C != geo.pack or geo.K != geo.pack:
        raise ValueError("a depthwise convolution has one input and one output channel per group")
    return build_conv(geo, epi, abi)


@register_core_compute(tag="gemmini.matmul")
def matmul_compute(geo: ConvGeometry, epi: Epilogue, abi: KernelABI | None = None) -> ComputeDef:
    """Y[M, N] = A[M, K] B[K, N]: a 1x1 convolution over a 1 x M image (rows of A are pixels); A and Y are
    row-major whatever the ABI's layout (it is NHWC with N = H = 1)."""
    if (geo.N, geo.G, geo.H, geo.P, geo.R, geo.S) != (1, 1, 1, 1, 1, 1):
        raise ValueError("a matmul is a 1x1 convolution over one row of M pixels")
    if abi is not None and abi.layout != "NHWC":
        abi = KernelABI("NHWC", abi.pad_value, abi.prelaid, abi.acc_output, abi.b_in_place)
    return build_conv(geo, epi, abi)


# ------------------------------------------------------------------------------------------------------------------
# Intrinsics: one per stage of a tile (see the module docstring)


@dataclass(frozen=True)
class TileShape:
    """The full tile of one call (elements) and the array's view of the input window."""

    n: int
    p: int
    q: int
    k: int
    r: int
    s: int
    c: int
    sh: int  # strides / dilations the array uses on I_p
    sw: int
    dh: int
    dw: int

    @property
    def h_win(self) -> int:
        return (self.p - 1) * self.sh + (self.r - 1) * self.dh + 1

    @property
    def w_win(self) -> int:
        return (self.q - 1) * self.sw + (self.s - 1) * self.dw + 1


def _strided(var: str, n: int) -> str:
    return "[" + ", ".join(f"{var}{i}" for i in range(n - 1)) + ", 1]"


def _sym(var: str, n: int) -> str:
    return "".join(f"    {var}{i} = T.int32()\n" for i in range(n - 1))


def _nest(name: str, axes: list[tuple[str, int, str]], body: str) -> str:
    """Loops over every axis, a block binding only the non-unit ones (TVM's blocks drop unit iterators, so the
    description must too); unit axes are the constant 0 in `body` (axis names are `{name}` fields)."""
    live = [(v, e, k) for v, e, k in axes if e > 1]
    subst = {v: (f"v{v}" if e > 1 else "0") for v, e, _ in axes}
    out, ind = "", "        "
    out += f"{ind}for {', '.join(v for v, _, _ in axes)} in T.grid({', '.join(str(e) for _, e, _ in axes)}):\n"
    ind += "    "
    out += f"{ind}with T.sblock(\"{name}\"):\n"
    if live:
        kinds = "".join(k for _, _, k in live)
        out += (f"{ind}    {', '.join('v' + v for v, _, _ in live)} = "
                f"T.axis.remap(\"{kinds}\", [{', '.join(v for v, _, _ in live)}])\n")
    return out + f"{ind}    {body.format(**subst)}\n"


def _lin(*terms: tuple[str, int]) -> str:
    """An index expression with the constant-0 (unit) axes dropped."""
    parts = [v if m == 1 else f"{v} * {m}" for v, m in terms if v != "0"]
    return " + ".join(parts) if parts else "0"


class _ScriptNames:
    """TVMScript's `T` for parsing a tile intrinsic's source: TVM's own, except that the `@T.prim_func(...)`
    decorator, which the parser evaluates only for its dispatch token, does not walk the Python stack
    (`inspect.stack()` reads the source file of every frame: 0.25 s per intrinsic, three quarters of a cold
    compile's code generation on ResNet-18).  The parser reads the decorator's keywords from the syntax tree, so
    what it builds is the same."""

    def __init__(self, base: Any) -> None:
        self._base = base

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    @staticmethod
    def prim_func(*args: Any, **kwargs: Any) -> Any:
        def token() -> None:
            raise AssertionError("only the parser's dispatch token is read")

        token.dispatch_token = "tirx"  # type: ignore[attr-defined]
        return token


_SCRIPT_GLOBALS: dict[str, Any] = {}


def parse_source(src: str) -> Any:
    """A TVMScript source (tile_call_source and the others) parsed into its function."""
    import tvm

    if not _SCRIPT_GLOBALS:
        from tvm.script.parser.core.entry import _default_globals

        names = _default_globals()
        names["T"] = names["tir"] = _ScriptNames(names["T"])
        _SCRIPT_GLOBALS.update(names)
    return tvm.script.from_source(src, extra_vars=dict(_SCRIPT_GLOBALS))


_ACC = f"T.call_extern(\"uint32\", \"{LOCAL_ADDR}\", C.access_ptr(\"rw\"), T.uint32({ACC_BIT}))"


def _extern(fn: str, host: bool) -> tuple[str, str]:
    """(C function, accumulator argument) of a tile intrinsic's implementation.  The kernel C names the
    accumulator tile by its local row address (`__tp_local_addr`, resolved by the C emitter); the host module
    (TVM's llvm build, see pipeline.host_library) calls the `tp_host_*` glue with the tile's offset in the
    accumulator buffer instead, since on the host that buffer is ordinary memory with no row address."""
    return (f"tp_host_{fn}", "C.elem_offset") if host else (f"tp_{fn}", _ACC)


def _acc_decl(t: TileShape) -> str:
    return (_sym("c", 5) + f"    C = T.match_buffer(c, ({t.n}, 1, {t.p}, {t.q}, {t.k}), \"int32\", "
            f"strides={_strided('c', 5)}, offset_factor=1, scope=\"{ACC_SCOPE}\")\n")


# -- the same intrinsics built with TVM's IR builder ---------------------------------------------------------------
# TVMScript's parser takes ~0.1 s per function (it converts and evaluates the Python syntax tree), and a cold
# compile registers two functions for each stage of every distinct tile shape (98 on ResNet-18: most of its code
# generation).  The builder makes the same functions in milliseconds; the sources above stay the readable
# definition, and tests/codegen/test_intrinsic_builder.py holds the two structurally equal.


def _named(name: str, v: Any) -> Any:
    from tvm.script.ir_builder import IRBuilder

    return IRBuilder.name(name, v)


def _build(args: tuple[str, ...], body: Callable[[Any, list[Any]], None]) -> Any:
    """`@T.prim_func(s_tir=True) def f(<args>: T.handle) -> None`, its body built by `body(T, handles)`."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    with IRBuilder() as ib:
        with T.prim_func(is_private=False, s_tir=True):
            T.func_name("f")
            handles = [T.arg(a, T.handle()) for a in args]
            T.func_ret(None)
            body(T, handles)
    return ib.get()


def _match(T: Any, handle: Any, name: str, letter: str, shape: tuple[int, ...], dtype: str,
           scope: str | None = None) -> Any:
    strides = [_named(f"{letter}{i}", T.int32()) for i in range(len(shape) - 1)] + [1]
    kw = {"scope": scope} if scope else {}
    return _named(name, T.match_buffer(handle, shape, dtype, strides=strides, offset_factor=1, **kw))


def _acc_buffer(T: Any, handle: Any, t: TileShape) -> Any:
    return _match(T, handle, "C", "c", (t.n, 1, t.p, t.q, t.k), "int32", ACC_SCOPE)


def _whole(buf: Any) -> Any:
    return buf[tuple(slice(0, int(e)) for e in buf.shape)]


def _nest_built(T: Any, name: str, axes: list[tuple[str, int, str]], store: Callable[[dict[str, Any]], None]) -> None:
    """`_nest` with the builder; `store(idx)` writes the block's value, idx[axis] being the block variable of a
    non-unit axis and the constant 0 of a unit one."""
    with T.grid(*[e for _, e, _ in axes]) as loops:
        loops = [loops] if isinstance(loops, tirx.Var) else list(loops)
        for (v, _, _), lv in zip(axes, loops):
            _named(v, lv)
        with T.sblock(name):
            live = [(v, lv, k) for (v, e, k), lv in zip(axes, loops) if e > 1]
            idx: dict[str, Any] = {v: 0 for v, _, _ in axes}
            if live:
                bound = T.axis.remap("".join(k for _, _, k in live), [lv for _, lv, _ in live])
                bound = [bound] if isinstance(bound, tirx.Var) else list(bound)
                for (v, _, _), bv in zip(live, bound):
                    idx[v] = _named(f"v{v}", bv)
            store(idx)


def _lin_built(*terms: tuple[Any, int]) -> Any:
    """`_lin` with the builder: constant-0 (unit) axes dropped."""
    parts = [v if m == 1 else v * m for v, m in terms if not isinstance(v, int)]
    if not parts:
        return 0
    out = parts[0]
    for x in parts[1:]:
        out = out + x
    return out


def _acc_arg(T: Any, C: Any, host: bool) -> Any:
    if host:
        return C.elem_offset
    return T.call_extern("uint32", LOCAL_ADDR, C.access_ptr("rw"), T.uint32(ACC_BIT))


def _built_call(t: TileShape, host: bool) -> tuple[Any, Any]:
    axes = [("n", t.n, "S"), ("g", 1, "S"), ("p", t.p, "S"), ("q", t.q, "S"), ("k", t.k, "S"), ("r", t.r, "R"),
            ("s", t.s, "R"), ("c", t.c, "R")]

    def head(T: Any, h: list[Any]) -> tuple[Any, Any, Any]:
        A = _match(T, h[0], "A", "a", (t.n, 1, t.h_win, t.w_win, t.c), "int8")
        B = _match(T, h[1], "B", "b", (1, t.r, t.s, t.c, t.k), "int8")
        return A, B, _acc_buffer(T, h[2], t)

    def desc(T: Any, h: list[Any]) -> None:
        A, B, C = head(T, h)

        def store(i: dict[str, Any]) -> None:
            o = [i["n"], i["g"], i["p"], i["q"], i["k"]]
            a = T.Cast("int32", A[i["n"], i["g"], _lin_built((i["p"], t.sh), (i["r"], t.dh)),
                                   _lin_built((i["q"], t.sw), (i["s"], t.dw)), i["c"]])
            T.buffer_store(C, C[tuple(o)] + a * T.Cast("int32", B[i["g"], i["r"], i["s"], i["c"], i["k"]]), o)

        with T.sblock("root"):
            T.reads(_whole(C), _whole(A), _whole(B))
            T.writes(_whole(C))
            _nest_built(T, "update", axes, store)

    def impl(T: Any, h: list[Any]) -> None:
        A, B, C = head(T, h)
        fn, _ = _extern("call", host)
        with T.sblock("root"):
            T.reads(_whole(C), _whole(A), _whole(B))
            T.writes(_whole(C))
            T.evaluate(T.call_extern("int32", fn, A.access_ptr("r"), A.elem_offset, B.access_ptr("r"),
                                     B.elem_offset, _acc_arg(T, C, host)))

    return _build(("a", "b", "c"), desc), _build(("a", "b", "c"), impl)


def _built_init(t: TileShape, host: bool) -> tuple[Any, Any]:
    axes = [("n", t.n, "S"), ("g", 1, "S"), ("p", t.p, "S"), ("q", t.q, "S"), ("k", t.k, "S")]

    def head(T: Any, h: list[Any]) -> tuple[Any, Any]:
        return _match(T, h[0], "Bi", "b", (1, t.k), "int32"), _acc_buffer(T, h[1], t)

    def desc(T: Any, h: list[Any]) -> None:
        Bi, C = head(T, h)
        with T.sblock("root"):
            T.reads(Bi[0:1, 0:t.k])
            T.writes(_whole(C))
            _nest_built(T, "init", axes, lambda i: T.buffer_store(
                C, Bi[i["g"], i["k"]], [i["n"], i["g"], i["p"], i["q"], i["k"]]))

    def impl(T: Any, h: list[Any]) -> None:
        Bi, C = head(T, h)
        fn, _ = _extern("init", host)
        offset = [Bi.elem_offset] if host else []
        with T.sblock("root"):
            T.reads(Bi[0:1, 0:t.k])
            T.writes(_whole(C))
            T.evaluate(T.call_extern("int32", fn, Bi.access_ptr("r"), *offset, _acc_arg(T, C, host)))

    return _build(("b", "c"), desc), _build(("b", "c"), impl)


def _built_store(t: TileShape, scale: float, lo: int, host: bool, full: bool) -> tuple[Any, Any]:
    axes = [("n", t.n, "S"), ("g", 1, "S"), ("p", t.p, "S"), ("q", t.q, "S"), ("k", t.k, "S")]

    def head(T: Any, h: list[Any]) -> tuple[Any, Any]:
        C = _acc_buffer(T, h[0], t)
        return C, _match(T, h[1], "O", "o", (t.n, 1, t.p, t.q, t.k), "int32" if full else "int8")

    def desc(T: Any, h: list[Any]) -> None:
        C, O = head(T, h)

        def store(i: dict[str, Any]) -> None:
            o = [i["n"], i["g"], i["p"], i["q"], i["k"]]
            v = C[tuple(o)]
            if not full:
                v = T.Cast("int8", T.max(T.min(T.nearbyint(T.Cast("float32", v) * T.float32(float(scale))),
                                               T.float32(127.0)), T.float32(float(lo))))
            T.buffer_store(O, v, o)

        with T.sblock("root"):
            T.reads(_whole(C))
            T.writes(_whole(O))
            _nest_built(T, "store", axes, store)

    def impl(T: Any, h: list[Any]) -> None:
        C, O = head(T, h)
        fn, _ = _extern("store", host)
        with T.sblock("root"):
            T.reads(_whole(C))
            T.writes(_whole(O))
            T.evaluate(T.call_extern("int32", fn, O.access_ptr("w"), O.elem_offset, _acc_arg(T, C, host)))

    return _build(("c", "o"), desc), _build(("c", "o"), impl)


@register_hw_intrinsic("gemmini.tile_call")
def tile_call(n: int, p: int, q: int, k: int, r: int, s: int, c: int, sh: int, sw: int, dh: int,
              dw: int, host: bool = False) -> tuple[Any, Any]:
    return _built_call(TileShape(n, p, q, k, r, s, c, sh, sw, dh, dw), host)


def tile_call_source(n: int, p: int, q: int, k: int, r: int, s: int, c: int, sh: int, sw: int, dh: int,
                     dw: int, host: bool = False) -> tuple[str, str]:
    """TVMScript of tile_call's description and implementation (what the builder makes)."""
    t = TileShape(n, p, q, k, r, s, c, sh, sw, dh, dw)
    a_shape = f"({t.n}, 1, {t.h_win}, {t.w_win}, {t.c})"
    b_shape = f"(1, {t.r}, {t.s}, {t.c}, {t.k})"
    c_rng = f"C[0:{t.n}, 0:1, 0:{t.p}, 0:{t.q}, 0:{t.k}]"
    a_rng = f"A[0:{t.n}, 0:1, 0:{t.h_win}, 0:{t.w_win}, 0:{t.c}]"
    b_rng = f"B[0:1, 0:{t.r}, 0:{t.s}, 0:{t.c}, 0:{t.k}]"
    head = ("@T.prim_func(s_tir=True)\ndef f(a: T.handle, b: T.handle, c: T.handle) -> None:\n"
            + _sym("a", 5) + f"    A = T.match_buffer(a, {a_shape}, \"int8\", strides={_strided('a', 5)}, offset_factor=1)\n"
            + _sym("b", 5) + f"    B = T.match_buffer(b, {b_shape}, \"int8\", strides={_strided('b', 5)}, offset_factor=1)\n"
            + _acc_decl(t) + "    with T.sblock(\"root\"):\n"
            f"        T.reads({c_rng}, {a_rng}, {b_rng})\n        T.writes({c_rng})\n")
    axes = [("n", t.n, "S"), ("g", 1, "S"), ("p", t.p, "S"), ("q", t.q, "S"), ("k", t.k, "S"), ("r", t.r, "R"),
            ("s", t.s, "R"), ("c", t.c, "R")]
    body = ("C[{n}, {g}, {p}, {q}, {k}] = C[{n}, {g}, {p}, {q}, {k}] + T.Cast(\"int32\", A[{n}, {g}, HIDX, WIDX, {c}]) "
            "* T.Cast(\"int32\", B[{g}, {r}, {s}, {c}, {k}])")
    body = body.replace("HIDX", "__H__").replace("WIDX", "__W__")
    live = {v: (f"v{v}" if e > 1 else "0") for v, e, _ in axes}
    body = (body.replace("__H__", _lin((live["p"], t.sh), (live["r"], t.dh)))
            .replace("__W__", _lin((live["q"], t.sw), (live["s"], t.dw))))
    body = body.replace("{", "{{").replace("}", "}}")
    for v in live:  # re-open the axis fields
        body = body.replace("{{" + v + "}}", "{" + v + "}")
    desc = head + _nest("update", axes, body)
    fn, acc = _extern("call", host)
    impl = head + (
        f"        T.evaluate(T.call_extern(\"int32\", \"{fn}\", A.access_ptr(\"r\"), A.elem_offset, "
        f"B.access_ptr(\"r\"), B.elem_offset, {acc}))\n")
    return desc, impl


@register_hw_intrinsic("gemmini.tile_init")
def tile_init(n: int, p: int, q: int, k: int, host: bool = False) -> tuple[Any, Any]:
    return _built_init(TileShape(n, p, q, k, 1, 1, 1, 1, 1, 1, 1), host)


def tile_init_source(n: int, p: int, q: int, k: int, host: bool = False) -> tuple[str, str]:
    """TVMScript of tile_init's description and implementation."""
    t = TileShape(n, p, q, k, 1, 1, 1, 1, 1, 1, 1)
    c_rng = f"C[0:{t.n}, 0:1, 0:{t.p}, 0:{t.q}, 0:{t.k}]"
    head = ("@T.prim_func(s_tir=True)\ndef f(b: T.handle, c: T.handle) -> None:\n"
            + _sym("b", 2) + f"    Bi = T.match_buffer(b, (1, {t.k}), \"int32\", strides={_strided('b', 2)}, offset_factor=1)\n"
            + _acc_decl(t) + "    with T.sblock(\"root\"):\n"
            f"        T.reads(Bi[0:1, 0:{t.k}])\n        T.writes({c_rng})\n")
    axes = [("n", t.n, "S"), ("g", 1, "S"), ("p", t.p, "S"), ("q", t.q, "S"), ("k", t.k, "S")]
    desc = head + _nest("init", axes, "C[{n}, {g}, {p}, {q}, {k}] = Bi[{g}, {k}]")
    fn, acc = _extern("init", host)
    offset = "Bi.elem_offset, " if host else ""  # the host glue registers bias_p with the emulator
    impl = head + f"        T.evaluate(T.call_extern(\"int32\", \"{fn}\", Bi.access_ptr(\"r\"), {offset}{acc}))\n"
    return desc, impl


@register_hw_intrinsic("gemmini.tile_store")
def tile_store(n: int, p: int, q: int, k: int, scale: float, lo: int, host: bool = False,
               full: bool = False) -> tuple[Any, Any]:
    """`full`: the int32 accumulators are stored as they are (mvout with the read-full bit)."""
    return _built_store(TileShape(n, p, q, k, 1, 1, 1, 1, 1, 1, 1), scale, lo, host, full)


def tile_store_source(n: int, p: int, q: int, k: int, scale: float, lo: int, host: bool = False,
                      full: bool = False) -> tuple[str, str]:
    """TVMScript of tile_store's description and implementation."""
    t = TileShape(n, p, q, k, 1, 1, 1, 1, 1, 1, 1)
    c_rng = f"C[0:{t.n}, 0:1, 0:{t.p}, 0:{t.q}, 0:{t.k}]"
    o_rng = f"O[0:{t.n}, 0:1, 0:{t.p}, 0:{t.q}, 0:{t.k}]"
    odt = "int32" if full else "int8"
    head = ("@T.prim_func(s_tir=True)\ndef f(c: T.handle, o: T.handle) -> None:\n" + _acc_decl(t)
            + _sym("o", 5) + f"    O = T.match_buffer(o, ({t.n}, 1, {t.p}, {t.q}, {t.k}), \"{odt}\", "
            f"strides={_strided('o', 5)}, offset_factor=1)\n"
            "    with T.sblock(\"root\"):\n"
            f"        T.reads({c_rng})\n        T.writes({o_rng})\n")
    axes = [("n", t.n, "S"), ("g", 1, "S"), ("p", t.p, "S"), ("q", t.q, "S"), ("k", t.k, "S")]
    body = ("O[{n}, {g}, {p}, {q}, {k}] = T.Cast(\"int8\", T.max(T.min(T.nearbyint(T.Cast(\"float32\", "
            "C[{n}, {g}, {p}, {q}, {k}]) * T.float32(SCALE)), T.float32(127.0)), T.float32(LOW)))")
    if full:
        body = "O[{n}, {g}, {p}, {q}, {k}] = C[{n}, {g}, {p}, {q}, {k}]"
    desc = head + _nest("store", axes, body.replace("SCALE", repr(float(scale))).replace("LOW", repr(float(lo))))
    fn, acc = _extern("store", host)
    impl = head + (
        f"        T.evaluate(T.call_extern(\"int32\", \"{fn}\", O.access_ptr(\"w\"), O.elem_offset, {acc}))\n")
    return desc, impl


# ------------------------------------------------------------------------------------------------------------------
# The per-call functions the intrinsics call (printed into the kernel's C file)


@dataclass(frozen=True)
class CallLayout:
    """Everything the per-call C functions need: real and padded bounds, tile, local memory layout."""

    dim: int
    real: dict[str, int]  # per group: N, P, Q, K, R, S, C
    padded: dict[str, int]  # tile-grid bounds: N, G, P, Q, K, R, S, C
    tile: TileShape
    hp: int  # I_p rows / cols
    wp: int
    in_rows: tuple[int, int]  # [lo, hi) rows of I_p that hold real input (others are zero padding)
    in_cols: tuple[int, int]
    double_buffer: bool
    has_bias: bool
    bias_ahead: bool = True  # the first output-channel block's bias rows before the tiles (see tp_call)
    # Keep a call's input / weight tile in the scratchpad while the following calls use the same one (tp_call;
    # the cost model counts the loads the same way: tileplan.cost.gemmini, Execution.reuse)
    reuse: bool = True
    # Kernel columns folded into the array rows (tileplan.cost.gemmini.kernel_fold; 1 = none): the input tile is
    # then one row per (kernel-column block, batch, input row, output column) holding fold x C channels
    fold: int = 1
    # tp_store writes the caller's NHWC output (G x K channels per pixel) instead of the padded out_p
    store_direct: bool = False
    acc_output: bool = False  # store the int32 accumulators (KernelABI.acc_output)
    w_in_place: bool = False  # the weight loads read the caller's unpadded [C, K] rows (KernelABI.b_in_place)

    @property
    def store_pixel(self) -> int:
        """Elements between consecutive output pixels in what tp_store writes."""
        return self.padded["G"] * self.real["K"] if self.store_direct else self.padded["K"]

    @property
    def store_stride(self) -> int:
        """Bytes between consecutive output pixels in what tp_store writes (config_st's stride)."""
        return self.store_pixel * (4 if self.acc_output else 1)

    @property
    def cb(self) -> int:
        return -(-self.tile.c // self.dim)

    @property
    def kb(self) -> int:
        return -(-self.tile.k // self.dim)

    # (the rows a call takes are counted by tileplan.emittable, the rule the planner ranks tilings with)
    @property
    def in_tile_rows(self) -> int:
        t = self.tile
        return emittable.input_rows(self.dim, t.n, t.p, t.q, t.r, t.s, t.c, (t.sh, t.sw), (t.dh, t.dw), self.fold)

    @property
    def w_tile_rows(self) -> int:
        t = self.tile
        return emittable.weight_rows(self.dim, t.k, t.r, t.s, t.c)

    @property
    def spad_call_rows(self) -> int:
        return self.in_tile_rows + self.w_tile_rows

    @property
    def acc_tile_rows(self) -> int:
        t = self.tile
        return emittable.acc_rows(self.dim, t.n, t.p, t.q, t.k)

    @property
    def halves(self) -> int:
        return 2 if self.double_buffer else 1

    @property
    def mvin_cols(self) -> int:
        """int8 columns one mvin row carries: gemmini.h's MAX_BLOCK_LEN = 64 B // DIM blocks (at least one),
        i.e. one DMA request, as the library's loaders (and the cost model's request count) do."""
        return self.dim * max_block_len(self.dim)

    @property
    def in_block_rows(self) -> int:
        """Scratchpad rows between consecutive channel blocks of the input tile."""
        return self.tile.n * self.tile.h_win * self.tile.w_win

    @property
    def w_block_rows(self) -> int:
        """Scratchpad rows between consecutive output-channel blocks of the weight tile."""
        return self.tile.r * self.tile.s * self.tile.c


def call_support_c(lay: CallLayout) -> str:
    """C of tp_init / tp_call / tp_store for one layer (static functions, constants as macros)."""
    t, r, pd = lay.tile, lay.real, lay.padded
    consts = dict(
        TP_DIM=lay.dim, TP_N=r["N"], TP_P=r["P"], TP_Q=r["Q"], TP_K=r["K"], TP_R=r["R"], TP_S=r["S"], TP_C=r["C"],
        TP_GP=pd["G"], TP_PP=pd["P"], TP_QP=pd["Q"], TP_KP=pd["K"], TP_RP=pd["R"], TP_SP=pd["S"], TP_CP=pd["C"],
        TP_HP=lay.hp, TP_WP=lay.wp, TP_H0=lay.in_rows[0], TP_H1=lay.in_rows[1], TP_W0=lay.in_cols[0],
        TP_W1=lay.in_cols[1], TP_TN=t.n, TP_TP=t.p, TP_TQ=t.q, TP_TK=t.k, TP_TR=t.r, TP_TS=t.s, TP_TC=t.c,
        TP_SH=t.sh, TP_SW=t.sw, TP_DH=t.dh, TP_DW=t.dw, TP_HWIN=t.h_win, TP_WWIN=t.w_win,
        TP_IN_ROWS=lay.in_tile_rows, TP_SPAD_HALF=lay.spad_call_rows, TP_ACC_HALF=lay.acc_tile_rows,
        TP_DB=int(lay.double_buffer), TP_HAS_BIAS=int(lay.has_bias), TP_MVIN_COLS=lay.mvin_cols,
        TP_IN_BLOCK_ROWS=lay.in_block_rows, TP_W_BLOCK_ROWS=lay.w_block_rows, TP_BIAS_AHEAD=int(lay.bias_ahead),
        TP_REUSE=int(lay.reuse), TP_FOLD=lay.fold, TP_STORE_DIRECT=int(lay.store_direct),
        TP_OUT_STRIDE=lay.store_stride, TP_OUT_PIX=lay.store_pixel, TP_ACC_OUT=int(lay.acc_output),
        TP_OUT_T="int32_t" if lay.acc_output else "int8_t", TP_W_IN_PLACE=int(lay.w_in_place),
    )
    lines = [f"#define {k} {v}" for k, v in consts.items()]
    lines.append(_CALL_C)
    return "\n".join(lines)


_CALL_C = r"""
/* Local address bits (Gemmini's: its header does not name them): accumulator, accumulate on write. */
#define TP_ACC_ADDR 0x80000000u
#define TP_ACCUMULATE 0x40000000u
#define TP_ACC_READ_FULL 0x20000000u /* mvout the int32 values, no scale or activation */
/* What this code takes from the header besides the configuration (checked by the kernel's preamble): every
   instruction macro it calls, and, when it stores the int32 accumulators (TP_ACC_OUT), full-width accumulator reads,
   which a Gemmini has only if built with acc_read_full_width (its gemmini_params.h then defines
   ACC_READ_FULL_WIDTH); on one without, bit 29 reads nothing wider than int8 and the results would be wrong. */
#if !defined(gemmini_extended_mvin) || !defined(gemmini_extended_mvin2) || !defined(gemmini_extended_mvin3) \
    || !defined(gemmini_extended_mvout) || !defined(gemmini_extended_preload) \
    || !defined(gemmini_extended_compute_preloaded) || !defined(gemmini_extended_compute_accumulated) \
    || !defined(gemmini_extended_config_ex) || !defined(gemmini_extended4_config_ld) \
    || !defined(gemmini_extended_config_st) || !defined(gemmini_fence)
#error "gemmini.h lacks an instruction macro this kernel calls (gemmini_extended_mvin/mvin2/mvin3/mvout/preload/compute_preloaded/compute_accumulated/config_ex/extended4_config_ld/config_st, gemmini_fence)"
#endif
#if TP_ACC_OUT && !defined(ACC_READ_FULL_WIDTH)
#error "this kernel stores int32 accumulators (full-width accumulator reads): gemmini_params.h must define ACC_READ_FULL_WIDTH (a Gemmini built with acc_read_full_width = true)"
#endif
/* A compiler barrier: the CPU's stores to what the DMA reads are done before an instruction issues, and its
   reads of what the DMA wrote happen after the fence (gemmini.h's instruction macros need not tell the compiler
   they touch memory). */
#define TP_MEMORY_BARRIER() __asm__ __volatile__("" ::: "memory")

static inline int32_t tp_min(int32_t a, int32_t b) { return a < b ? a : b; }

/* Wait for every issued Gemmini instruction: after this the CPU may read what mvouts wrote. */
static void tp_fence(void) {
  gemmini_fence();
  TP_MEMORY_BARRIER();
}
/* The scratchpad holds two slots (halves) of [input tile | weight tile]: two calls in flight.  The input and the
   weight tile each move to the other slot when a call loads a new one, so a tile that the following calls share
   stays where it is (TP_REUSE) and is not loaded again; without reuse both alternate every call. */
static uint32_t tp_in_slot, tp_w_slot, tp_acc_half;
static int64_t tp_in_key, tp_w_key;        /* which tiles the slots hold (-1: none) */
static const int32_t *tp_bias;             /* bias of the current output tile (armed by tp_init) */

static void tp_reset(void) {
  tp_in_slot = tp_w_slot = TP_DB; /* the first load toggles to slot 0 */
  tp_in_key = tp_w_key = -1;
  tp_acc_half = 0;
  tp_bias = 0;
}

/* Accumulator tile <- bias: armed here, loaded by the tile's first call (which knows the tile's extents). */
static void tp_init(const int32_t *bias_tile, uint32_t acc_addr) {
  (void)acc_addr;
  TP_MEMORY_BARRIER();
  tp_bias = TP_HAS_BIAS ? bias_tile : 0;
}

/* Accumulator rows of output-channel blocks [kb0, kb1) <- the bias (one row, DRAM stride 0) or zeros. */
static void tp_acc_init(int32_t kb0, int32_t kb1, int32_t vk, int32_t vn, int32_t vp, int32_t vq, uint32_t acc) {
  for (int32_t kb = kb0; kb < kb1; kb++)
    for (int32_t n = 0; n < vn; n++)
      for (int32_t p = 0; p < vp; p++)
        for (int32_t q = 0; q < vq; q += TP_DIM)
          gemmini_extended_mvin3(tp_bias ? (const void *)(tp_bias + kb * TP_DIM) : 0,
                                 TP_ACC_ADDR | (acc + ((kb * TP_TN + n) * TP_TP + p) * TP_TQ + q),
                                 tp_min(TP_DIM, vk - kb * TP_DIM), tp_min(TP_DIM, vq - q));
}

/* One library call: the tile at I_p offset i_off (n0, g0, h0, w0, c0) and W_p offset w_off (g0, r0, s0, c0, k0). */
static void tp_call(const int8_t *in, int32_t i_off, const int8_t *wt, int32_t w_off, uint32_t acc_addr) {
  const int32_t k0 = w_off % TP_KP, c0 = (w_off / TP_KP) % TP_CP, s0 = (w_off / (TP_KP * TP_CP)) % TP_SP;
  const int32_t r0 = (w_off / (TP_KP * TP_CP * TP_SP)) % TP_RP;
  const int32_t w0 = (i_off / TP_CP) % TP_WP, h0 = (i_off / (TP_CP * TP_WP)) % TP_HP;
  const int32_t n0 = i_off / (TP_CP * TP_WP * TP_HP * TP_GP);
  const int32_t p0 = (h0 - r0 * TP_DH) / TP_SH, q0 = (w0 - s0 * TP_DW) / TP_SW;
  const int32_t vn = tp_min(TP_TN, TP_N - n0), vp = tp_min(TP_TP, TP_P - p0), vq = tp_min(TP_TQ, TP_Q - q0);
  const int32_t vk = tp_min(TP_TK, TP_K - k0), vr = tp_min(TP_TR, TP_R - r0), vs = tp_min(TP_TS, TP_S - s0);
  const int32_t vc = tp_min(TP_TC, TP_C - c0);
  const int first = r0 == 0 && s0 == 0 && c0 == 0;
  TP_MEMORY_BARRIER();
  /* an input tile is fixed by its offset and its kernel window (r0, s0); a weight tile by its offset */
  const int64_t in_key = ((int64_t)i_off * TP_RP + r0) * TP_SP + s0;
  const int load_in = !TP_REUSE || in_key != tp_in_key, load_w = !TP_REUSE || (int64_t)w_off != tp_w_key;
  if (load_in) { tp_in_slot ^= TP_DB; tp_in_key = in_key; }
  if (load_w) { tp_w_slot ^= TP_DB; tp_w_key = w_off; }
  const uint32_t sp = tp_in_slot * TP_SPAD_HALF, wsp = tp_w_slot * TP_SPAD_HALF + TP_IN_ROWS;
  const uint32_t acc = (acc_addr & 0x1FFFFFFFu) + tp_acc_half * TP_ACC_HALF;
  const int32_t hwin = (vp - 1) * TP_SH + (vr - 1) * TP_DH + 1;
#if TP_FOLD == 1
  const int32_t wwin = (vq - 1) * TP_SW + (vs - 1) * TP_DW + 1;
#endif

  /* The first reduction tile starts the accumulator from the bias.  TP_BIAS_AHEAD, when the tile has several
     output-channel blocks: the first block's bias rows go before the input and weight tiles, so its computes
     start as soon as those arrive, and the other blocks' after them, loading while the first block computes
     (with one block there is nothing to overlap them with).  Otherwise all of them after the tiles. */
  const int32_t ahead = first && TP_BIAS_AHEAD && vk > TP_DIM;

#if TP_FOLD > 1
  /* Kernel columns folded into the array rows: per block of TP_FOLD kernel columns, one scratchpad row per
     (batch, input row, output column) holds the channels of those columns, which are one contiguous run of the
     padded NHWC input (its padding is real zeros); consecutive output columns start TP_SW columns apart, so the
     DMA reads overlapping DRAM rows.  The array streams output columns with A stride 1. */
  const int32_t nsb = (vs + TP_FOLD - 1) / TP_FOLD;
  gemmini_extended_config_ex(WEIGHT_STATIONARY, NO_ACTIVATION, 0, 1, false, false);
  if (ahead) tp_acc_init(0, 1, vk, vn, vp, vq, acc);
  gemmini_extended4_config_ld(TP_SW * TP_CP, MVIN_SCALE_IDENTITY, false, TP_IN_BLOCK_ROWS, 0);
  for (int32_t sb = 0; load_in && sb < nsb; sb++) {
    const int32_t cols = tp_min(TP_FOLD, vs - sb * TP_FOLD) * vc;
    for (int32_t n = 0; n < vn; n++)
      for (int32_t h = 0; h < hwin; h++) {
        const int real_h = h0 + h >= TP_H0 && h0 + h < TP_H1; /* rows wholly in the padding: zero-filled */
        for (int32_t q = 0; q < vq; q += TP_DIM) {
          const int8_t *src = real_h ? in + ((n * TP_GP * TP_HP + h) * TP_WP + q * TP_SW + sb * TP_FOLD) * TP_CP : 0;
          gemmini_extended_mvin(src, sp + ((sb * TP_TN + n) * TP_HWIN + h) * TP_TQ + q, cols, tp_min(TP_DIM, vq - q));
        }
      }
  }
#else
  gemmini_extended_config_ex(WEIGHT_STATIONARY, NO_ACTIVATION, 0, TP_SW, false, false);
  if (ahead) tp_acc_init(0, 1, vk, vn, vp, vq, acc);
  /* the channel blocks of one mvin row land TP_IN_BLOCK_ROWS apart (one block per channel block of the tile) */
  gemmini_extended4_config_ld(TP_CP, MVIN_SCALE_IDENTITY, false, TP_IN_BLOCK_ROWS, 0);
  /* input tile: one row per input pixel and up to TP_MVIN_COLS channels (as gemmini.h's MAX_BLOCK_LEN blocks:
     one DMA request of <= 64 B); padding rows are zero-filled, not read */
  for (int32_t ci = 0; load_in && ci < vc; ci += TP_MVIN_COLS) {
    const int32_t cols = tp_min(TP_MVIN_COLS, vc - ci), cb = ci / TP_DIM;
    for (int32_t n = 0; n < vn; n++)
      for (int32_t h = 0; h < hwin; h++) {
        const int real_h = h0 + h >= TP_H0 && h0 + h < TP_H1;
        for (int32_t w = 0; w < wwin;) {
          const int32_t ww = w0 + w;
          int32_t run = tp_min(TP_DIM, wwin - w);
          int real = real_h;
          if (ww < TP_W0) { run = tp_min(run, TP_W0 - ww); real = 0; }
          else if (ww >= TP_W1) real = 0;
          else run = tp_min(run, TP_W1 - ww);
          const int8_t *src = real ? in + ((n * TP_GP * TP_HP + h) * TP_WP + w) * TP_CP + ci : 0;
          gemmini_extended_mvin(src, sp + ((cb * TP_TN + n) * TP_HWIN + h) * TP_WWIN + w, cols, run);
          w += run;
        }
      }
  }
#endif
  /* weight tile: one row per (r, s, c) and up to TP_MVIN_COLS output channels (blocks TP_W_BLOCK_ROWS apart,
     configured once in the kernel's prologue) */
#if TP_W_IN_PLACE
  /* the caller's unpadded B [C, K] itself (a matmul: R = S = 1), rows TP_K bytes apart (the load channel's
     stride, configured so in the prologue); wt - w_off is its start */
  const int8_t *const wrow = (const int8_t *)((uintptr_t)wt - (uintptr_t)w_off) + (int64_t)c0 * TP_K + k0;
#define TP_W_SRC(r, s, c, ko) (wrow + (int64_t)(c) * TP_K + (ko))
#else
#define TP_W_SRC(r, s, c, ko) (wt + (((r) * TP_SP + (s)) * TP_CP + (c)) * TP_KP + (ko))
#endif
  for (int32_t ko = 0; load_w && ko < vk; ko += TP_MVIN_COLS) {
    const int32_t kcols = tp_min(TP_MVIN_COLS, vk - ko), kb = ko / TP_DIM;
    for (int32_t r = 0; r < vr; r++)
      for (int32_t s = 0; s < vs; s++)
        for (int32_t c = 0; c < vc; c += TP_DIM)
          gemmini_extended_mvin2(TP_W_SRC(r, s, c, ko),
                                 wsp + ((kb * TP_TR + r) * TP_TS + s) * TP_TC + c, kcols, tp_min(TP_DIM, vc - c));
  }
#undef TP_W_SRC
  if (first) tp_acc_init(ahead, (vk + TP_DIM - 1) / TP_DIM, vk, vn, vp, vq, acc);
#if TP_FOLD > 1
  /* per (DIM output channels, r, block of kernel columns): one preload of the block's (s, c) weight rows (adjacent
     in the scratchpad: the call holds every channel), then one compute per (batch, output row, <= DIM columns) */
  for (int32_t kb = 0; kb * TP_DIM < vk; kb++) {
    const int32_t kcols = tp_min(TP_DIM, vk - kb * TP_DIM);
    for (int32_t r = 0; r < vr; r++)
      for (int32_t sb = 0; sb < nsb; sb++) {
        const int32_t crows = tp_min(TP_FOLD, vs - sb * TP_FOLD) * vc;
        int fresh = 1;
        for (int32_t n = 0; n < vn; n++)
          for (int32_t p = 0; p < vp; p++)
            for (int32_t q = 0; q < vq; q += TP_DIM) {
              const int32_t rows = tp_min(TP_DIM, vq - q);
              const uint32_t a = sp + ((sb * TP_TN + n) * TP_HWIN + p * TP_SH + r * TP_DH) * TP_TQ + q;
              const uint32_t c = TP_ACC_ADDR | TP_ACCUMULATE | (acc + ((kb * TP_TN + n) * TP_TP + p) * TP_TQ + q);
              if (fresh) {
                gemmini_extended_preload(wsp + ((kb * TP_TR + r) * TP_TS + sb * TP_FOLD) * TP_TC, c, kcols, crows,
                                         kcols, rows);
                gemmini_extended_compute_preloaded(a, GARBAGE_ADDR, crows, rows, TP_DIM, TP_DIM);
              } else {
                gemmini_extended_preload(GARBAGE_ADDR, c, kcols, crows, kcols, rows);
                gemmini_extended_compute_accumulated(a, GARBAGE_ADDR, crows, rows, TP_DIM, TP_DIM);
              }
              fresh = 0;
            }
      }
  }
#else
  /* per (DIM output channels, r, s, DIM input channels): one weight preload, then one compute per
     (batch, output row, <= DIM consecutive output columns) */
  for (int32_t kb = 0; kb * TP_DIM < vk; kb++) {
    const int32_t kcols = tp_min(TP_DIM, vk - kb * TP_DIM);
    for (int32_t r = 0; r < vr; r++)
      for (int32_t s = 0; s < vs; s++)
        for (int32_t cb = 0; cb * TP_DIM < vc; cb++) {
          const int32_t crows = tp_min(TP_DIM, vc - cb * TP_DIM);
          int fresh = 1;
          for (int32_t n = 0; n < vn; n++)
            for (int32_t p = 0; p < vp; p++)
              for (int32_t q = 0; q < vq; q += TP_DIM) {
                const int32_t rows = tp_min(TP_DIM, vq - q);
                const uint32_t a = sp + ((cb * TP_TN + n) * TP_HWIN + p * TP_SH + r * TP_DH) * TP_WWIN
                                   + q * TP_SW + s * TP_DW;
                const uint32_t c = TP_ACC_ADDR | TP_ACCUMULATE | (acc + ((kb * TP_TN + n) * TP_TP + p) * TP_TQ + q);
                if (fresh) {
                  gemmini_extended_preload(wsp + ((kb * TP_TR + r) * TP_TS + s) * TP_TC + cb * TP_DIM, c, kcols,
                                           crows, kcols, rows);
                  gemmini_extended_compute_preloaded(a, GARBAGE_ADDR, crows, rows, TP_DIM, TP_DIM);
                } else {
                  gemmini_extended_preload(GARBAGE_ADDR, c, kcols, crows, kcols, rows);
                  gemmini_extended_compute_accumulated(a, GARBAGE_ADDR, crows, rows, TP_DIM, TP_DIM);
                }
                fresh = 0;
              }
        }
  }
#endif
}

/* Accumulator tile -> DRAM (scale, activation, saturation; or, TP_ACC_OUT, the int32 values as they are, mvout
   with the read-full bit): one row per output pixel and DIM channels, rows TP_OUT_STRIDE bytes apart
   (config_st).  o_off is the tile's offset in the padded out_p [N, G, P, Q, K]; with TP_STORE_DIRECT `out` is the
   caller's NHWC output (only real pixels and channels are stored, so they all exist there), else out_p + o_off. */
static void tp_store(TP_OUT_T *out, int32_t o_off, uint32_t acc_addr) {
  const int32_t k0 = o_off % TP_KP, q0 = (o_off / TP_KP) % TP_QP, p0 = (o_off / (TP_KP * TP_QP)) % TP_PP;
  const int32_t n0 = o_off / (TP_KP * TP_QP * TP_PP * TP_GP);
  const int32_t vn = tp_min(TP_TN, TP_N - n0), vp = tp_min(TP_TP, TP_P - p0), vq = tp_min(TP_TQ, TP_Q - q0);
  const int32_t vk = tp_min(TP_TK, TP_K - k0);
  const uint32_t acc = (acc_addr & 0x1FFFFFFFu) + tp_acc_half * TP_ACC_HALF;
#if TP_STORE_DIRECT
  const int32_t g0 = (o_off / (TP_KP * TP_QP * TP_PP)) % TP_GP;
  TP_OUT_T *const base = out + ((int64_t)(n0 * TP_P + p0) * TP_Q + q0) * TP_OUT_PIX + g0 * TP_K + k0;
#define TP_OUT_ROW(n, p, q) (base + ((int64_t)((n) * TP_P + (p)) * TP_Q + (q)) * TP_OUT_PIX)
#else
#define TP_OUT_ROW(n, p, q) (out + (((n) * TP_GP * TP_PP + (p)) * TP_QP + (q)) * TP_KP)
#endif
  TP_MEMORY_BARRIER();
  for (int32_t kb = 0; kb * TP_DIM < vk; kb++)
    for (int32_t n = 0; n < vn; n++)
      for (int32_t p = 0; p < vp; p++)
        for (int32_t q = 0; q < vq; q += TP_DIM)
          gemmini_extended_mvout(TP_OUT_ROW(n, p, q) + kb * TP_DIM,
                                 TP_ACC_ADDR | (TP_ACC_OUT ? TP_ACC_READ_FULL : 0u)
                                 | (acc + ((kb * TP_TN + n) * TP_TP + p) * TP_TQ + q),
                                 tp_min(TP_DIM, vk - kb * TP_DIM), tp_min(TP_DIM, vq - q));
#undef TP_OUT_ROW
  tp_acc_half ^= TP_DB;
}
"""


def config_prologue(lay: CallLayout, epi: Epilogue) -> list[str]:
    """What the kernel configures once: the weight and bias load channels (rows of K_p bytes whose output-channel
    blocks land w_block_rows apart; one bias row repeated with DRAM stride 0) and the store (store_stride bytes
    per pixel, ReLU, scale).  Each call configures the execute unit and the input channel itself (tp_call)."""
    import numpy as np

    scale = float.hex(float(np.float32(epi.scale))) + "f"
    act = "RELU" if epi.relu else "NO_ACTIVATION"
    kp = lay.real["K"] if lay.w_in_place else lay.padded["K"]  # the weight rows' stride in DRAM
    store = (f"gemmini_extended_config_st({lay.store_stride}, NO_ACTIVATION, ACC_SCALE_IDENTITY);"
             if lay.acc_output else f"gemmini_extended_config_st({lay.store_stride}, {act}, {scale});")
    return [
        "tp_reset();",
        f"gemmini_extended4_config_ld({kp}, MVIN_SCALE_IDENTITY, false, {lay.w_block_rows}, 1);",
        f"gemmini_extended4_config_ld(0, MVIN_SCALE_IDENTITY, false, {lay.dim}, 2);",
        store,
    ]
