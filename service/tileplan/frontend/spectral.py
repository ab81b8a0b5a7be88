# mypy: disable-error-code="valid-type"
# (TVMScript parameter annotations, T.Buffer((shape), dtype), are calls that TVM parses, not Python types)
"""ONNX DFT (opset 17: axis an attribute; opset 20: an input) and STFT on the host, as onnxruntime's CPU kernels
compute them (TVM's importer has neither: the compile refused them, 'operator DFT ... is not supported').

onnxruntime transforms each signal alone, in std::complex of the input's type:

- a power-of-two length n: its radix-2 FFT. The input (zero-padded or cut to n, times the window for STFT) is
  loaded in bit-reversed order as complex(1, 0) * x * w, then log2(n) stages of butterflies even + V[f] * odd,
  even + V[s] * odd, where V is its table of exp(i angle), angle = float(index) * (+-2 float(pi) / n), cos / sin
  of the C library; an inverse DFT divides by n at the end; onesided keeps the first n / 2 + 1 values;
- another length N: Bluestein's chirp-z: a = x * w * chirp (chirp_n = exp(i (-+pi n n / N))), a radix-2 FFT of
  length M (the power of two >= 2N - 1), times the FFT of the conjugate chirp (b), the same radix-2 FFT again
  (with the forward table: its result is reversed, read back as a[M - i]) divided by M, times chirp_i times 1 / N
  for an inverse one.

Here the tables (V, the chirp and b's FFT, which do not depend on the data) are computed at compile time by the same
arithmetic (numpy's float operations are IEEE's; cos and sin those of this machine's C library, which onnxruntime's
kernel calls), and one PrimFunc per node does the rest with the same operations in the same order. A complex product
is GCC's (a c - b d, a d + b c), without fused multiply-adds (onnxruntime's x86-64 build has none there).

STFT is the same DFT of every frame (frame_step apart, the window's length), gathered before it."""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from typing import Any

import numpy as np


def _libm_trig(dtype: str) -> tuple[Any, Any]:
    """The C library's cos and sin of `dtype` (cosf / sinf for float32): those std::cos / std::sin call."""
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    ctype = ctypes.c_float if dtype == "float32" else ctypes.c_double
    suffix = "f" if dtype == "float32" else ""
    fns = []
    for name in ("cos", "sin"):
        f = getattr(lib, name + suffix)
        f.restype, f.argtypes = ctype, [ctype]
        fns.append(f)
    return fns[0], fns[1]


def _bit_reverse(i: int, bits: int) -> int:
    return int(f"{i:0{bits}b}"[::-1], 2) if bits else 0


def _twiddles(n: int, inverse: bool, dtype: str) -> np.ndarray:
    """onnxruntime's V for a radix-2 FFT of length n, as its butterflies read it: [n - 1, 2 (first, second),
    2 (re, im)], row m - 1 + k for the butterfly k of the stage of half-size m."""
    t = np.dtype(dtype).type
    cos, sin = _libm_trig(dtype)
    pi = t(math.pi)
    tau = t(2) * pi
    av = t(t(1.0 if inverse else -1.0) * tau) / t(n)  # compute_angular_velocity
    bits = n.bit_length() - 1
    v = np.zeros((n, 2), dtype)
    for i in range(n):
        angle = t(t(i) * av)
        v[_bit_reverse(i, bits)] = (cos(angle), sin(angle))
    out = np.zeros((max(n - 1, 1), 2, 2), dtype)
    m, b = 1, 1
    while 2 * m <= n:
        for k in range(m):
            out[m - 1 + k, 0] = v[_bit_reverse(k, b)]
            out[m - 1 + k, 1] = v[_bit_reverse(m + k, b)]
        m, b = 2 * m, b + 1
    return out


def _cmul(ar: Any, ai: Any, br: Any, bi: Any) -> tuple[Any, Any]:
    return ar * br - ai * bi, ar * bi + ai * br


