"""Issue 23, case 3: no request makes a worker process grow without bound.

A 13 KB model (`ConstantOfShape` of 5*10^8 elements) grew one compile process to 4.3 GiB. Two lines of defence:
the model's sizes are bounded before any reader allocates (nodes, declared shapes, constants an operator makes
from constant inputs: a 422 naming the node, nothing stored), and every worker process runs under a memory cap
(`worker_memory_mb`): with the bounds loosened past what the cap holds, the compile fails alone with a
`memory_limit` error (the request's fault: a 422, final, not run again by the identical request) and the next
compile runs in a fresh process.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.errors import InputError
from tileplan.frontend import zoo
from tileplan.frontend.onnx_import import decode
from tileplan.settings import Settings

SIDE = 1 << 14  # the bomb's constant: SIDE x SIDE float32, 1 GiB


def bomb(side: int = SIDE) -> bytes:
    """A quantized-looking model whose one constant is side*side float32 made by ConstantOfShape (273 bytes)."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, side])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [side, side])
    inits = [numpy_helper.from_array(np.array([side, side], np.int64), "shape"),
             numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq"),
             helper.make_node("ConstantOfShape", ["shape"], ["c"], name="bomb",
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Add", ["dq", "c"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "bomb", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def many_nodes(n: int) -> bytes:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Identity", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def declared(shape: list[int]) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="id")], "big",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_sizes_are_bounded_before_anything_is_allocated() -> None:
    with pytest.raises(InputError) as err:
        decode(bomb())
    assert err.value.loc == ("model", "bomb") and "elements" in err.value.msg
    with pytest.raises(InputError, match="nodes"):
        decode(many_nodes(50_001))
    with pytest.raises(InputError, match="elements"):
        decode(declared([1 << 14, 1 << 14, 4]))
    decode(many_nodes(1000))  # (within the bounds: read)


def _post(client: TestClient, model: bytes, wait: bool = True) -> Any:
    return client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(),
                                         "options": {"time_limit_s": 2}, "wait": wait})


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile_memory"), solver_processes=1, wait_limit_s=300)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_constant_bomb_is_a_422_naming_the_node(client: TestClient) -> None:
    r = _post(client, bomb(), wait=False)
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "model", "bomb"] and "elements" in d["msg"], d
    assert client.get("/compiles").json()["compiles"] == []


def test_a_compile_over_the_memory_cap_fails_alone_as_the_requests_fault(tmp_path: Path) -> None:
    # the bounds loosened past what the cap holds: the cap is what stops the compile
    settings = Settings(data_dir=tmp_path, solver_processes=1, wait_limit_s=300, worker_memory_mb=512,
                        max_tensor_elements=1 << 29)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = _post(c, bomb())
        assert r.status_code == 422, r.text
        doc = r.json()
        assert doc["status"] == "failed" and doc["error"]["type"] == "memory_limit", doc
        assert "512 MiB" in doc["error"]["msg"]
        again = _post(c, bomb())  # the model's fault: answered again, not run again
        assert again.status_code == 422 and again.json()["id"] == doc["id"]
        assert c.app.state.metrics.compiles.labels("memory_limit")._value.get() == 1
        ok = _post(c, zoo.build("mlp", "qdq"))  # the next compile runs (in a fresh process)
        assert ok.status_code == 200, ok.text
        assert c.app.state.modules.pool.slots.killed >= 1


def _with_sparse(dense: int, where: str) -> bytes:
    """The QDQ MLP plus a sparse tensor of one value whose dense shape is `dense` elements (4 bytes each)."""
    import onnx
    from onnx import TensorProto, helper

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    st = helper.make_sparse_tensor(helper.make_tensor("sp", TensorProto.FLOAT, [1], [1.0]),
                                   helper.make_tensor("sp_i", TensorProto.INT64, [1], [0]), [dense])
    if where == "initializer":
        m.graph.sparse_initializer.append(st)
    else:
        m.graph.node.insert(0, helper.make_node("Constant", [], ["sp"], name="sp_const", sparse_value=st))
    return m.SerializeToString()


@pytest.mark.parametrize("where", ["initializer", "constant"])
def test_a_sparse_tensors_dense_shape_is_bounded(where: str) -> None:
    """A sparse tensor's 12 bytes can stand for 2^40 elements: any reader that densifies it (onnxruntime, an
    importer) allocates them all, so its dense shape counts as a tensor's."""
    with pytest.raises(InputError) as err:
        decode(_with_sparse(1 << 40, where))
    assert err.value.type == "too_large" and "'sp'" in err.value.msg and "sparse" in err.value.msg, err.value.msg


@pytest.mark.parametrize("factor", [0.5, 3])
def test_raw_data_must_hold_exactly_what_the_dims_say(factor: float) -> None:
    """raw_data shorter than its dims (the ONNX checker's catch) or longer (which the checker lets through, and
    TVM's importer failed on after the compile was queued and stored): a 422 naming the tensor, up front."""
    import onnx

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    t = max(m.graph.initializer, key=lambda t: len(t.raw_data))
    t.raw_data = (t.raw_data * 3)[: int(len(t.raw_data) * factor)]
    with pytest.raises(InputError) as err:
        decode(m.SerializeToString())
    assert err.value.loc == ("model",) and t.name in err.value.msg and "raw_data" in err.value.msg, err.value.msg


def test_compile_refuses_a_raw_data_mismatch_without_storing_a_compile(client: TestClient) -> None:
    import onnx

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    t = max(m.graph.initializer, key=lambda t: len(t.raw_data))
    t.raw_data = t.raw_data * 2
    r = _post(client, m.SerializeToString(), wait=False)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "model"], r.text
    assert client.get("/compiles").json()["compiles"] == []
