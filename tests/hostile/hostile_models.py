"""Small ONNX models the hostile tests build their cases around."""

from __future__ import annotations

from typing import Any

import numpy as np


def qdq_in(nodes: list[Any], inits: list[Any], width: int = 16, **model_kw: Any) -> Any:
    """x [1, width] -> Quantize -> Dequantize (`dq`) -> `nodes` -> y [1, width]."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"), *inits]
    head = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq")]
    graph = helper.make_graph(head + nodes, "hostile", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], **model_kw)
