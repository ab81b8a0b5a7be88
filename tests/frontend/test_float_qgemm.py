"""A QOperator QGemm without an output scale (its result is float: onnxruntime's quantizer leaves a Gemm so when
the result is reshaped before it is quantized, as on ViT's exports) runs on the accelerator: int32 accumulators
out, the host's float(acc) * s_a * s_b, equal to onnxruntime's QGemm."""

from __future__ import annotations

import numpy as np
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


def _model(m: int = 10, k: int = 40, n: int = 24, a_zp: int = 5, bias: bool = True, per_channel: bool = False
           ) -> bytes:
    """x float [m, k] -> QuantizeLinear (int8) -> QGemm(transB, int8 weights [n, k], int32 bias, no y_scale:
    float [m, n]) -> Reshape [2, m/2, n]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    sa = np.float32(0.031)
    sb = (rng.uniform(0.002, 0.01, n) if per_channel else np.asarray(0.0063)).astype(np.float32)
    w = rng.integers(-127, 128, (n, k), dtype=np.int8)
    inits = [numpy_helper.from_array(np.asarray(v), name) for name, v in (
        ("sa", sa), ("za", np.int8(a_zp)), ("w", w), ("sb", sb),
        ("zb", np.zeros(sb.shape, np.int8) if per_channel else np.int8(0)),
        ("shape", np.asarray([2, m // 2, n], np.int64)))]
    ins = ["xq", "sa", "za", "w", "sb", "zb"]
    if bias:
        inits.append(numpy_helper.from_array(rng.integers(-3000, 3000, n).astype(np.int32), "c"))
        ins.append("c")
    nodes = [helper.make_node("QuantizeLinear", ["x", "sa", "za"], ["xq"], name="quant"),
             helper.make_node("QGemm", ins, ["y"], name="gemm", domain="com.microsoft", transB=1),
             helper.make_node("Reshape", ["y", "shape"], ["out"], name="reshape")]
    graph = helper.make_graph(nodes, "float_qgemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, m // 2, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _check(data: bytes, m: int = 10, k: int = 40) -> dict:
    res = compile_bytes(data)
    gemm = next(o for o in res.summary["ops"] if o["name"] == "gemm")
    assert gemm["where"] == "accelerator", gemm["reason"]
    assert "float output" in gemm["reason"] and "int32 accumulators out" in gemm["reason"], gemm["reason"]
    feeds = {"x": np.random.default_rng(3).standard_normal((m, k)).astype(np.float32) * 2}
    got = run_artifact(res.artifact, feeds).outputs["out"]
    want = onnxruntime_outputs(data, feeds)["out"]
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    # the same float ops in the same order as onnxruntime's QGemm (float(acc) * (s_a * s_b)): bit-equal
    np.testing.assert_array_equal(got, want)
    return gemm


def test_float_output_qgemm_runs_on_the_accelerator_and_equals_onnxruntime():
    gemm = _check(_model())
    assert "input zero point 5 folded into the bias" in gemm["reason"]


def test_float_output_qgemm_without_bias_and_per_channel_weight_scales():
    gemm = _check(_model(a_zp=-7, bias=False, per_channel=True))
    assert "24 per-channel scales" in gemm["reason"], gemm["reason"]


def _float_bias_model(m: int = 10, k: int = 40, n: int = 24) -> bytes:
    """ViT's QOperator attention output projection: DequantizeLinear(int8 activation), DequantizeLinear(int8
    weights) -> Gemm (transB) with a float bias the quantizer left float (through an Identity) -> Reshape."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(12)
    inits = [numpy_helper.from_array(np.asarray(v), name) for name, v in (
        ("sa", np.float32(0.027)), ("za", np.int8(-4)), ("wq", rng.integers(-127, 128, (n, k), dtype=np.int8)),
        ("sb", np.float32(0.0071)), ("zb", np.int8(0)), ("c", rng.standard_normal(n).astype(np.float32)),
        ("shape", np.asarray([2, m // 2, n], np.int64)))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sa", "za"], ["xq"], name="quant"),
             helper.make_node("DequantizeLinear", ["xq", "sa", "za"], ["xf"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["wq", "sb", "zb"], ["w"], name="dq_w"),
             helper.make_node("Identity", ["c"], ["bias"], name="bias_identity"),
             helper.make_node("Gemm", ["xf", "w", "bias"], ["y"], name="gemm", transB=1),
             helper.make_node("Reshape", ["y", "shape"], ["out"], name="reshape")]
    graph = helper.make_graph(nodes, "float_gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, m // 2, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_dequantized_gemm_with_a_float_bias_runs_on_the_accelerator():
    data = _float_bias_model()
    res = compile_bytes(data)
    gemm = next(o for o in res.summary["ops"] if o["name"] == "gemm")
    assert gemm["where"] == "accelerator", gemm["reason"]
    assert "the float bias added after, in float" in gemm["reason"], gemm["reason"]
    feeds = {"x": np.random.default_rng(4).standard_normal((10, 40)).astype(np.float32) * 2}
    got = run_artifact(res.artifact, feeds).outputs["out"]
    want = onnxruntime_outputs(data, feeds)["out"]
    # onnxruntime runs this Gemm in float (a float sum of dequantized products): the program's exact integer sum,
    # scaled once, differs from it by float rounding only
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))
