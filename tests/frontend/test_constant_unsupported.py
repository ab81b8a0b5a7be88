"""Nodes of operators neither TVM's importer nor Tileplan converts, whose inputs are constants (an audio front
end's HannWindow of a constant size and its MelWeightMatrix, a Det of a constant): onnxruntime folds them into
constants before running, so the compile does too (onnx_import.evaluate_constant_unsupported). They were refused
('operator HannWindow ... is not supported'); a nondeterministic one (RandomNormal) stays refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.errors import InputError
from tileplan.frontend.runner import run_artifact


def _model(window_op: str) -> bytes:
    """x [1, 64] -> Q -> DQ -> Mul(window(64)) -> MatMul(MelWeightMatrix(...)) -> Q -> DQ -> y [1, 8]."""
    from onnx import TensorProto, helper, numpy_helper

    consts = {"s": np.float32(0.02), "z": np.int8(0), "n": np.int64(64), "bins": np.int64(8),
              "dft": np.int64(126), "rate": np.int64(16000), "lo": np.float32(0), "hi": np.float32(8000),
              "sy": np.float32(0.05), "zy": np.int8(0)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node(window_op, ["n"], ["w"], name="window"),
             helper.make_node("Mul", ["xd", "w"], ["xw"], name="windowed"),
             helper.make_node("MelWeightMatrix", ["bins", "dft", "rate", "lo", "hi"], ["mel"], name="mel"),
             helper.make_node("MatMul", ["xw", "mel"], ["m"], name="to_mel"),
             helper.make_node("QuantizeLinear", ["m", "sy", "zy"], ["mq"]),
             helper.make_node("DequantizeLinear", ["mq", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "front_end", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("window_op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_constant_windows_and_mel_matrices_are_evaluated_as_onnxruntime_folds_them(window_op: str) -> None:
    data = _model(window_op)
    res = compile_bytes(data)
    x = np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    assert np.array_equal(got, want), (got, want)


def test_a_random_operator_stays_refused_naming_the_node() -> None:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("RandomNormal", [], ["r"], shape=[1, 4], seed=1.0, name="noise"),
             helper.make_node("Add", ["x", "r"], ["y"])]
    graph = helper.make_graph(nodes, "noise", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(InputError, match="noise"):
        compile_bytes(model.SerializeToString())
