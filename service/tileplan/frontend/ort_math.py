"""Float host functions with onnxruntime's CPU arithmetic (x86-64), as C the host code calls.

onnxruntime 1.32 computes the float transcendental operators with its own approximations, not libm's:

- MLAS kernels (dispatched once per process by the CPU's features; on an x86-64 CPU with AVX2 and FMA3 the
  FMA3 kernels): Sigmoid (its logistic kernel: an odd / even rational function of x clamped to [-18, 18]),
  Tanh (the same form on [-9, 9]), Erf (two polynomials split at |x| = 0.921875, the upper one through an exp
  polynomial, |x| clamped to 3.925), Gelu (x * M_SQRT1_2, the Erf kernel, then 0.5 * x * (erf + 1); the tanh
  approximation: x * (C x x + B), the Tanh kernel, 0.5 * x * (t + 1)), Exp (a degree-6 polynomial after a
  Cody-Waite reduction; its AVX512F kernel, chosen on CPUs with AVX512F, scales by 2^m with one rounding
  (VSCALEFPS) and has no upper clamp, the FMA3 kernel clamps to [-103.97, 88.78] and scales in two steps).
- Eigen's vectorised float functions on packets of four (SSE2, no fused multiply-add: onnxruntime's core is
  built for baseline x86-64): Log, Sin, Cos and the exp / log1p inside Softplus, Elu and Selu.  Eigen computes
  the elements that do not fill a packet (the last n mod 4 of the tensor; the output buffer is 64-byte aligned)
  with the scalar std:: function instead (glibc's expf, logf, log1pf, sinf, cosf): called here as the C
  library's, so those elements equal onnxruntime's where the host's libc is glibc (the x86-64 emulator build)
  and may differ by an ulp elsewhere (newlib on RISC-V); only tensors whose size is not a multiple of 4 have
  them.
- Mish: onnxruntime runs its function body, Softplus (Eigen), Tanh (MLAS), Mul.  Softsign: x * (1 / (1 + |x|)).
  Selu: gamma * x for x > 0, else (gamma * alpha) * (exp(x) - 1), the product gamma * alpha rounded to float.

Every function below is written from those kernels' arithmetic (constants, clamps, order of operations), with
`fmaf` where the kernel fuses a multiply-add and a plain `a * b + c` (two roundings, the host code is compiled
with -ffp-contract=off) where it does not, so the x86-64 emulator build and the RISC-V build compute the same
bits.  Checked against onnxruntime 1.32 on an AMD EPYC with AVX512F: every int8 code's value and 1.2 million
other floats (a dense sweep of [-30, 30], normal samples, the int8 grids of six scales), bit for bit
(bench/host_float_ops.py).  An x86-64 CPU without AVX512F runs onnxruntime's FMA3 Exp kernel instead, written
here too (`exp_variant`) but not checked on such a CPU; a CPU without FMA3, or another architecture, runs other
kernels that none of this reproduces.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

# C helper name -> (definition, helpers it calls); float32 in, float32 out.  `tail`: the element is one Eigen
# computes with the scalar std:: function (see the module docstring).
_BITS = """static inline uint32_t tp_ort_bits(float f) { union { float f; uint32_t u; } v; v.f = f; return v.u; }
static inline float tp_ort_float(uint32_t u) { union { float f; uint32_t u; } v; v.u = u; return v.f; }"""

_DEFS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tp_ort_bits": (_BITS, ()),
    # MLAS logistic, FMA3 kernel: NaN passes the clamps (VMAXPS / VMINPS return their second operand)
    "tp_ort_logistic": ("""static inline float tp_ort_logistic(float x) {
  x = -18.0f > x ? -18.0f : x;
  x = 18.0f < x ? 18.0f : x;
  float s = x * x;
  float p = fmaf(s, 4.37031012579801e-11f, 1.15627324459942e-07f);
  p = fmaf(p, s, 6.08574864600143e-05f);
  p = fmaf(p, s, 8.51377133304701e-03f);
  p = fmaf(p, s, 2.48287947061529e-01f);
  float q = fmaf(s, 6.10247389755681e-13f, 5.76102136993427e-09f);
  q = fmaf(q, s, 6.29106785017040e-06f);
  q = fmaf(q, s, 1.70198817374094e-03f);
  q = fmaf(q, s, 1.16817656904453e-01f);
  q = fmaf(q, s, 9.93151921023180e-01f);
  float y = (x * p) / q + 0.5f;
  return 0.0f > y ? 0.0f : y;
}""", ()),
    # MLAS tanh, FMA3 kernel
    "tp_ort_tanh": ("""static inline float tp_ort_tanh(float x) {
  x = -9.0f > x ? -9.0f : x;
  x = 9.0f < x ? 9.0f : x;
  float s = x * x;
  float p = fmaf(s, -2.76076847742355e-16f, 2.00018790482477e-13f);
  p = fmaf(p, s, -8.60467152213735e-11f);
  p = fmaf(p, s, 5.12229709037114e-08f);
  p = fmaf(p, s, 1.48572235717979e-05f);
  p = fmaf(p, s, 6.37261928875436e-04f);
  p = fmaf(p, s, 4.89352455891786e-03f);
  float q = fmaf(s, 1.19825839466702e-06f, 1.18534705686654e-04f);
  q = fmaf(q, s, 2.26843463243900e-03f);
  q = fmaf(q, s, 4.89352518554385e-03f);
  return (x * p) / q;
}""", ()),
    # MLAS erf, FMA3 kernel: both branches computed, the upper one through its own exp polynomial
    "tp_ort_erf": ("""static inline float tp_ort_erf(float x) {
  if (x != x) return x;
  float a = fabsf(x);
  a = a < 3.925f ? a : 3.925f;
  float s = a * a;
  float r = fmaf(-5.99104969e-4f, s, 4.99339588e-3f);
  r = fmaf(r, s, -2.67667342e-2f);
  r = fmaf(r, s, 1.12818025e-1f);
  r = fmaf(r, s, -3.76124859e-1f);
  r = fmaf(r, s, 1.28379151e-1f);
  float lower = fmaf(r, a, a);
  int upper = 0.921875f <= a;
  float b = upper ? a : 0.0f;
  float t = fmaf(1.72948930e-5f, b, -3.83208680e-4f);
  t = fmaf(t, b, 3.88393435e-3f);
  t = fmaf(t, b, -2.42545605e-2f);
  t = fmaf(t, b, 1.06777847e-1f);
  t = fmaf(t, b, 6.34846687e-1f);
  t = fmaf(t, b, 1.28717512e-1f);
  t = -fmaf(t, b, b);
  t = t > -88.3762626647949f ? t : -88.3762626647949f;
  float m = fmaf(t, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float f = fmaf(m, -6.93145752e-1f, t);
  f = fmaf(m, -1.42860677e-6f, f);
  float e = fmaf(1.38319808e-3f, f, 8.37550033e-3f);
  e = fmaf(e, f, 4.16689515e-2f);
  e = fmaf(e, f, 1.66664466e-1f);
  e = fmaf(e, f, 4.99999851e-1f);
  e = fmaf(e, f, 1.0f);
  e = fmaf(e, f, 1.0f);
  e = 1.0f - e * tp_ort_float((uint32_t)((int32_t)m + 127) << 23);
  float v = upper ? e : lower;
  return tp_ort_bits(x) >> 31 ? -v : v;
}""", ("tp_ort_bits",)),
    "tp_ort_gelu_erf": ("""static inline float tp_ort_gelu_erf(float x) {
  return 0.5f * x * (tp_ort_erf(x * 0.70710678118654752440f) + 1.0f);
}""", ("tp_ort_erf",)),
    "tp_ort_gelu_tanh": ("""static inline float tp_ort_gelu_tanh(float x) {
  float u = x * (0.035677408136300125f * x * x + 0.7978845608028654f);
  return 0.5f * x * (tp_ort_tanh(u) + 1.0f);
}""", ("tp_ort_tanh",)),
    # MLAS's exp kernels (Exp and Softmax's sum-exp, both CPU variants) share this: x - m ln 2 in two fused steps
    # (ln 2's high and low parts), then the polynomial in Horner form up to its first "+ 1"; each kernel ends it
    # in its own way
    "tp_ort_exp_reduce": ("""static inline float tp_ort_exp_reduce(float x, float m) {
  float r = fmaf(m, -6.93145752e-1f, x);
  return fmaf(m, -1.42860677e-6f, r);
}""", ()),
    "tp_ort_exp_poly": ("""static inline float tp_ort_exp_poly(float r) {
  float p = fmaf(0x1.694000p-10f, r, 0x1.125edcp-7f);
  p = fmaf(p, r, 0x1.555b5ap-5f);
  p = fmaf(p, r, 0x1.555450p-3f);
  p = fmaf(p, r, 0x1.fffff6p-2f);
  return fmaf(p, r, 1.0f);
}""", ()),
    # MLAS exp, AVX512F kernel: lower clamp only, 2^m applied with one rounding (VSCALEFPS)
    "tp_ort_exp_avx512f": ("""static inline float tp_ort_exp_avx512f(float x) {
  if (x != x) return x;
  if (x == INFINITY) return x;
  x = -103.9720840454f > x ? -103.9720840454f : x;
  float m = fmaf(x, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = tp_ort_exp_reduce(x, m);
  float p = tp_ort_exp_poly(r);
  p = fmaf(p, r, 1.0f);
  return ldexpf(p, m > 300.0f ? 300 : (int)m);
}""", ("tp_ort_exp_reduce", "tp_ort_exp_poly")),
    # MLAS exp, FMA3 kernel: clamped to [-103.97, 88.78], 2^m in a normal and an overflow factor
    "tp_ort_exp_fma3": ("""static inline float tp_ort_exp_fma3(float x) {
  x = -103.9720840454f > x ? -103.9720840454f : x;
  x = 88.7762626647950f < x ? 88.7762626647950f : x;
  float biased = fmaf(x, 1.44269504088896341f, 12582912.0f);
  float m = biased - 12582912.0f;
  float r = tp_ort_exp_reduce(x, m);
  float p = tp_ort_exp_poly(r);
  int32_t e = (int32_t)(tp_ort_bits(biased) << 23);
  int32_t normal = e < 0x3F800000 ? e : 0x3F800000;
  normal = normal > (int32_t)0xC1000000 ? normal : (int32_t)0xC1000000;
  float over = tp_ort_float((uint32_t)(e - normal + 0x3F800000));
  p = fmaf(p, r * over, over);
  return p * tp_ort_float((uint32_t)(normal + 0x3F800000));
}""", ("tp_ort_bits", "tp_ort_exp_reduce", "tp_ort_exp_poly")),
    # MLAS softmax's exp of x - max (its sum-exp kernels; x - max <= 0): AVX512F clamps at -103.97 and scales with
    # one rounding (results down to the subnormals, 0 below: measured), FMA3 clamps at -88.38 and scales by 2^m
    # built from the rounding bias's bits
    "tp_ort_sumexp_avx512f": ("""static inline float tp_ort_sumexp_avx512f(float v) {
  v = -103.9720840454f > v ? -103.9720840454f : v;
  float m = fmaf(v, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = tp_ort_exp_reduce(v, m);
  float p = tp_ort_exp_poly(r);
  p = fmaf(p, r, 1.0f);
  return v != v ? v : ldexpf(p, (int)m);
}""", ("tp_ort_exp_reduce", "tp_ort_exp_poly")),
    "tp_ort_sumexp_fma3": ("""static inline float tp_ort_sumexp_fma3(float v) {
  v = -88.3762626647949f > v ? -88.3762626647949f : v;
  float biased = fmaf(v, 1.44269504088896341f, 12582912.0f);
  float m = biased - 12582912.0f;
  float r = tp_ort_exp_reduce(v, m);
  float p = tp_ort_exp_poly(r);
  p = fmaf(p, r, 1.0f);
  return p * tp_ort_float((tp_ort_bits(biased) << 23) + 0x3F800000u);
}""", ("tp_ort_bits", "tp_ort_exp_reduce", "tp_ort_exp_poly")),
    # Eigen's packet exp (SSE2, no FMA)
    "tp_ort_eigen_exp": ("""static inline float tp_ort_eigen_exp(float x0) {
  if (x0 != x0) return x0;
  float x = x0 < 88.723f ? x0 : 88.723f;
  float m = floorf(x * 1.44269504088896341f + 0.5f);
  float r = m * -0.693359375f + x;
  r = m * 2.12194440e-4f + r;
  float r2 = r * r;
  float even = r2 * 1.37449637986719608306884765625e-3f + 4.166965186595916748046875e-2f;
  float odd = r2 * 8.36894474923610687255859375e-3f + 0.16666518151760101318359375f;
  even = r2 * even + 0.49999988079071044921875f;
  float y = r * odd + even;
  y = r2 * y + (r + 1.0f);
  y = ldexpf(y, (int)m);
  y = y > x0 ? y : x0;
  return x0 < -104.0f ? 0.0f : y;
}""", ()),
    # Eigen's packet log (SSE2, no FMA)
    "tp_ort_eigen_log": ("""static inline float tp_ort_eigen_log(float x0) {
  if (x0 != x0 || x0 < 0.0f) return NAN;
  if (x0 == 0.0f) return -INFINITY;
  if (x0 == INFINITY) return x0;
  int k;
  float x = frexpf(x0, &k), e = (float)k;
  if (x < 0.707106781186547524f) { e = e - 1.0f; x = (x - 1.0f) + x; } else { x = x - 1.0f; }
  float p = x * 0.18256296349849254f + 1.0000000190281063f;
  p = x * p + 1.0000000190281136f;
  p = x * p;
  float q = x * 0.049616247954120038f + 0.59923249590823520f;
  q = x * q + 1.4999999999999927f;
  q = x * q + 1.0f;
  return e * 0.693147180559945309417f + p / q;
}""", ()),
    # Eigen's log1p (through its packet log)
    "tp_ort_eigen_log1p": ("""static inline float tp_ort_eigen_log1p(float x) {
  float u = x + 1.0f;
  if (u == 1.0f) return x;
  float l = tp_ort_eigen_log(u);
  if (u == l) return x;
  return x * (l / (u - 1.0f));
}""", ("tp_ort_eigen_log",)),
    "tp_ort_log": ("""static inline float tp_ort_log(float x, int tail) {
  return tail ? logf(x) : tp_ort_eigen_log(x);
}""", ("tp_ort_eigen_log",)),
    # Eigen's packet sin / cos (SSE2, no FMA): quadrant by rounding x * 2/pi, a four-part Cody-Waite reduction,
    # both polynomials, selected and signed by the quadrant.  From |x| = 18838 (cos) / 25966 (sin) Eigen reduces
    # with Payne-Hanek, not written here (the C library's sinf / cosf is used).
    "tp_ort_eigen_sincos": ("""static inline float tp_ort_eigen_sincos(float x0, int sine) {
  float x = fabsf(x0);
  if (!(x < (sine ? 25966.0f : 18838.0f))) return sine ? sinf(x0) : cosf(x0);
  float yr = x * 0.636619746685028076171875f + 12582912.0f;
  uint32_t q = tp_ort_bits(yr);
  float y = yr - 12582912.0f;
  x = y * -1.5703125f + x;
  x = y * -0.000483989715576171875f + x;
  x = y * 1.62865035235881805419921875e-07f + x;
  x = y * 5.5644315544167710640977020375430583953857421875e-11f + x;
  uint32_t sign = (sine ? (tp_ort_bits(x0) ^ (q << 30)) : ((q + 1u) << 30)) & 0x80000000u;
  float s2 = x * x;
  float c = 2.4372266125283204019069671630859375e-05f * s2 + -0.00138865201734006404876708984375f;
  c = c * s2 + 0.041666619479656219482421875f;
  c = c * s2 + -0.5f;
  c = c * s2 + 1.0f;
  float s = -0.0001959234114083702898469196984621021329076029360294342041015625f * s2
            + 0.0083326873655616851693794799871284340042620897293090820312500000f;
  s = s * s2 + -0.1666666203982298255503735617821803316473960876464843750000000000f;
  s = s * s2;
  s = s * x + x;
  int even = (q & 1u) == 0u;
  float v = sine ? (even ? s : c) : (even ? c : s);
  return tp_ort_float(tp_ort_bits(v) ^ sign);
}""", ("tp_ort_bits",)),
    "tp_ort_sin": ("""static inline float tp_ort_sin(float x, int tail) {
  return tail ? sinf(x) : tp_ort_eigen_sincos(x, 1);
}""", ("tp_ort_eigen_sincos",)),
    "tp_ort_cos": ("""static inline float tp_ort_cos(float x, int tail) {
  return tail ? cosf(x) : tp_ort_eigen_sincos(x, 0);
}""", ("tp_ort_eigen_sincos",)),
    "tp_ort_softplus": ("""static inline float tp_ort_softplus(float x, int tail) {
  if (tail) return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
  return x > 0.0f ? x + tp_ort_eigen_log1p(tp_ort_eigen_exp(-x)) : tp_ort_eigen_log1p(tp_ort_eigen_exp(x));
}""", ("tp_ort_eigen_exp", "tp_ort_eigen_log1p")),
    "tp_ort_elu": ("""static inline float tp_ort_elu(float x, float alpha, int tail) {
  return x >= 0.0f ? x : alpha * ((tail ? expf(x) : tp_ort_eigen_exp(x)) - 1.0f);
}""", ("tp_ort_eigen_exp",)),
    "tp_ort_selu": ("""static inline float tp_ort_selu(float x, float alpha, float gamma, int tail) {
  float ga = gamma * alpha;
  return x > 0.0f ? gamma * x : ga * ((tail ? expf(x) : tp_ort_eigen_exp(x)) - 1.0f);
}""", ("tp_ort_eigen_exp",)),
    # Celu: max(x, 0) + min(alpha * (exp(x / alpha) - 1), 0), Eigen's exp as in Elu
    "tp_ort_celu": ("""static inline float tp_ort_celu(float x, float alpha, int tail) {
  float xa = x / alpha;
  float e = alpha * ((tail ? expf(xa) : tp_ort_eigen_exp(xa)) - 1.0f);
  return (x > 0.0f ? x : 0.0f) + (e < 0.0f ? e : 0.0f);
}""", ("tp_ort_eigen_exp",)),
    "tp_ort_softsign": ("""static inline float tp_ort_softsign(float x) {
  return (1.0f / (1.0f + fabsf(x))) * x;
}""", ()),
}


def definitions(source: str) -> list[str]:
    """The C definitions of the tp_ort_ helpers `source` calls (and theirs), each before its callers."""
    out: list[str] = []

    def need(name: str) -> None:
        if name in out:
            return
        for dep in _DEFS[name][1]:
            need(dep)
        out.append(name)

    for name in sorted(set(re.findall(r"\b(tp_ort_[a-z0-9_]+)\b", source))):
        if name in _DEFS:
            need(name)
    # guarded: the host functions' C is concatenated into files (compile.host_units), several calling one helper
    return [f"#ifndef {n.upper()}_DEFINED\n#define {n.upper()}_DEFINED\n{_DEFS[n][0]}\n#endif" for n in out]


@functools.lru_cache(maxsize=1)
def exp_variant() -> str:
    """Which of MLAS's Exp kernels onnxruntime runs on this machine: "avx512f" on an x86-64 CPU whose flags
    (/proc/cpuinfo) include avx512f, else "fma3" (onnxruntime's choice on x86-64 with AVX2 and FMA3; a CPU
    without them, or another architecture, runs kernels not reproduced here)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "fma3"
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    return "avx512f" if "avx512f" in flags else "fma3"


def exp_helper() -> str:
    return f"tp_ort_exp_{exp_variant()}"


# per-element functions: ONNX-level name -> (helper, takes the Eigen tail flag)
EIGEN_TAIL = {"tp_ort_log", "tp_ort_sin", "tp_ort_cos", "tp_ort_softplus", "tp_ort_elu", "tp_ort_selu", "tp_ort_celu"}


def elementwise_te(x: Any, helper: str, *params: float, then: str | None = None) -> Any:
    """te.compute of float32 `x` (a te tensor), each element through C `helper` (with float `params`; the Eigen
    tail flag for the helpers in EIGEN_TAIL, from the element's flat index), and `then`: "mish" multiplies by x
    after tanh: x * tanh(helper(x))."""
    from tvm import te, tirx

    shape = [int(d) for d in x.shape]
    n = 1
    for d in shape:
        n *= d
    tail_from = n - n % 4

    def flat(idx: tuple[Any, ...]) -> Any:
        f = tirx.const(0, "int64")
        for i, d in zip(idx, shape):
            f = f * tirx.const(d, "int64") + i.astype("int64")
        return f

    def f(*idx: Any) -> Any:
        v = x(*idx)
        args: list[Any] = [v, *(tirx.const(float(p), "float32") for p in params)]
        if helper in EIGEN_TAIL:
            tail = (tirx.const(0, "int32") if tail_from == n
                    else tirx.Select(flat(idx) >= tirx.const(tail_from, "int64"), tirx.const(1, "int32"),
                                     tirx.const(0, "int32")))
            args.append(tail)
        y = tirx.call_extern("float32", helper, *args)
        if then == "mish":
            y = v * tirx.call_extern("float32", "tp_ort_tanh", y)
        return y

    return te.compute(x.shape, f, name=helper.removeprefix("tp_"))


def elementwise_call(bb: Any, x: Any, helper: str, *params: float, then: str | None = None) -> Any:
    """bb.call_te of `elementwise_te` on the relax expression `x` (float32)."""
    return bb.call_te(lambda t: elementwise_te(t, helper, *params, then=then), x,
                      primfunc_name_hint=helper.removeprefix("tp_"))


def softmax_te(x: Any) -> Any:
    """Softmax over the last axis of float32 `x` as onnxruntime's CPU kernel computes it (MlasComputeSoftmax), per
    row of D elements: the maximum (exact in any order; -inf for a row of -inf); e = exp(x + (-max)) by the sum-exp kernel of this CPU's
    variant (`exp_variant`); the sum of e in that kernel's order: L lanes (16 for AVX512F, 8 for FMA3), lane j
    adding e[L c + j] for c = 0, 1, ... in order, the lanes (AVX512F: lane j + lane j + 8 first) added as
    ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)); y = e * (1 / sum)."""
    from tvm import te, tirx

    shape = [int(d) for d in x.shape]
    lead, d = shape[:-1], shape[-1]
    avx512 = exp_variant() == "avx512f"
    lanes = 16 if avx512 else 8
    f32 = "float32"
    k = te.reduce_axis((0, d), name="k")
    # from -inf (te.max starts from the lowest finite float): a row of -inf has the maximum -inf, so x - max is NaN
    # and the row NaN, as onnxruntime returns it (GPT-2's masked scores behind infinite scales)
    row_max = te.comm_reducer(lambda a, b: tirx.Max(a, b), lambda t: tirx.const(float("-inf"), t), name="row_max")
    mx = te.compute(lead, lambda *r: row_max(x[(*r, k)], axis=k), name="sm_max")
    helper = "tp_ort_sumexp_avx512f" if avx512 else "tp_ort_sumexp_fma3"
    e = te.compute(shape, lambda *i: tirx.call_extern(f32, helper, x[i] + -mx[i[:-1]]), name="sm_exp")
    chunks = -(-d // lanes)
    c = te.reduce_axis((0, chunks), name="c")
    acc = te.compute((*lead, lanes), lambda *i: te.sum(
        tirx.Select(c * lanes + i[-1] < d, e[(*i[:-1], tirx.min(c * lanes + i[-1], d - 1))], tirx.const(0.0, f32)),
        axis=c), name="sm_lanes")

    def total(*r: Any) -> Any:
        a = [acc[(*r, j)] for j in range(lanes)]
        if avx512:
            a = [a[j + 8] + a[j] for j in range(8)]
        return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))

    scale = te.compute(lead, lambda *r: tirx.const(1.0, f32) / total(*r), name="sm_scale")
    return te.compute(shape, lambda *i: e[i] * scale[i[:-1]], name="sm_out")