def _radix2_np(re: np.ndarray, im: np.ndarray, tw: np.ndarray, inverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime's fft_radix2 of a complex signal of length n (a power of two), no window, in numpy (each
    operation IEEE's, as the kernel's): for b's FFT in Bluestein's algorithm, computed at compile time."""
    n = re.size
    bits = n.bit_length() - 1
    rev = [_bit_reverse(i, bits) for i in range(n)]
    one, zero = re.dtype.type(1), re.dtype.type(0)
    yr, yi = _cmul(one, zero, re[rev], im[rev])
    yr, yi = _cmul(yr, yi, one, zero)
    m = 1
    while 2 * m <= n:
        for k in range(m):
            (fr, fi), (sr, si) = tw[m - 1 + k]
            e = np.arange(k, n, 2 * m)
            o = e + m
            er, ei, orr, oi = yr[e], yi[e], yr[o], yi[o]
            pr, pi_ = _cmul(fr, fi, orr, oi)
            qr, qi = _cmul(sr, si, orr, oi)
            yr[e], yi[e], yr[o], yi[o] = er + pr, ei + pi_, er + qr, ei + qi
        m *= 2
    if inverse:
        yr, yi = yr / re.dtype.type(n), yi / re.dtype.type(n)
    return yr, yi


def _bluestein_tables(n: int, m: int, inverse: bool, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(chirp [m, 2] (zero beyond n), the FFT of b [m, 2]) of onnxruntime's dft_bluestein_z_chirp."""
    t = np.dtype(dtype).type
    cos, sin = _libm_trig(dtype)
    pi = t(math.pi)
    direction = t(1.0 if inverse else -1.0)
    chirp = np.zeros((m, 2), dtype)
    for k in range(n):
        e = t(t(t(t(direction * pi) * t(k)) * t(k)) / t(n))
        chirp[k] = (cos(e), sin(e))
    b = np.zeros((m, 2), dtype)
    b[:n, 0], b[:n, 1] = chirp[:n, 0], -chirp[:n, 1]
    for k in range(m - n + 1, m):
        b[k] = b[m - k]
    fr, fi = _radix2_np(b[:, 0].copy(), b[:, 1].copy(), _twiddles(m, False, dtype), False)
    return chirp, np.stack([fr, fi], axis=1).astype(dtype)


