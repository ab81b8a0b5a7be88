"""ONNX bytes from a client -> a ModelProto, without the server ever opening a file.

ONNX lets a tensor keep its data outside the model (`data_location: EXTERNAL`, with a `location` relative to the
model's directory). A model that arrives as bytes has no directory: every reader down the line (ONNX's checker,
which stats the file; `numpy_helper.to_array`, onnxruntime, TVM's importer, which read it) resolves that location
against the server's working directory, which holds the server's own files and database. So a tensor with external
data anywhere in the model (initializers, sparse initializers, Constant attributes, subgraphs, functions, training
graphs) is refused here, before any of those readers sees the model. Every path that decodes a client's model
(`onnx_import.decode`, `workload_onnx.load_onnx`) goes through `parse_model`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tileplan.errors import InputError


def parse_model(data: bytes, loc: tuple[str, ...] = ("model",)) -> Any:
    """Bytes -> onnx.ModelProto; InputError at `loc` for bytes that are not ONNX or a model with external data."""
    import onnx
    from google.protobuf.message import DecodeError

    if not data:
        raise InputError(loc, "empty: expected the bytes of an ONNX model")
    try:
        model = onnx.load_model_from_string(bytes(data))
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise InputError(loc, f"not an ONNX model: {exc}") from None
    refuse_external_data(model, loc)
    return model


def refuse_external_data(model: Any, loc: tuple[str, ...] = ("model",)) -> None:
    """InputError naming the first tensor whose data is stored outside the model."""
    from onnx import TensorProto

    for where, tensor in _tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data):
            name = tensor.name or "(unnamed)"
            raise InputError(loc, f"tensor {name!r} ({where}) keeps its data outside the model (external data): "
                             "the server reads no files; send a model with every tensor's data inside it "
                             "(onnx.save_model(model, path, save_as_external_data=False))", "value_error")


def _tensors(model: Any) -> Iterator[tuple[str, Any]]:
    yield from _graph_tensors(model.graph, "graph")
    for fn in model.functions:
        yield from _node_tensors(fn.node, f"function {fn.name}")
    for i, info in enumerate(model.training_info):
        yield from _graph_tensors(info.initialization, f"training_info[{i}].initialization")
        yield from _graph_tensors(info.algorithm, f"training_info[{i}].algorithm")


def _graph_tensors(graph: Any, where: str) -> Iterator[tuple[str, Any]]:
    for t in graph.initializer:
        yield f"initializer of {where}", t
    for s in graph.sparse_initializer:
        yield f"sparse initializer of {where}", s.values
        yield f"sparse initializer of {where}", s.indices
    yield from _node_tensors(graph.node, where)


def _node_tensors(nodes: Any, where: str) -> Iterator[tuple[str, Any]]:
    for node in nodes:
        here = f"attribute of node {node.name or node.op_type!r} in {where}"
        for a in node.attribute:
            if a.HasField("t"):
                yield here, a.t
            yield from ((here, t) for t in a.tensors)
            if a.HasField("sparse_tensor"):
                yield here, a.sparse_tensor.values
                yield here, a.sparse_tensor.indices
            for s in a.sparse_tensors:
                yield here, s.values
                yield here, s.indices
            if a.HasField("g"):
                yield from _graph_tensors(a.g, f"subgraph {a.name} of node {node.name or node.op_type!r}")
            for g in a.graphs:
                yield from _graph_tensors(g, f"subgraph {a.name} of node {node.name or node.op_type!r}")
