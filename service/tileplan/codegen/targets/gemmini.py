"""Gemmini as a code generation target: TE computes of its layers and tensor intrinsics for its ISA.

Computes (registered with `register_core_compute`): int8 convolution / matmul / depthwise convolution with int32
accumulation, the bias as the accumulator's initial value, and a requantize epilogue
`clip(nearbyint(float32(acc) * scale) [+ zero_point], lo, 127)` (ReLU: lo = zero point).  Every loop dimension the
array blocks on (output columns / matmul rows, input channels, output channels) is padded to a multiple of DIM in
host-side stages, so the intrinsics always see whole DIM x DIM blocks.

Internal layouts: input I_p[N, G, Hp, Wp, Cp], weights W_p[G, R, S, Cp, Kp], bias_p[G, Kp],
accumulator / output [N, G, P, Qp, Kp].  The kernel's external layouts are NHWC input, [G, R, S, C, K] weights
(HWIO when G = 1; [K, N] for a matmul), [G*K] bias and NHWC output.

Intrinsics (registered with `register_hw_intrinsic`) lower to calls of the Gemmini API (gemmini.h):
- gemmini.mvin_spad     rows x DIM int8 block DRAM -> scratchpad          (gemmini_extended_mvin / mvin2)
- gemmini.mvin_bias     a bias row broadcast into rows of the accumulator (gemmini_extended_mvin3, stride 0)
- gemmini.compute       DIM x DIM x DIM block, accumulate into the accumulator (preload + compute_preloaded)
- gemmini.mvout         accumulator -> DRAM with scale, ReLU and int8 saturation (gemmini_extended_mvout)
Scratchpad / accumulator addresses are written as `__tp_local_addr(access_ptr, flags)`, which the C
emitter resolves to Gemmini row addresses once it has placed every local buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tvm import te, tirx
from tvm.script import tirx as T

from tileplan.codegen.registry import register_core_compute, register_hw_intrinsic

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
    """acc (int32, bias included) -> int8: clip(nearbyint(float32(acc) * scale) + zero_point, lo, 127)."""

    scale: float = 1.0
    zero_point: int = 0
    relu: bool = False

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


@dataclass
class ComputeDef:
    geometry: ConvGeometry
    epilogue: Epilogue
    inputs: list[te.Tensor]  # external: I (NHWC), W ([G,R,S,C,K]), bias ([G*K])
    output: te.Tensor  # external: NHWC
    acc: te.Tensor
    out_padded: te.Tensor
    bias_padded: te.Tensor
    pad_stages: list[str]


def _requant(x: tirx.PrimExpr, epi: Epilogue) -> tirx.PrimExpr:
    v = tirx.nearbyint(tirx.Cast("float32", x) * tirx.const(epi.scale, "float32"))
    if epi.zero_point:
        v = v + tirx.const(float(epi.zero_point), "float32")
    v = tirx.min(v, tirx.const(127.0, "float32"))
    v = tirx.max(v, tirx.const(float(epi.lo), "float32"))
    return tirx.Cast("int8", v)


def build_conv(geo: ConvGeometry, epi: Epilogue) -> ComputeDef:
    """TE of a grouped int8 convolution with fused bias and requantize, padded for DIM-block tiling."""
    N, G, K, C = geo.bound("N"), geo.bound("G"), geo.bound("K"), geo.bound("C")
    P, Q, R, S = geo.bound("P"), geo.bound("Q"), geo.bound("R"), geo.bound("S")
    sh, sw = geo.array_stride
    fh, fw = (geo.stride if geo.folds_stride else (1, 1))  # host-side subsampling of the input
    dh, dw = geo.dilation
    ph, pw = geo.padding
    I = te.placeholder((geo.N, geo.H, geo.W, geo.G * geo.C), "int8", name="I")
    Wt = te.placeholder((geo.G, geo.R, geo.S, geo.C, geo.K), "int8", name="Wt")
    bias = te.placeholder((geo.G * geo.K,), "int32", name="bias")
    zero8 = tirx.const(0, "int8")
    stages = []

    Hp, Wp = geo.Hp, geo.Wp
    I_p = te.compute(
        (N, G, Hp, Wp, C),
        lambda n, g, h, w, c: tirx.if_then_else(
            tirx.all(n < geo.N, g < geo.G, c < geo.C, h * fh >= ph, h * fh < geo.H + ph, w * fw >= pw,
                     w * fw < geo.W + pw),
            I[tirx.min(n, geo.N - 1), tirx.min(tirx.max(h * fh - ph, 0), geo.H - 1),
              tirx.min(tirx.max(w * fw - pw, 0), geo.W - 1), tirx.min(g, geo.G - 1) * geo.C + tirx.min(c, geo.C - 1)],
            zero8),
        name="I_p")
    stages.append("I_p")
    W_p = te.compute(
        (G, R, S, C, K),
        lambda g, r, s, c, k: tirx.if_then_else(
            tirx.all(g < geo.G, r < geo.R, s < geo.S, c < geo.C, k < geo.K),
            Wt[tirx.min(g, geo.G - 1), tirx.min(r, geo.R - 1), tirx.min(s, geo.S - 1), tirx.min(c, geo.C - 1),
               tirx.min(k, geo.K - 1)],
            zero8),
        name="W_p")
    stages.append("W_p")
    b_p = te.compute(
        (G, K),
        lambda g, k: tirx.if_then_else(tirx.all(g < geo.G, k < geo.K),
                                       bias[tirx.min(g, geo.G - 1) * geo.K + tirx.min(k, geo.K - 1)],
                                       tirx.const(0, "int32")),
        name="bias_p")
    stages.append("bias_p")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    c = te.reduce_axis((0, C), name="c")
    acc = te.compute(
        (N, G, P, Q, K),
        lambda n, g, p, q, k: te.sum(
            I_p[n, g, p * sh + r * dh, q * sw + s * dw, c].astype("int32") * W_p[g, r, s, c, k].astype("int32"),
            axis=[r, s, c]),
        name="acc")
    out_p = te.compute((N, G, P, Q, K), lambda n, g, p, q, k: _requant(acc[n, g, p, q, k], epi), name="out_p")
    out = te.compute((geo.N, geo.P, geo.Q, geo.G * geo.K),
                     lambda n, p, q, gk: out_p[n, gk // geo.K, p, q, gk % geo.K], name="out")
    return ComputeDef(geo, epi, [I, Wt, bias], out, acc, out_p, b_p, stages)


@register_core_compute(tag="gemmini.conv2d")
def conv2d_compute(geo: ConvGeometry, epi: Epilogue) -> ComputeDef:
    return build_conv(geo, epi)


@register_core_compute(tag="gemmini.depthwise_conv2d")
def depthwise_compute(geo: ConvGeometry, epi: Epilogue) -> ComputeDef:
    if geo.C != 1 or geo.K != 1:
        raise ValueError("a depthwise convolution has one input and one output channel per group")
    return build_conv(geo, epi)


@register_core_compute(tag="gemmini.matmul")
def matmul_compute(geo: ConvGeometry, epi: Epilogue) -> ComputeDef:
    """Y[M, N] = A[M, K] B[K, N]: a 1x1 convolution over a 1 x M image (rows of A are pixels)."""
    if (geo.N, geo.G, geo.H, geo.P, geo.R, geo.S) != (1, 1, 1, 1, 1, 1):
        raise ValueError("a matmul is a 1x1 convolution over one row of M pixels")
    return build_conv(geo, epi)


# ------------------------------------------------------------------------------------------------------------------
# Intrinsics


def _local(buf, flags: int):  # noqa: ANN001 - TVMScript buffer
    # An access pointer (not data + offset) so that passes which re-version buffers (software pipelining) see it.
    return T.call_extern("uint32", LOCAL_ADDR, buf.access_ptr("rw"), T.uint32(flags))


@register_hw_intrinsic("gemmini.mvin_spad")
def mvin_spad(dim: int, rows: int, channel: int):  # noqa: ANN201
    fn = ("gemmini_extended_mvin", "gemmini_extended_mvin2", "gemmini_extended_mvin3")[channel]
    if rows == 1:
        return _mvin_one_row(dim, fn)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        s0 = T.int32()
        A = T.match_buffer(a, (rows, dim), "int8", strides=[s0, 1], offset_factor=1)
        C = T.match_buffer(c, (rows, dim), "int8", offset_factor=dim, scope="global.spad")
        with T.sblock("root"):
            T.reads(A[0:rows, 0:dim])
            T.writes(C[0:rows, 0:dim])
            for i, j in T.grid(rows, dim):
                with T.sblock("load"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = A[vi, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        s0 = T.int32()
        A = T.match_buffer(a, (rows, dim), "int8", strides=[s0, 1], offset_factor=1)
        C = T.match_buffer(c, (rows, dim), "int8", offset_factor=dim, scope="global.spad")
        with T.sblock("root"):
            T.reads(A[0:rows, 0:dim])
            T.writes(C[0:rows, 0:dim])
            T.evaluate(T.call_extern("int32", fn, A.access_ptr("r"), _local(C, 0), dim, rows))

    return desc, impl


def _mvin_one_row(dim: int, fn: str):  # noqa: ANN202
    """A single-row load: TVM drops unit loops when matching, so the description is one-dimensional."""

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (dim,), "int8", offset_factor=1)
        C = T.match_buffer(c, (dim,), "int8", offset_factor=dim, scope="global.spad")
        with T.sblock("root"):
            T.reads(A[0:dim])
            T.writes(C[0:dim])
            for j in T.serial(dim):
                with T.sblock("load"):
                    vj = T.axis.remap("S", [j])
                    C[vj] = A[vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (dim,), "int8", offset_factor=1)
        C = T.match_buffer(c, (dim,), "int8", offset_factor=dim, scope="global.spad")
        with T.sblock("root"):
            T.reads(A[0:dim])
            T.writes(C[0:dim])
            T.evaluate(T.call_extern("int32", fn, A.access_ptr("r"), _local(C, 0), dim, 1))

    return desc, impl


@register_hw_intrinsic("gemmini.mvin_bias")
def mvin_bias(dim: int, rows: int):  # noqa: ANN201
    @T.prim_func(s_tir=True)
    def desc(b: T.handle, c: T.handle) -> None:
        B = T.match_buffer(b, (dim,), "int32", offset_factor=1)
        C = T.match_buffer(c, (rows, dim), "int32", offset_factor=dim, scope="global.acc")
        with T.sblock("root"):
            T.reads(B[0:dim])
            T.writes(C[0:rows, 0:dim])
            for i, j in T.grid(rows, dim):
                with T.sblock("init"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = B[vj]

    @T.prim_func(s_tir=True)
    def impl(b: T.handle, c: T.handle) -> None:
        B = T.match_buffer(b, (dim,), "int32", offset_factor=1)
        C = T.match_buffer(c, (rows, dim), "int32", offset_factor=dim, scope="global.acc")
        with T.sblock("root"):
            T.reads(B[0:dim])
            T.writes(C[0:rows, 0:dim])
            T.evaluate(T.call_extern("int32", "gemmini_extended_mvin3", B.access_ptr("r"), _local(C, ACC_BIT), dim,
                                     rows))

    return desc, impl


@register_hw_intrinsic("gemmini.compute")
def compute(dim: int, a_stride: int, weight_stationary: bool):  # noqa: ANN201
    a_rows = (dim - 1) * a_stride + 1

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (a_rows, dim), "int8", offset_factor=dim, scope="global.spad")
        B = T.match_buffer(b, (dim, dim), "int8", offset_factor=dim, scope="global.spad")
        C = T.match_buffer(c, (dim, dim), "int32", offset_factor=dim, scope="global.acc")
        with T.sblock("root"):
            T.reads(C[0:dim, 0:dim], A[0:a_rows, 0:dim], B[0:dim, 0:dim])
            T.writes(C[0:dim, 0:dim])
            for i, j, k in T.grid(dim, dim, dim):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    C[vi, vj] = C[vi, vj] + T.Cast("int32", A[vi * a_stride, vk]) * T.Cast("int32", B[vk, vj])

    if weight_stationary:
        @T.prim_func(s_tir=True)
        def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (a_rows, dim), "int8", offset_factor=dim, scope="global.spad")
            B = T.match_buffer(b, (dim, dim), "int8", offset_factor=dim, scope="global.spad")
            C = T.match_buffer(c, (dim, dim), "int32", offset_factor=dim, scope="global.acc")
            with T.sblock("root"):
                T.reads(C[0:dim, 0:dim], A[0:a_rows, 0:dim], B[0:dim, 0:dim])
                T.writes(C[0:dim, 0:dim])
                T.evaluate(T.call_extern("int32", "gemmini_extended_preload", _local(B, 0),
                                         _local(C, ACC_BIT | ACCUMULATE_BIT), dim, dim, dim, dim))
                T.evaluate(T.call_extern("int32", "gemmini_extended_compute_preloaded", _local(A, 0),
                                         T.uint32(GARBAGE), dim, dim, dim, dim))
    else:
        @T.prim_func(s_tir=True)
        def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (a_rows, dim), "int8", offset_factor=dim, scope="global.spad")
            B = T.match_buffer(b, (dim, dim), "int8", offset_factor=dim, scope="global.spad")
            C = T.match_buffer(c, (dim, dim), "int32", offset_factor=dim, scope="global.acc")
            with T.sblock("root"):
                T.reads(C[0:dim, 0:dim], A[0:a_rows, 0:dim], B[0:dim, 0:dim])
                T.writes(C[0:dim, 0:dim])
                T.evaluate(T.call_extern("int32", "gemmini_extended_preload", T.uint32(GARBAGE),
                                         _local(C, ACC_BIT | ACCUMULATE_BIT), dim, dim, dim, dim))
                T.evaluate(T.call_extern("int32", "gemmini_extended_compute_preloaded", _local(A, 0), _local(B, 0),
                                         dim, dim, dim, dim))

    return desc, impl


@register_hw_intrinsic("gemmini.mvout")
def mvout(dim: int, scale: float, lo: int):  # noqa: ANN201
    sc = T.float32(scale)
    low = T.float32(float(lo))

    @T.prim_func(s_tir=True)
    def desc(c: T.handle, o: T.handle) -> None:
        C = T.match_buffer(c, (dim, dim), "int32", offset_factor=dim, scope="global.acc")
        s0 = T.int32()
        O = T.match_buffer(o, (dim, dim), "int8", strides=[s0, 1], offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:dim, 0:dim])
            T.writes(O[0:dim, 0:dim])
            for i, j in T.grid(dim, dim):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    O[vi, vj] = T.Cast("int8", T.max(T.min(T.nearbyint(T.Cast("float32", C[vi, vj]) * sc),
                                                           T.float32(127.0)), low))

    @T.prim_func(s_tir=True)
    def impl(c: T.handle, o: T.handle) -> None:
        C = T.match_buffer(c, (dim, dim), "int32", offset_factor=dim, scope="global.acc")
        s0 = T.int32()
        O = T.match_buffer(o, (dim, dim), "int8", strides=[s0, 1], offset_factor=1)
        with T.sblock("root"):
            T.reads(C[0:dim, 0:dim])
            T.writes(O[0:dim, 0:dim])
            T.evaluate(T.call_extern("int32", "gemmini_extended_mvout", O.access_ptr("w"), _local(C, ACC_BIT), dim,
                                     dim))

    return desc, impl


def config_prologue(geo: ConvGeometry, epi: Epilogue, weight_stationary: bool, dim: int) -> list[str]:
    """The configuration a Gemmini kernel sets once: dataflow and A stride, three load channels (input rows of Cp
    bytes, weight rows of Kp bytes, a bias row repeated with stride 0) and the store (Kp bytes, ReLU, scale)."""
    import numpy as np

    cp, kp = geo.bound("C"), geo.bound("K")
    scale = float.hex(float(np.float32(epi.scale))) + "f"
    df = "WEIGHT_STATIONARY" if weight_stationary else "OUTPUT_STATIONARY"
    act = "RELU" if epi.relu else "NO_ACTIVATION"
    return [
        f"gemmini_extended_config_ex({df}, NO_ACTIVATION, 0, {geo.array_stride[1]}, false, false);",
        f"gemmini_extended_config_ld({cp}, MVIN_SCALE_IDENTITY, false, {dim}, 0);",
        f"gemmini_extended_config_ld({kp}, MVIN_SCALE_IDENTITY, false, {dim}, 1);",
        f"gemmini_extended_config_ld(0, MVIN_SCALE_IDENTITY, false, {dim}, 2);",
        f"gemmini_extended_config_st({kp}, {act}, {scale});",
    ]
