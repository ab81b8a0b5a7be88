"""QLinearSoftmax (onnxruntime's contrib op, written by its QOperator quantizer) against onnxruntime itself.

onnxruntime 1.32's kernel (read in the x86-64 wheel's machine code: a scalar loop, no kernel chosen by the CPU):
the exp table is float32(exp((i - 255 + c) * s_x)) in double with c = max(0, logf(FLT_MAX / D) - 5) / s_x, where
FLT_MAX / D is a float32 division and its log a float32 logf; the row's exp values are summed in order in float32;
y = clamp(nearbyint(double(e) * double(floor(1.0f / s_y)) / double(sum)) + z_y) with the quotient in double.

ROW is where torchvision's Swin-V2-T QOperator export (held-out, bench/results/zoo_heldout.md) first parted from
onnxruntime: its first block's window attention, input scale 0.062385835, zero point -128, output scale 1/256,
zero point -128. onnxruntime gives -44 for the row's maximum; the table with log in double (Tileplan's before)
gives e * 256 / sum = 83.49998 in float32 and double alike, so -45; the float32 logf table moves it to 83.500005
and -44. Random rows rarely tell the tables apart (measured on 4.0 million random elements, 200 configurations:
the double-log table differed from onnxruntime on 1 element; a float32 quotient on 200,000 elements in rows of
D = 1 or 2, where e * floor(1 / s_y) overflows float32, and on 2 more), so rows are also chosen where the quotient
is close to a half."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from frontend_helpers import compile_bytes

from tileplan.frontend.host_ops import softmax_table
from tileplan.frontend.reference import reference_outputs
from tileplan.frontend.runner import run_artifact

ROW = [-31, -14, 11, -56, -10, 41, 50, 77, 49, 59, -31, 41, -21, -27, 0, 22, -2, -6, 12, -2, 1, 12, -8, -14, 11, -64,
       -24, 12, 53, 23, 11, 11, -2, 23, -7, 23, 17, 34, 14, -4, 5, -17, 12, -14, -11, 41, 3, -69, 19, 32, 30, -9, 7,
       28, 31, 25, -36, -3, -6, -6, -2, -26, -37, 11]
SWIN = (0.062385835, 1 / 256, -128)  # (s_x, s_y, z_y) of ROW


def softmax_reference(x: np.ndarray, x_scale: float, y_scale: float, y_zp: int) -> np.ndarray:
    """int8 QLinearSoftmax over the last axis in NumPy, as onnxruntime 1.32 computes it: the arithmetic
    `host_ops._qsoftmax_te`'s C implements, itself checked against onnxruntime below. Each row's exp values looked
    up (index (127 - max + x) & 255), summed in order in float32; y = clamp(nearbyint(double(e) *
    double(floor(1.0f / s_y)) / double(sum)) + z_y, -128, 127), the quotient in double."""
    x = np.asarray(x, np.int8)
    d = x.shape[-1]
    rows = x.reshape(-1, d).astype(np.int32)
    e = softmax_table(x_scale, d)[(127 - rows.max(axis=1, keepdims=True) + rows) & 0xFF]
    total = np.cumsum(e, axis=1, dtype=np.float32)[:, -1:]  # in order, float32
    c = float(np.floor(np.float32(1.0) / np.float32(y_scale)))
    q = np.rint(e.astype(np.float64) * c / total.astype(np.float64)) + float(y_zp)
    return np.clip(q, -128, 127).astype(np.int8).reshape(x.shape)


def _model(rows: int, d: int, xs: float = SWIN[0], ys: float = SWIN[1], yz: int = SWIN[2], signed: bool = True,
           opset: int = 13) -> bytes:
    """One QLinearSoftmax over the last axis of an int8 (uint8) [rows, d] input, z_x 0 (it does not enter the
    kernel's arithmetic). `opset` < 13 is the old form (softmax over axis 1.. of the 2-D input: the same rows)."""
    from onnx import TensorProto, helper, numpy_helper

    q = np.int8 if signed else np.uint8
    consts = {"xs": np.float32(xs), "xz": q(0), "ys": np.float32(ys), "yz": q(yz)}
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            axis=-1 if opset >= 13 else 1, opset=opset)
    ty = TensorProto.INT8 if signed else TensorProto.UINT8
    graph = helper.make_graph([node], "qsoftmax", [helper.make_tensor_value_info("x", ty, [rows, d])],
                              [helper.make_tensor_value_info("y", ty, [rows, d])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def _float_model(rows: int, d: int, xs: float, ys: float, yz: int) -> bytes:
    """x (float) -> QuantizeLinear (uint8, z_x 128) -> QLinearSoftmax (uint8) -> DequantizeLinear -> y: a uint8
    QOperator softmax as the quantizer writes it (Tileplan stores the uint8 codes as int8, code - 128)."""
    from onnx import TensorProto, helper, numpy_helper

    consts = {"xs": np.float32(xs), "xz": np.uint8(128), "ys": np.float32(ys), "yz": np.uint8(yz)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearSoftmax", ["xq", "xs", "xz", "ys", "yz"], ["yq"], domain="com.microsoft",
                              axis=-1, opset=13),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qsoftmax_u8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, d])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def _old_arithmetic(x: np.ndarray, xs: float, ys: float, yz: int) -> np.ndarray:
    """Tileplan's arithmetic before this fix: the table's log in double, the quotient in float32."""
    d = x.shape[-1]
    shift = max(0.0, math.log(float(np.finfo(np.float32).max) / d) - 5.0) / float(np.float32(xs))
    table = np.zeros(256, np.float32)
    for i in range(256):
        table[(i - 128) & 0xFF] = np.float32(math.exp((i - 255 + shift) * float(np.float32(xs))))
    r = x.astype(np.int32)
    e = table[(127 - r.max(axis=1, keepdims=True) + r) & 0xFF]
    total = np.cumsum(e, axis=1, dtype=np.float32)[:, -1:]
    c = np.float32(math.floor(np.float32(1.0) / np.float32(ys)))
    return np.clip(np.rint((e * c) / total) + yz, -128, 127).astype(np.int8)


