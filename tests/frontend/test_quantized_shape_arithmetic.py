"""Shape arithmetic that onnxruntime's quantizer quantized (held-out set 6, Hugging Face MobileViT,
bench/zoo_export.py `hf_mobilevit`), in small onnx.helper models.

MobileViT's unfolding computes its patch counts in Python floats, `math.ceil(h / patch) * patch`, which torch.onnx
writes as `Constant -> Ceil -> Mul -> Cast -> Div -> Unsqueeze -> Concat` into a Reshape's shape, with no Shape
node. onnxruntime's quantize_static quantizes that Mul like any other (QuantizeLinear / DequantizeLinear around it,
QLinearMul in QOperator form), and onnxruntime's constant folding never folds a DequantizeLinear, so the Reshape's
shape stayed computed and the compile refused the model ("cannot be inferred statically")."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from frontend_helpers import assert_offloaded_and_matching, compile_bytes
from onnx import numpy_helper

from tileplan.frontend import zoo


def _constant(g: zoo._Graph, value: np.ndarray) -> str:
    """A `Constant` node, as torch.onnx writes a Python number (not an initializer)."""
    return g.op("Constant", [], value=numpy_helper.from_array(np.asarray(value), "v"))


def _patches(g: zoo._Graph, side: int, patch: int) -> str:
    """torch.onnx's export of `int(math.ceil(side / patch) * patch) // patch`, as MobileViT's unfolding has it
    (encoder/layer.2: Ceil, Mul, Cast, Div, Cast, Cast), unsqueezed for a Concat."""
    ceil = g.op("Ceil", [_constant(g, np.array(side / patch, np.float32))])
    padded = g.op("Mul", [ceil, _constant(g, np.array(float(patch), np.float32))])
    count = g.op("Div", [g.op("Cast", [padded], to=7), _constant(g, np.array(patch, np.int64))])
    count = g.op("Cast", [g.op("Cast", [count], to=7)], to=7)
    return g.op("Unsqueeze", [count, _constant(g, np.array([0], np.int64))])


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_a_reshape_whose_shape_is_quantized_arithmetic_folds_and_compiles(fmt):
    g = zoo._Graph(seed=21)
    x = g.conv("x", 3, 16, name="stem")  # (1, 16, 8, 8)
    # (1, 16, 8, 8) -> (1 * 16, 4 patches of 2 rows, 2, 8): MobileViT's first unfolding Reshape
    shape = g.op("Concat", [_constant(g, np.array([16], np.int64)), _patches(g, 8, 2),
                            _constant(g, np.array([2, 8], np.int64))], axis=0)
    rows = g.op("Reshape", [x, shape], "unfold")
    back = g.op("Reshape", [g.op("Transpose", [rows], perm=[0, 2, 1, 3]), _constant(g, np.array([1, 16, 8, 8],
                                                                                                np.int64))])
    y = g.conv(back, 16, 16, name="after")
    out = g.dense(g.op("Flatten", [g.op("GlobalAveragePool", [y])]), 16, 5, name="fc")
    rng = np.random.default_rng(0)
    model = g.model("patches", {"x": [1, 3, 8, 8]}, out, [1, 5])
    data = zoo.quantize(model, fmt, [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
                                     for _ in range(8)])
    nodes = onnx.load_model_from_string(data).graph.node
    made_by = {o: n.op_type for n in nodes for o in n.output}
    assert any(n.op_type == "QLinearMul" or (n.op_type == "Mul" and made_by.get(n.input[0]) == "DequantizeLinear")
               for n in nodes)  # the arithmetic quantized, as in MobileViT's exports
    res = compile_bytes(data)
    assert any("shape operands" in n and "onnxruntime" in n for n in res.summary["notes"]), res.summary["notes"]
    assert_offloaded_and_matching(data, res)