def _dft_func(batch: int, samples: int, comps: int, n: int, out_len: int, dtype: str, inverse: bool,
              window_len: int, fft_len: int) -> Any:
    """x [B, S, C] (C 1: real, 2: complex), window [W] (W 0: none; a 1-element placeholder is passed), tw, rev,
    chirp, bfft -> y [B, O, 2]: the DFT of length n of each x[b] as onnxruntime computes it (module docstring);
    fft_len (P) is n for a power of two, else Bluestein's M."""
    from tvm.script import tirx as T

    B, S, C, O, P = batch, samples, comps, out_len, fft_len  # the operator's letters
    LOG = P.bit_length() - 1
    WL = max(window_len, 1)
    HAS_W = 1 if window_len else 0
    BLUE = 1 if P != n else 0
    INV = 1 if inverse else 0
    CL = P if BLUE else 1
    TL = max(P - 1, 1)
    LOADS = min(S, P) if BLUE else P
    f0, f1 = 0.0, 1.0
    scale = float(np.dtype(dtype).type(np.float32(1) / np.float32(n))) if inverse else 1.0

    @T.macro
    def butterflies(buf: Any, tw: Any, t: Any) -> None:
        for s in range(LOG):
            for q in range(P // 2):
                m = T.shift_left(1, s)
                e = T.floordiv(q, m) * 2 * m + T.floormod(q, m)
                r = m - 1 + T.floormod(q, m)
                t[0] = buf[e + m, 0]
                t[1] = buf[e + m, 1]
                t[2] = buf[e, 0]
                t[3] = buf[e, 1]
                buf[e, 0] = t[2] + (tw[r, 0, 0] * t[0] - tw[r, 0, 1] * t[1])
                buf[e, 1] = t[3] + (tw[r, 0, 0] * t[1] + tw[r, 0, 1] * t[0])
                buf[e + m, 0] = t[2] + (tw[r, 1, 0] * t[0] - tw[r, 1, 1] * t[1])
                buf[e + m, 1] = t[3] + (tw[r, 1, 0] * t[1] + tw[r, 1, 1] * t[0])

    @T.macro
    def load_complex(dst: Any, src: Any, rev: Any, t: Any) -> None:
        # complex(1, 0) * x * U(1): two complex products
        for i in range(P):
            t[0] = T.Cast(dtype, f1) * src[rev[i], 0] - T.Cast(dtype, f0) * src[rev[i], 1]
            t[1] = T.Cast(dtype, f1) * src[rev[i], 1] + T.Cast(dtype, f0) * src[rev[i], 0]
            dst[i, 0] = t[0] * T.Cast(dtype, f1) - t[1] * T.Cast(dtype, f0)
            dst[i, 1] = t[0] * T.Cast(dtype, f0) + t[1] * T.Cast(dtype, f1)

    @T.prim_func(private=True)
    def dft(x: T.Buffer((B, S, C), dtype), w: T.Buffer((WL,), dtype), tw: T.Buffer((TL, 2, 2), dtype),
            rev: T.Buffer((P,), "int32"), chirp: T.Buffer((CL, 2), dtype), bfft: T.Buffer((CL, 2), dtype),
            y: T.Buffer((B, O, 2), dtype)) -> None:
        T.func_attr({"op_pattern": 8})
        buf = T.alloc_buffer((P, 2), dtype)
        a = T.alloc_buffer((P, 2), dtype)
        t = T.alloc_buffer((8,), dtype)
        for b in range(B):
            if BLUE == 0:
                for i in range(P):
                    # x (0 past the input), times the window (1 without one)
                    if rev[i] < S:
                        t[5] = x[b, rev[i], 0]
                        t[6] = x[b, rev[i], C - 1]
                    else:
                        t[5] = T.Cast(dtype, f0)
                        t[6] = T.Cast(dtype, f0)
                    if HAS_W == 1:
                        t[7] = w[T.min(rev[i], WL - 1)]
                    else:
                        t[7] = T.Cast(dtype, f1)
                    if C == 1:  # complex(1, 0) * x * w, x and w real
                        buf[i, 0] = T.Cast(dtype, f1) * t[5] * t[7]
                        buf[i, 1] = T.Cast(dtype, f0) * t[5] * t[7]
                    else:  # x complex; w is U(1) = complex(1, 0)
                        t[0] = T.Cast(dtype, f1) * t[5] - T.Cast(dtype, f0) * t[6]
                        t[1] = T.Cast(dtype, f1) * t[6] + T.Cast(dtype, f0) * t[5]
                        buf[i, 0] = t[0] * T.Cast(dtype, f1) - t[1] * T.Cast(dtype, f0)
                        buf[i, 1] = t[0] * T.Cast(dtype, f0) + t[1] * T.Cast(dtype, f1)
                butterflies(buf, tw, t)
                for i in range(O):
                    if INV == 1:
                        y[b, i, 0] = buf[i, 0] / T.Cast(dtype, float(P))
                        y[b, i, 1] = buf[i, 1] / T.Cast(dtype, float(P))
                    else:
                        y[b, i, 0] = buf[i, 0]
                        y[b, i, 1] = buf[i, 1]
            else:
                for i in range(P):
                    a[i, 0] = T.Cast(dtype, f0)
                    a[i, 1] = T.Cast(dtype, f0)
                for i in range(LOADS):
                    if HAS_W == 1:
                        t[7] = w[T.min(i, WL - 1)]
                    else:
                        t[7] = T.Cast(dtype, f1)
                    if C == 1:  # a = complex(x, 0); a *= w (real)
                        t[0] = x[b, i, 0] * t[7]
                        t[1] = T.Cast(dtype, f0) * t[7]
                    else:  # a = x; a *= complex(1, 0)
                        t[0] = x[b, i, 0] * T.Cast(dtype, f1) - x[b, i, C - 1] * T.Cast(dtype, f0)
                        t[1] = x[b, i, 0] * T.Cast(dtype, f0) + x[b, i, C - 1] * T.Cast(dtype, f1)
                    a[i, 0] = t[0] * chirp[i, 0] - t[1] * chirp[i, 1]  # a *= chirp
                    a[i, 1] = t[0] * chirp[i, 1] + t[1] * chirp[i, 0]
                load_complex(buf, a, rev, t)
                butterflies(buf, tw, t)
                for i in range(P):  # a_fft *= b_fft
                    t[0] = buf[i, 0]
                    t[1] = buf[i, 1]
                    buf[i, 0] = t[0] * bfft[i, 0] - t[1] * bfft[i, 1]
                    buf[i, 1] = t[0] * bfft[i, 1] + t[1] * bfft[i, 0]
                load_complex(a, buf, rev, t)
                butterflies(a, tw, t)
                for i in range(P):
                    a[i, 0] = a[i, 0] / T.Cast(dtype, float(P))
                    a[i, 1] = a[i, 1] / T.Cast(dtype, float(P))
                for i in range(O):
                    if i == 0:
                        t[0] = a[0, 0]
                        t[1] = a[0, 1]
                    else:
                        t[0] = a[P - i, 0]
                        t[1] = a[P - i, 1]
                    y[b, i, 0] = (t[0] * chirp[i, 0] - t[1] * chirp[i, 1]) * T.Cast(dtype, scale)
                    y[b, i, 1] = (t[0] * chirp[i, 1] + t[1] * chirp[i, 0]) * T.Cast(dtype, scale)

    return dft


def dft_signals(bb: Any, x: Any, n: int, onesided: bool, inverse: bool, window: Any = None) -> Any:
    """The DFT of length n of every signal of x ([B, S, C], C 1 or 2) as onnxruntime computes it: [B, O, 2] with
    O = n // 2 + 1 if onesided else n; `window` a [n] tensor of x's type, or None."""
    from tvm import relax

    b_, s_, c_ = (int(d) for d in x.ty.shape)
    dtype = str(x.ty.dtype)
    out_len = n // 2 + 1 if onesided else n
    pow2 = n & (n - 1) == 0
    p = n if pow2 else 1 << (2 * n - 2).bit_length()
    if not pow2 and s_ > p:
        raise ValueError(f"a signal of {s_} samples for a DFT of length {n} (onnxruntime's Bluestein algorithm "
                         f"reads up to {p} of them)")
    tw = _twiddles(p, inverse and pow2, dtype)
    rev = np.asarray([_bit_reverse(i, p.bit_length() - 1) for i in range(p)], np.int32)
    if pow2:
        chirp = bfft = np.zeros((1, 2), dtype)
    else:
        chirp, bfft = _bluestein_tables(n, p, inverse, dtype)
    w = window if window is not None else relax.const(np.ones(1, dtype), dtype)
    wl = int(window.ty.shape[0]) if window is not None else 0
    func = _dft_func(b_, s_, c_, n, out_len, dtype, inverse, wl, p)
    gv = bb.add_func(func, "dft")
    # (relax.const makes a float64 array float32 unless told its dtype)
    args = [x, w, relax.const(tw, dtype), relax.const(rev, "int32"), relax.const(chirp, dtype),
            relax.const(bfft, dtype)]
    return bb.emit(relax.call_tir(gv, relax.Tuple(args), relax.TensorType((b_, out_len, 2), dtype)))


def _scalar(e: Any, what: str) -> int:
    from tvm.ir.expr import GenericConst

    if not isinstance(e, GenericConst):
        raise ValueError(f"its {what} is computed at run time (Tileplan needs it constant: it sets the output's "
                         "shape)")
    v = e.value.numpy().reshape(-1)
    if v.size != 1:
        raise ValueError(f"a {what} of {v.size} values (one expected)")
    return int(v[0])


def _check_dtype(x: Any, op: str) -> str:
    dtype = str(x.ty.dtype)
    if dtype not in ("float32", "float64"):
        raise ValueError(f"a {dtype} input (onnxruntime's {op} takes float32 and float64)")
    return dtype


def dft_convert(bb: Any, inputs: Any, attrs: dict, opset: int) -> Any:
    """ONNX DFT (opset 17: axis an attribute, default 1; opset 20: the third input, default -2) of a real ([..., 1],
    or [batch, n]) or complex ([..., 2]) signal, as onnxruntime computes it: the axis moved before the last one,
    every signal transformed (dft_signals), the axis moved back."""
    from tvm import relax

    x = inputs[0]
    _check_dtype(x, "DFT")
    shape = [int(d) for d in x.ty.shape]
    rank = len(shape)
    n_e = inputs[1] if len(inputs) > 1 else None
    if opset >= 20:
        axis_e = inputs[2] if len(inputs) > 2 else None
        axis = -2 if axis_e is None else _scalar(axis_e, "axis")
    else:
        axis = int(attrs.get("axis", 1))
    onesided, inverse = bool(attrs.get("onesided", 0)), bool(attrs.get("inverse", 0))
    if rank < 2:
        raise ValueError(f"a {rank}-d signal (DFT takes [batch, ..., 1 or 2])")
    axis = axis + rank if axis < 0 else axis
    if rank == 2:  # [batch, n]: real, onnxruntime's output [batch, O, 2]
        if axis != 1:
            raise ValueError(f"axis {axis} of a 2-d signal [batch, n] (onnxruntime transforms axis 1)")
        x, shape, rank = bb.normalize(relax.op.reshape(x, (*shape, 1))), [*shape, 1], 3
    comps = shape[-1]
    if comps not in (1, 2):
        raise ValueError(f"a signal whose last axis has {comps} values (1: real, 2: complex)")
    if not 0 <= axis < rank - 1:
        raise ValueError(f"axis {axis} of a {rank}-d signal (the last axis holds the real and imaginary parts)")
    if onesided and comps == 2:
        raise ValueError("onesided with a complex input (ONNX defines it for real ones)")
    n = shape[axis] if n_e is None else _scalar(n_e, "dft_length")
    if n < 1:
        raise ValueError(f"a dft_length of {n}")
    perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
    moved = bb.normalize(relax.op.permute_dims(x, perm)) if perm != list(range(rank)) else x
    lead = [shape[d] for d in perm[:-2]]
    flat = bb.normalize(relax.op.reshape(moved, (math.prod(lead), shape[axis], comps)))
    y = dft_signals(bb, flat, n, onesided, inverse)
    out_len = int(y.ty.shape[1])
    y = bb.normalize(relax.op.reshape(y, (*lead, out_len, 2)))
    inv = [perm.index(d) for d in range(rank)]
    return relax.op.permute_dims(y, inv) if perm != list(range(rank)) else y


def stft_convert(bb: Any, inputs: Any, attrs: dict) -> Any:
    """ONNX STFT (opset 17) of a real ([batch, L] or [batch, L, 1]) or complex ([batch, L, 2]) signal as
    onnxruntime computes it: frames of the window's length (or frame_length) frame_step apart, floor((L - W) /
    float(step)) + 1 of them, each transformed (dft_signals, times the window) -> [batch, frames, O, 2]. frame_step
    and frame_length must be constants (they set the output's shape)."""
    from tvm import relax

    x = inputs[0]
    dtype = _check_dtype(x, "STFT")
    shape = [int(d) for d in x.ty.shape]
    if len(shape) == 2:
        x, shape = bb.normalize(relax.op.reshape(x, (*shape, 1))), [*shape, 1]
    if len(shape) != 3 or shape[2] not in (1, 2):
        raise ValueError(f"a signal of shape {shape} (STFT takes [batch, length] or [batch, length, 1 or 2])")
    batch, length, comps = shape
    step = _scalar(inputs[1], "frame_step")
    window = inputs[2] if len(inputs) > 2 else None
    frame_e = inputs[3] if len(inputs) > 3 else None
    frame = _scalar(frame_e, "frame_length") if frame_e is not None else None
    if window is not None:
        wshape = [int(d) for d in window.ty.shape]
        if len(wshape) != 1 or (frame is not None and wshape[0] != frame):
            raise ValueError(f"a window of shape {wshape} for a frame length of {frame}")
        if comps == 2:
            raise ValueError("a window with a complex signal (onnxruntime reads the real window as complex pairs, "
                             "past its end)")
        if str(window.ty.dtype) != dtype:
            raise ValueError(f"a {window.ty.dtype} window for a {dtype} signal")
        frame = wshape[0]
    if frame is None:
        raise ValueError("neither a window nor a frame_length (the frame's length is unknown)")
    if step < 1 or not 0 < frame <= length:
        raise ValueError(f"a frame of {frame} samples, step {step}, in a signal of {length}")
    frames = int(math.floor(np.float32(length - frame) / np.float32(step))) + 1
    onesided = bool(attrs.get("onesided", 1))
    if onesided and comps == 2:
        raise ValueError("onesided with a complex signal (ONNX defines it for real ones)")
    idx = (np.arange(frames)[:, None] * step + np.arange(frame)[None, :]).reshape(-1).astype(np.int64)
    if int(idx.max()) >= length:
        raise ValueError(f"{frames} frames of {frame} samples, step {step}, past the signal's {length} samples")
    gathered = bb.normalize(relax.op.take(x, relax.const(idx), axis=1))
    flat = bb.normalize(relax.op.reshape(gathered, (batch * frames, frame, comps)))
    y = dft_signals(bb, flat, frame, onesided, False, window)
    return relax.op.reshape(y, (batch, frames, int(y.ty.shape[1]), 2))
