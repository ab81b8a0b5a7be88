"""A quantized MatMul whose activation operand is a constant of the model (torchvision's Swin V2: the continuous
position bias MLP runs on a constant table of relative coordinates, `relative_coords_table`, and its result is
added to every window's attention logits). onnxruntime's quantizer writes the constant either as an int8
initializer -> DequantizeLinear or as a float initializer -> QuantizeLinear -> DequantizeLinear; onnxruntime does not
fold DequantizeLinear, so both judges compute the MLP at run time with their integer kernels. Swin-V2-T's QDQ export
failed to compile (the accelerator call had no input: the constant was bound into the composite), found by the
held-out zoo run (bench/results/zoo_heldout.md)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes

from tileplan.frontend.runner import run_artifact

ROWS, IN, HID, OUT = 169, 2, 32, 4


def _cpb_model(table_form: str) -> bytes:
    """y = DQ(Q(DQ(x) + DQ(Q(MLP(table))))), MLP = Linear(IN, HID) -> ReLU -> Linear(HID, OUT) on the constant
    `table` [ROWS, IN], every tensor quantized as onnxruntime's QDQ quantizer writes it; `table_form`: "int8" (an
    int8 initializer -> DequantizeLinear) or "float" (a float initializer -> QuantizeLinear -> DequantizeLinear)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    table = rng.uniform(-8, 8, (ROWS, IN)).astype(np.float32)
    w1 = rng.integers(-127, 128, (IN, HID)).astype(np.int8)
    b1 = rng.integers(-2000, 2000, HID).astype(np.int32)
    w2 = rng.integers(-127, 128, (HID, OUT)).astype(np.int8)
    ts, hs, ms, xs, ys = 0.0627, 0.091, 0.13, 0.05, 0.07
    consts: dict[str, np.ndarray] = {
        "ts": np.float32(ts), "tz": np.int8(0), "w1": w1, "w1s": np.float32(0.011), "w1z": np.int8(0),
        "b1": b1, "b1s": np.float32(ts * 0.011), "b1z": np.int32(0), "hs": np.float32(hs), "hz": np.int8(-128),
        "w2": w2, "w2s": np.float32(0.007), "w2z": np.int8(0), "ms": np.float32(ms), "mz": np.int8(3),
        "xs": np.float32(xs), "xz": np.int8(-2), "ys": np.float32(ys), "yz": np.int8(1)}
    nodes = []
    if table_form == "int8":
        consts["tq"] = np.clip(np.rint(table / ts), -128, 127).astype(np.int8)
    else:
        consts["table"] = table
        nodes.append(helper.make_node("QuantizeLinear", ["table", "ts", "tz"], ["tq"]))
    nodes += [
        helper.make_node("DequantizeLinear", ["tq", "ts", "tz"], ["td"]),
        helper.make_node("DequantizeLinear", ["w1", "w1s", "w1z"], ["w1d"]),
        helper.make_node("DequantizeLinear", ["b1", "b1s", "b1z"], ["b1d"]),
        helper.make_node("MatMul", ["td", "w1d"], ["h0"]),
        helper.make_node("Add", ["h0", "b1d"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
        helper.make_node("DequantizeLinear", ["hq", "hs", "hz"], ["hd"]),
        helper.make_node("DequantizeLinear", ["w2", "w2s", "w2z"], ["w2d"]),
        helper.make_node("MatMul", ["hd", "w2d"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "ms", "mz"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "ms", "mz"], ["md"]),
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("Add", ["xd", "md"], ["s"]),
        helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["sq"]),
        helper.make_node("DequantizeLinear", ["sq", "ys", "yz"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "cpb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, OUT])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, OUT])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("table_form", ["int8", "float"])
def test_matmul_of_a_constant_operand_compiles_and_equals_onnxruntime(table_form):
    from tileplan.frontend.reference import reference_outputs

    data = _cpb_model(table_form)
    compiled = compile_bytes(data)
    macs = {op["name"]: op["where"] for op in compiled.summary["ops"] if op.get("macs")}
    assert macs and all(where == "accelerator" for where in macs.values()), macs
    x = np.random.default_rng(1).uniform(-6, 6, (ROWS, OUT)).astype(np.float32)
    got = run_artifact(compiled.artifact, {"x": x}).outputs["y"]
    for judge in ("ort-int8", "ort"):
        np.testing.assert_array_equal(got, reference_outputs(data, {"x": x}, judge)["y"], err_msg=judge)