def _rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """n int8 rows of length d that stress the rounding, a quarter of each kind: random codes over a random
    spread (small spreads give many equal maxima), all-equal rows (sum = d * e: the exact ties when d * e is
    exact), rows of two values (the maximum and one below it, at a random share), and random rows again."""
    kind = np.arange(n) % 4
    spread = rng.integers(1, 256, (n, 1))
    lo = rng.integers(-128, 128, (n, 1)) % (256 - np.minimum(spread, 255)) - 128
    x = np.minimum(lo + rng.integers(0, 256, (n, d)) % spread, 127)
    x[kind == 3] = rng.integers(-128, 128, (int((kind == 3).sum()), 1))
    two = kind == 2
    hi = rng.integers(-100, 128, (int(two.sum()), 1))
    below = hi - rng.integers(1, 29, hi.shape)
    x[two] = np.where(rng.random((hi.shape[0], d)) < rng.random(hi.shape), hi, below)
    return x.astype(np.int8)


def _near_boundary(rng: np.random.Generator, d: int, xs: float, ys: float, yz: int, want: int) -> np.ndarray:
    """`want` rows of three codes (m1 at the maximum, m2 at j1 below it, the rest at j2 below) whose quotients
    e * floor(1 / s_y) / sum, computed with the exact sum, lie closest to a half relative to their size (the best
    of 400,000 random draws), each in random orders: the float32 sum's rounding then puts the quotient on either
    side of the half, where a float32 quotient, another table, another summation order or another rounding rounds
    apart from onnxruntime's."""
    table = softmax_table(xs, d).astype(np.float64)
    c = float(np.floor(np.float32(1.0) / np.float32(ys)))
    n = 400_000
    m1 = rng.integers(1, d + 1, n)
    m2 = (rng.random(n) * (d - m1 + 1)).astype(np.int64)
    j1 = rng.integers(1, 64, n)
    j2 = j1 + rng.integers(1, 64, n)
    e = [table[127], table[(127 - j1) & 0xFF], table[(127 - j2) & 0xFF]]
    total = m1 * e[0] + m2 * e[1] + (d - m1 - m2) * e[2]
    dist = np.full(n, np.inf)
    for k, ek in enumerate(e):
        q = ek * c / total
        near = np.abs(q - np.floor(q) - 0.5) / np.maximum(q, 0.5)
        dist = np.minimum(dist, np.where([m1 > 0, m2 > 0, d - m1 - m2 > 0][k], near, np.inf))
    rows = []
    for i in np.argsort(dist)[:max(1, want // 4)]:
        hi = int(rng.integers(-128 + int(j2[i]), 128))
        for _ in range(4):
            row = np.full(d, hi - int(j2[i]))
            at = rng.permutation(d)
            row[at[:m1[i]]] = hi
            row[at[m1[i]:m1[i] + m2[i]]] = hi - int(j1[i])
            rows.append(row)
    return np.asarray(rows[:want], np.int8)


def test_swin_v2_row_equals_onnxruntime():
    x = np.asarray([ROW], np.int8)
    data = _model(*x.shape)
    want = reference_outputs(data, {"x": x}, "ort")["y"]
    assert int(want.max()) == -44
    np.testing.assert_array_equal(softmax_reference(x, *SWIN), want)
    np.testing.assert_array_equal(run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"], want)
    assert int(_old_arithmetic(x, *SWIN).max()) == -45  # the row tells the two apart


def test_reference_matches_onnxruntime_on_many_rows():
    """softmax_reference (NumPy, the arithmetic the C implements) equals onnxruntime on 100 random configurations
    (D 1..2000, scales, zero points, int8 and uint8, both opsets): uint8 codes u run as int8 u - 128 with z_y - 128
    (the kernel's table is the same, indexed 255 - max + u)."""
    rng = np.random.default_rng(24)
    for case in range(100):
        d = int(rng.integers(1, 2001)) if case % 3 else int(rng.choice([1, 2, 3, 4, 49, 64, 197, 577, 1000, 2000]))
        xs = float(np.float32(np.exp(rng.uniform(np.log(0.002), np.log(0.5)))))
        ys = float(np.float32(rng.choice([1 / 256, 1 / 255, 1 / 127, np.exp(rng.uniform(np.log(1 / 300), np.log(1 / 50)))])))
        signed = bool(case % 2)
        opset = 12 if case % 5 == 0 else 13
        yz = int(rng.choice([-128, 0, int(rng.integers(-128, 128))]))
        x = _rows(rng, max(4, 6000 // d), d)
        if signed:
            want = reference_outputs(_model(*x.shape, xs, ys, yz, True, opset), {"x": x}, "ort")["y"]
        else:
            u = (x.astype(np.int16) + 128).astype(np.uint8)
            got_u = reference_outputs(_model(*x.shape, xs, ys, yz + 128, False, opset), {"x": u}, "ort")["y"]
            want = (got_u.astype(np.int16) - 128).astype(np.int8)
        got = softmax_reference(x, xs, ys, yz)
        assert np.array_equal(got, want), (case, d, xs, ys, yz, signed, int((got != want).sum()))


CASES = [  # (D, s_x, s_y, z_y): Swin's windows, ViT's 197 tokens, odd and long rows, the exact ties at D = 4
    (64, SWIN[0], 1 / 256, -128), (49, 0.11, 1 / 256, -128), (197, 0.043, 1 / 256, -128), (4, 0.0625, 1 / 255, -128),
    (1, 0.2, 1 / 256, -128), (3, 0.037, 1 / 256, 16), (577, 0.021, 1 / 255, -128), (2000, 0.35, 1 / 300, -100)]


@pytest.mark.parametrize("d,xs,ys,yz", CASES)
def test_compiled_rows_equal_onnxruntime(d: int, xs: float, ys: float, yz: int):
    """Tileplan's C (the TE kernel, built with -ffp-contract=off) on random rows, tie rows and rows near a
    rounding boundary (where the old arithmetic parts from onnxruntime's), against onnxruntime's session."""
    rng = np.random.default_rng(d)
    x = np.concatenate([_rows(rng, max(8, 4000 // d), d), _near_boundary(rng, d, xs, ys, yz, 16)])
    data = _model(*x.shape, xs, ys, yz)
    want = reference_outputs(data, {"x": x}, "ort")["y"]
    np.testing.assert_array_equal(softmax_reference(x, xs, ys, yz), want)
    np.testing.assert_array_equal(run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"], want)


def test_exact_tie_rounds_half_to_even():
    """D = 4 equal codes, s_y = 1/255 (floor(1 / s_y) = 254): the sum 4 * e is exact and e * 254 / sum = 63.5
    exactly, which onnxruntime's nearbyint rounds to 64 (y = -64), as the C does."""
    x = np.full((2, 4), 5, np.int8)
    e = softmax_table(0.0625, 4)[127]
    assert float(e) * 254 / float(np.float32(4) * e) == 63.5 and np.float32(4) * e == 4 * float(e)
    data = _model(2, 4, 0.0625, 1 / 255, -128)
    want = reference_outputs(data, {"x": x}, "ort")["y"]
    assert (want == -64).all()
    np.testing.assert_array_equal(run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"], want)


def test_uint8_qoperator_softmax_equals_onnxruntime():
    """A uint8 QLinearSoftmax (the quantizer's old default) runs as int8 on the codes - 128: equal to onnxruntime,
    including its saturation at 255 (a row whose maximum takes nearly all the mass)."""
    rng = np.random.default_rng(8)
    xs, ys, yz = 0.09, 1 / 256, 0
    codes = np.concatenate([_rows(rng, 60, 64), _near_boundary(rng, 64, xs, ys, yz - 128, 8)]).astype(np.int16) + 128
    codes[0] = 0
    codes[0, 5] = 255  # e_max / sum ~ 1: 256 saturates to 255
    x = ((codes - 128) * np.float32(xs)).astype(np.float32)
    data = _float_model(*x.shape, xs, ys, yz)
    want = reference_outputs(data, {"x": x}, "ort")["y"]
    assert want[0, 5] == np.float32(255 * np.float32(ys))
    np.testing.assert_array_equal(run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"], want)


def test_opset12_form_equals_onnxruntime():
    """The old form (opset attribute 12, softmax over axis 1.. of a 2-D input: the same rows, and the table built
    for D = the product of those axes) compiles to the same kernel and equals onnxruntime."""
    rng = np.random.default_rng(12)
    d, xs, ys, yz = 197, 0.043, 1 / 256, -128
    x = np.concatenate([_rows(rng, 40, d), _near_boundary(rng, d, xs, ys, yz, 8)])
    data = _model(*x.shape, xs, ys, yz, opset=12)
    want = reference_outputs(data, {"x": x}, "ort")["y"]
    np.testing.assert_array_equal(run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"], want)


def test_opset12_form_of_a_3d_input_equals_onnxruntime():
    """The old form over the last axis of a 3-D input ([2, 5, 33], axis 2): the rows are the last axis. (A merge
    once keyed the channels-last pool's transposes on the rank this form reads, which transposed such a softmax.)"""
    from onnx import TensorProto, helper, numpy_helper

    x = _rows(np.random.default_rng(3), 10, 33).reshape(2, 5, 33)
    consts = {"xs": np.float32(0.043), "xz": np.int8(0), "ys": np.float32(1 / 256), "yz": np.int8(-128)}
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            axis=2, opset=12)
    graph = helper.make_graph([node], "qsoftmax3", [helper.make_tensor_value_info("x", TensorProto.INT8, [2, 5, 33])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [2, 5, 33])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    data = model.SerializeToString()
    want = reference_outputs(data, {"x": x}, "ort")["y"]
    np.testing.assert_array_equal(run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"], want)


@pytest.mark.parametrize("signed", [True, False])
def test_infinite_input_scale_equals_onnxruntime(signed: bool):
    """An input scale of +inf (onnxruntime's quantizer writes one for attention scores under a -inf causal mask,
    the GPT-2 block's QOperator export): the kernel's table top entry is exp(0 x inf) = NaN, every row's sum is
    NaN, and its scalar conversion of NaN to the output type keeps the low byte of INT32_MIN, so every output
    code is 0 whatever the input, zero point and signedness. Tileplan's QDQ reading of the same unit (the float
    definition: NaN, quantized to the type's minimum) is not what the QOperator file's kernel computes."""
    rng = np.random.default_rng(5)
    x = np.concatenate([_rows(rng, 12, 16), np.full((2, 16), -128, np.int8)])
    for yz in (-128, 0, 17):
        if signed:
            data, feed = _model(*x.shape, float("inf"), 1 / 256, yz, True), x
        else:
            data, feed = _model(*x.shape, float("inf"), 1 / 256, yz + 128, False), (x.astype(np.int16) + 128).astype(np.uint8)
        want = reference_outputs(data, {"x": feed}, "ort")["y"]
        assert (want == 0).all()
        res = compile_bytes(data)
        np.testing.assert_array_equal(run_artifact(res.artifact, {"x": feed}).outputs["y"], want)
        host = {o["op"]: o["reason"] for o in res.summary["ops"] if o["where"] == "host"}
        assert "constantofshape" in host and "depend on no input value" in host["constantofshape"], host


def _qdq_model(shape: list[int], axis: int, xs: float, ys: float, yz: int) -> bytes:
    """x (float) -> QuantizeLinear -> DequantizeLinear -> Softmax(axis) -> QuantizeLinear -> DequantizeLinear,
    int8, opset 17: a QDQ softmax as onnxruntime's quantize_static writes it."""
    from onnx import TensorProto, helper, numpy_helper

    consts = {"xs": np.float32(xs), "xz": np.int8(0), "ys": np.float32(ys), "yz": np.int8(yz)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("Softmax", ["xf"], ["s"], axis=axis),
             helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("shape, axis", [([1, 2, 64, 1, 1], 1), ([1, 2, 64, 1, 1], -4), ([6, 10], 0),
                                         ([2, 3, 5], 1), ([6, 10], -1)])
def test_qdq_softmax_any_axis_equals_onnxruntime_int8(shape: list[int], axis: int):
    """onnxruntime 1.32's QDQ transformer (default and int8 sessions alike) runs every int8 DQ -> Softmax -> Q unit
    as QLinearSoftmax, over any axis (measured: its outputs equal `softmax_reference` over the moved axis and part
    from the float definition at an output scale of 1/255). The first of these is timm's SKNet-ResNet-18 selective
    kernel (softmax over axis 1 of (1, 2, 64, 1, 1)), which Tileplan computed in float (18.8% of its outputs
    equal) because the rewrite took only the last axis."""
    xs, ys, yz = 0.05, 1 / 255, -128
    data = _qdq_model(shape, axis, xs, ys, yz)
    x = (np.random.default_rng(7).standard_normal(shape) * 3).astype(np.float32)
    want = reference_outputs(data, {"x": x}, "ort-int8")["y"]
    codes = np.clip(np.rint(x / np.float32(xs)), -128, 127).astype(np.int8)
    ours = np.moveaxis(softmax_reference(np.moveaxis(codes, axis, -1), xs, ys, yz), -1, axis)
    np.testing.assert_array_equal(np.rint(want / np.float32(ys)) + yz, ours.astype(np.float32))  # it fuses
    f = codes.astype(np.float32) * np.float32(xs)
    e = np.exp(f - f.max(axis, keepdims=True))
    floats = np.clip(np.rint(e / e.sum(axis, keepdims=True) / np.float32(ys)) + yz, -128, 127)
    assert shape[axis] == 10 or (floats != ours).any()  # the case tells the two apart (except the last-axis one)
    np.testing.assert_array_equal(reference_outputs(data, {"x": x}, "ort")["y"], want)
    np.testing.assert_array_equal(run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"], want)


@pytest.mark.parametrize("shape, axis", [([6, 10], 1), ([2, 3, 5], 1), ([1, 2, 64, 1, 1], 1)])
def test_qdq_softmax_opset11_equals_onnxruntime_int8(shape: list[int], axis: int):
    """An opset-11 QDQ softmax (over axes `axis`.. flattened): onnxruntime fuses it too, as QLinearSoftmax with its
    opset<13 rows (measured: its outputs equal `softmax_reference` over the flattened rows). onnx's importer
    writes reshape -> softmax(last axis) -> reshape, which Tileplan computed in float (87.5% equal for [6, 10])."""
    xs, ys, yz = 0.05, 1 / 255, -128
    data = bytearray(_qdq_model(shape, axis, xs, ys, yz))
    from onnx import load_from_string

    model = load_from_string(bytes(data))
    model.opset_import[0].version = 11
    data = model.SerializeToString()
    x = (np.random.default_rng(3).standard_normal(shape) * 3).astype(np.float32)
    want = reference_outputs(data, {"x": x}, "ort-int8")["y"]
    codes = np.clip(np.rint(x / np.float32(xs)), -128, 127).astype(np.int8)
    rows = codes.reshape(int(np.prod(shape[:axis])), -1)
    ours = softmax_reference(rows, xs, ys, yz).reshape(shape)
    np.testing.assert_array_equal(np.rint(want / np.float32(ys)) + yz, ours.astype(np.float32))  # it fuses
    np.testing.assert_array_equal(run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"], want)


def test_qdq_softmax_between_reshapes_equals_onnxruntime_int8():
    """DQ -> Reshape -> Softmax -> Reshape -> Q (opset 17): onnxruntime's QDQ propagation moves the DQ and Q across
    the Reshapes, and it fuses the softmax (measured: its outputs equal `softmax_reference` over the reshaped
    rows); the relax graph is the one of an imported opset<13 Softmax, rewritten alike."""
    from onnx import TensorProto, helper, numpy_helper

    xs, ys, yz = 0.05, 1 / 255, -128
    consts = {"xs": np.float32(xs), "xz": np.int8(0), "ys": np.float32(ys), "yz": np.int8(yz),
              "flat": np.array([6, 10], np.int64), "back": np.array([6, 2, 5], np.int64)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("Reshape", ["xf", "flat"], ["xr"]),
             helper.make_node("Softmax", ["xr"], ["s"], axis=-1),
             helper.make_node("Reshape", ["s", "back"], ["sr"]),
             helper.make_node("QuantizeLinear", ["sr", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 2, 5])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    x = (np.random.default_rng(5).standard_normal([6, 2, 5]) * 3).astype(np.float32)
    want = reference_outputs(data, {"x": x}, "ort-int8")["y"]
    codes = np.clip(np.rint(x / np.float32(xs)), -128, 127).astype(np.int8).reshape(6, 10)
    fused = softmax_reference(codes, xs, ys, yz).reshape(6, 2, 5).astype(np.float32)
    np.testing.assert_array_equal(np.rint(want / np.float32(ys)) + yz, fused)  # onnxruntime fuses it
    f = codes.astype(np.float32) * np.float32(xs)
    e = np.exp(f - f.max(1, keepdims=True))
    floats = np.clip(np.rint(e / e.sum(1, keepdims=True) / np.float32(ys)) + yz, -128, 127).reshape(6, 2, 5)
    assert (floats != fused).any()  # the case tells the two apart
    np.testing.assert_array_equal(run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"], want)


def _chain_model(shape: list[int], pre: list[tuple[str, dict, dict]], post: list[tuple[str, dict, dict]],
                 axis: int, out_shape: list[int], fanout: bool = False) -> bytes:
    """x -> Q -> DQ -> `pre` ops -> Softmax(axis) -> `post` ops -> Q -> DQ -> y, int8, opset 17; each op
    (op type, attributes, {initializer name: value} inputs after the data). `fanout`: the DQ also feeds a Neg
    (a second output)."""
    from onnx import TensorProto, helper, numpy_helper

    xs, ys, yz = 0.05, 1 / 255, -128
    consts: dict[str, np.ndarray] = {"xs": np.float32(xs), "xz": np.int8(0), "ys": np.float32(ys), "yz": np.int8(yz)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["a"])]
    cur = "a"
    for k, (op, attrs, extra) in enumerate([*pre, ("Softmax", {"axis": axis}, {}), *post]):
        consts.update(extra)
        nodes.append(helper.make_node(op, [cur, *extra], [f"t{k}"], **attrs))
        cur = f"t{k}"
    nodes += [helper.make_node("QuantizeLinear", [cur, "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)]
    if fanout:
        nodes.append(helper.make_node("Neg", ["a"], ["z"]))
        outs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, shape))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], outs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


_T021 = ("Transpose", {"perm": [0, 2, 1]}, {})
_T0213 = ("Transpose", {"perm": [0, 2, 1, 3]}, {})
_HEADS = ("Reshape", {}, {"heads": np.array([1, 6, 2, 5], np.int64)})
_SQ = ("Squeeze", {}, {"sq_axes": np.array([0], np.int64)})
_UNSQ = ("Unsqueeze", {}, {"unsq_axes": np.array([0], np.int64)})
_SLICE = ("Slice", {}, {"starts": np.array([1], np.int64), "ends": np.array([6], np.int64),
                        "axes": np.array([1], np.int64)})
# (name, input shape, ops before the softmax, its axis, ops after, numpy of the codes before / after, output shape)
_CHAINS = [
    ("transpose_before", [2, 6, 10], [_T021], -1, [], lambda c: c.transpose(0, 2, 1), lambda s: s, [2, 10, 6]),
    ("transpose_after", [2, 6, 10], [], -1, [_T021], lambda c: c, lambda s: s.transpose(0, 2, 1), [2, 10, 6]),
    ("transpose_around", [2, 6, 10], [_T021], 1, [_T021], lambda c: c.transpose(0, 2, 1),
     lambda s: s.transpose(0, 2, 1), [2, 6, 10]),
    ("heads", [1, 2, 30], [_HEADS, _T0213], -1, [_T0213], lambda c: c.reshape(1, 6, 2, 5).transpose(0, 2, 1, 3),
     lambda s: s.transpose(0, 2, 1, 3), [1, 6, 2, 5]),
    ("squeeze_unsqueeze", [1, 6, 10], [_SQ], 0, [_UNSQ], lambda c: c[0], lambda s: s[None], [1, 6, 10]),
    ("slice_transpose", [2, 6, 10], [_SLICE, _T021], -1, [], lambda c: c[:, 1:6].transpose(0, 2, 1), lambda s: s,
     [2, 10, 5]),
]


@pytest.mark.parametrize("fanout", [False, True])
@pytest.mark.parametrize("name, shape, pre, axis, post, before, after, out_shape", _CHAINS,
                         ids=[c[0] for c in _CHAINS])
def test_qdq_softmax_through_data_movement_equals_onnxruntime_int8(name: str, shape: list[int], pre: list, axis: int,
                                                                   post: list, before: Any, after: Any,
                                                                   out_shape: list[int], fanout: bool):
    """DQ -> Transpose / Reshape / Squeeze / Unsqueeze / Slice -> Softmax -> ... -> Q (an attention's scores moved
    between heads and rows): onnxruntime's QDQ propagation moves the DequantizeLinear forward and the
    QuantizeLinear backward across these value-preserving ops (its outputs equal `softmax_reference` on the moved
    codes, measured on onnxruntime 1.32, also where the DQ feeds another op), so the softmax is its QLinearSoftmax.
    Tileplan computed it in float (85% of `transpose_before`'s outputs equal)."""
    xs, ys, yz = 0.05, 1 / 255, -128
    data = _chain_model(shape, pre, post, axis, out_shape, fanout)
    x = (np.random.default_rng(11).standard_normal(shape) * 3).astype(np.float32)
    want = reference_outputs(data, {"x": x}, "ort-int8")["y"]
    codes = before(np.clip(np.rint(x / np.float32(xs)), -128, 127).astype(np.int8))
    fused = after(np.moveaxis(softmax_reference(np.moveaxis(codes, axis, -1), xs, ys, yz), -1, axis))
    np.testing.assert_array_equal(np.rint(want / np.float32(ys)) + yz, fused.astype(np.float32))  # it fuses
    f = codes.astype(np.float32) * np.float32(xs)
    e = np.exp(f - f.max(axis, keepdims=True))
    floats = after(np.clip(np.rint(e / e.sum(axis, keepdims=True) / np.float32(ys)) + yz, -128, 127))
    assert (floats != fused).any()  # the case tells the two apart
    res = compile_bytes(data)
    np.testing.assert_array_equal(run_artifact(res.artifact, {"x": x}).outputs["y"], want)
    assert any("QLinearSoftmax" in n for n in res.summary.get("notes", [])), res.summary.get("notes")


@pytest.mark.parametrize("transpose, second", [(False, "s"), (True, "s"), (True, "t")])
def test_qdq_softmax_feeding_another_op_stays_float_as_onnxruntime(transpose: bool, second: str):
    """DQ -> Softmax (-> Transpose) -> Q where the softmax (or the transpose) also feeds a Neg: onnxruntime neither
    moves its QuantizeLinear back nor fuses the unit (its selectors want the softmax's only consumer to be the Q;
    measured: 91% of its outputs equal `softmax_reference`), so the softmax is the float definition, here too."""
    from onnx import TensorProto, helper, numpy_helper

    xs, ys, yz = 0.05, 1 / 255, -128
    consts = {"xs": np.float32(xs), "xz": np.int8(0), "ys": np.float32(ys), "yz": np.int8(yz)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["a"]),
             helper.make_node("Softmax", ["a"], ["s"], axis=-1)]
    if transpose:
        nodes.append(helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 1]))
    nodes += [helper.make_node("QuantizeLinear", ["t" if transpose else "s", "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
              helper.make_node("Neg", [second], ["z"])]
    out = [2, 10, 6] if transpose else [2, 6, 10]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, out if second == "t" else [2, 6, 10])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    x = (np.random.default_rng(5).standard_normal([2, 6, 10]) * 3).astype(np.float32)
    want = reference_outputs(data, {"x": x}, "ort-int8")["y"]
    codes = np.clip(np.rint(x / np.float32(xs)), -128, 127).astype(np.int8)
    fused = softmax_reference(codes, xs, ys, yz)
    fused = fused.transpose(0, 2, 1) if transpose else fused
    assert (np.rint(want / np.float32(ys)) + yz != fused).any()  # onnxruntime does not fuse it
    res = compile_bytes(data)
    np.testing.assert_array_equal(run_artifact(res.artifact, {"x": x}).outputs["y"], want)
    assert not any("QLinearSoftmax" in n for n in res.summary.get("notes", [])), res.summary.get("notes")
