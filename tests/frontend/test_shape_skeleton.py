"""ONNX's shape inference runs on the model without the values of its weights (onnx_graph.shape_skeleton: the
initializers only DequantizeLinear reads as its quantized input), which it does not read, and gives what it gives
on the whole model: types and shapes (types_and_shapes) and the inferred model (onnx_import.infer_shapes)."""

from __future__ import annotations

import onnx
import pytest

from tileplan.frontend import onnx_graph, onnx_import, zoo


@pytest.mark.parametrize("name,fmt", [("cnn_small", "qdq"), ("attention", "qdq"), ("resnet_block", "qoperator"),
                                      ("mobilenet_block", "qdq")])
def test_inference_on_the_skeleton_is_inference_on_the_model(name, fmt):
    data = zoo.build(name, fmt)
    model = onnx_import.load_model(data).model  # (QOperator rewritten to QDQ, shapes fixed)
    del model.graph.value_info[:]
    skeleton = onnx_graph.shape_skeleton(model)
    assert skeleton is not model and skeleton.ByteSize() < model.ByteSize()
    bare = [t for t in skeleton.graph.initializer if not (t.raw_data or t.int32_data or t.float_data or t.int64_data)]
    assert bare and all(len(t.dims) for t in bare)  # weights: dims and type kept, values left out
    full = onnx.shape_inference.infer_shapes(model)
    dtypes, shapes = onnx_graph.types_and_shapes(model)
    assert dtypes == {**{t.name: t.data_type for t in full.graph.initializer},
                      **{i.name: i.type.tensor_type.elem_type for i in [*full.graph.input, *full.graph.value_info,
                                                                          *full.graph.output]}}
    assert shapes == {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
                      for i in [*full.graph.input, *full.graph.value_info, *full.graph.output]}
    strict = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    assert onnx_import.infer_shapes(model).SerializeToString() == strict.SerializeToString()


def test_a_weight_read_by_another_op_keeps_its_values():
    model = onnx_import.load_model(zoo.build("cnn_small", "qdq")).model
    w = next(n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"
             and any(t.name == n.input[0] for t in model.graph.initializer))
    model.graph.node.append(onnx.helper.make_node("Identity", [w], [w + "_seen"]))
    kept = {t.name: t for t in onnx_graph.shape_skeleton(model).graph.initializer}
    assert kept[w] == next(t for t in model.graph.initializer if t.name == w)
