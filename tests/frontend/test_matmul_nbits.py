"""com.microsoft MatMulNBits (blockwise 4- / 8-bit weights, as onnxruntime's MatMul4BitsQuantizer writes them for
LLM exports) against onnxruntime 1.32's CPU kernel. Tileplan dequantizes the packed weight once at import
(`contrib._nbits_weight`) and computes the float MatMul on the host: onnxruntime's product bit for bit where A has
more than one row (its kernel dequantizes B for MLAS's SGEMM), within float rounding for a single row (its M = 1
kernel sums per block in another order). It was refused ('the shape of its output ... cannot be inferred')."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import assert_matches_onnxruntime, compile_bytes, onnxruntime_outputs

from tileplan.errors import InputError
from tileplan.frontend.contrib import _nbits_weight
from tileplan.frontend.runner import run_artifact

MS = "com.microsoft"


def _pack(w: np.ndarray, block: int, symmetric: bool, bits: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B [N, k_blocks, block * bits / 8], scales [N * k_blocks], zero points [N * ceil(k_blocks * bits / 8)]) of a
    float [K, N] weight: onnxruntime's own quantizer kernel (quantize_matmul_4bits / 8bits, what
    MatMulNBitsQuantizer calls)."""
    from onnxruntime.capi import _pybind_state as ort_c

    k, n = w.shape
    blocks = (k + block - 1) // block
    packed = np.zeros((n, blocks, block * bits // 8), np.uint8)
    scales = np.zeros((n, blocks), np.float32)
    zp = np.zeros((n, (blocks * bits + 7) // 8), np.uint8)
    wp = np.ascontiguousarray(np.pad(w, ((0, blocks * block - k), (0, 0))))
    quantize = ort_c.quantize_matmul_4bits if bits == 4 else ort_c.quantize_matmul_8bits
    quantize(packed, wp, scales, zp, block, n, k, symmetric)
    return packed, scales.reshape(-1), zp.reshape(-1)


def _model(a_shape: list[int], k: int, n: int, block: int, symmetric: bool = False, bias: bool = False,
           bits: int = 4, qdq: bool = False, seed: int = 0, **attrs: object) -> tuple[bytes, np.ndarray]:
    """x [.., K] -> MatMulNBits (a random [K, N] weight, packed by onnxruntime's quantizer) [+ bias] -> y; `qdq`:
    between a QuantizeLinear / DequantizeLinear pair and another (a quantized model's float op). Returns the
    model and its packed parts' dequantized weight."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    packed, scales, zp = _pack(rng.standard_normal((k, n)).astype(np.float32), block, symmetric, bits)
    consts: dict[str, np.ndarray] = {"B": packed, "S": scales}
    x = "xd" if qdq else "x"
    ins = [x, "B", "S"] + ([] if symmetric else ["Z"])
    if not symmetric:
        consts["Z"] = zp
    if bias:
        consts["bias"] = rng.standard_normal(n).astype(np.float32)
        ins += [""] * (5 - len(ins)) + ["bias"]
    nodes = []
    if qdq:
        consts.update(xs=np.float32(0.05), xz=np.int8(0), ys=np.float32(0.1), yz=np.int8(3))
        nodes += [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"])]
    nodes.append(helper.make_node("MatMulNBits", ins, ["t" if qdq else "y"], domain=MS, name="mmnb", K=k, N=n,
                                  bits=bits, block_size=block, **attrs))
    if qdq:
        nodes += [helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["tq"]),
                  helper.make_node("DequantizeLinear", ["tq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "nbits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, a_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*a_shape[:-1], n])],
                              [numpy_helper.from_array(np.asarray(v), name) for name, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model.SerializeToString(), _nbits_weight(packed, scales, None if symmetric else zp, k, n, bits, block)


@pytest.mark.parametrize("k, n, block, symmetric, bits", [(64, 24, 32, False, 4), (100, 17, 16, True, 4),
                                                          (96, 8, 64, False, 4), (64, 24, 32, False, 8),
                                                          (40, 6, 16, True, 8)])
def test_dequantized_weight_is_onnxruntimes(k: int, n: int, block: int, symmetric: bool, bits: int) -> None:
    """The weight Tileplan unpacks is onnxruntime's, bit for bit: its kernel on the identity matrix (each output a
    single product by 1, plus exact zeros) returns the dequantized weight itself. K not a multiple of the block
    (100 / 16, 40 / 16: the last block padded), symmetric (no zero points: 2^(bits - 1)) and 8-bit codes."""
    data, w = _model([k, k], k, n, block, symmetric, bits=bits)
    want = onnxruntime_outputs(data, {"x": np.eye(k, dtype=np.float32)})["y"]
    assert w.dtype == np.float32 and w.shape == (k, n)
    np.testing.assert_array_equal(w, want)  # (as floats: the sum of products makes a -0 code +0)


@pytest.mark.parametrize("a_shape, k, n, block, symmetric, bias", [
    ([3, 64], 64, 24, 32, False, False), ([2, 5, 100], 100, 17, 16, False, True), ([7, 256], 256, 40, 128, True, True),
])
def test_matmul_nbits_equals_onnxruntime_bit_for_bit(a_shape, k, n, block, symmetric, bias) -> None:
    data, _ = _model(a_shape, k, n, block, symmetric, bias)
    x = np.random.default_rng(1).standard_normal(a_shape).astype(np.float32)
    res = compile_bytes(data)
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert any("MatMulNBits" in note for note in res.summary.get("notes", [])), res.summary.get("notes")


def test_single_row_is_within_float_rounding() -> None:
    """A = one row (an LLM's decoding step): onnxruntime's M = 1 kernel sums each block in its own order, so the
    results part by float rounding (measured: 1-2 ulps of the output's magnitude)."""
    data, w = _model([1, 1, 256], 256, 24, 32)
    x = np.random.default_rng(2).standard_normal([1, 1, 256]).astype(np.float32)
    got = run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    bound = (np.abs(x[0, 0]) @ np.abs(w)).astype(np.float32) * np.float32(2 ** -20)
    assert (np.abs(got - want)[0, 0] <= bound).all()


def test_quantized_model_with_matmul_nbits_matches_onnxruntime() -> None:
    data, _ = _model([4, 64], 64, 16, 32, bias=True, qdq=True)
    feeds = {"x": (np.random.default_rng(3).standard_normal([4, 64]) * 2).astype(np.float32)}
    assert_matches_onnxruntime(data, run_artifact(compile_bytes(data).artifact, feeds).outputs, feeds)


def test_weight_only_model_compiles() -> None:
    """A model whose only quantized op is a MatMulNBits (weight-only, as LLM exports are) is not a float model
    to be refused: its products run in float on the host."""
    data, _ = _model([3, 64], 64, 24, 32)
    assert compile_bytes(data).artifact


def _with(data: bytes, **change: object) -> bytes:
    """The model with the MatMulNBits node's attributes / extra inputs changed."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_model_from_string(data)
    node = next(n for n in model.graph.node if n.op_type == "MatMulNBits")
    for key, value in change.items():
        if key == "g_idx":
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(value, np.int32), "g_idx"))
            while len(node.input) < 4:
                node.input.append("")
            node.input.append("g_idx")
        elif key == "float_zp":
            z = next(t for t in model.graph.initializer if t.name == "Z")
            z.CopyFrom(numpy_helper.from_array(np.full(value, 8.0, np.float32), "Z"))
        else:
            for a in list(node.attribute):
                if a.name == key:
                    node.attribute.remove(a)
            node.attribute.append(helper.make_attribute(key, value))
    return model.SerializeToString()


@pytest.mark.parametrize("change, why", [
    ({"bits": 2}, "bits = 2 \\(Tileplan unpacks 4 and 8-bit codes\\)"),
    ({"g_idx": np.arange(64) // 32}, "a g_idx input"),
    ({"accuracy_level": 4}, "accuracy_level 4 \\(onnxruntime quantizes A to int8"),
    ({"float_zp": [24 * 2]}, "zero points of the scales' type"),
])
def test_unsupported_forms_are_refused_by_name(change: dict, why: str) -> None:
    data, _ = _model([3, 64], 64, 24, 32)
    with pytest.raises(InputError, match=f"MatMulNBits node 'mmnb': {why}"):
        compile_bytes(_with(data, **change))
