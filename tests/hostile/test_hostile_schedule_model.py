"""POST /schedule's `model` (a base64 ONNX model whose layers are planned) is read outside the API process.

It was read in a thread of the API process: decoding, the size checks, naming the nodes and ONNX's shape inference
hold the interpreter's lock, so a 1.4 MB body of 49,000 Relu nodes (under max_request_bytes and the node bound) held
every other request's event loop for 0.9 s at a time (1.3 s for 49,000 MatMuls; measured with a 5 ms ticker thread,
load ~15), and a client posting them back to back starved /healthz. Now the model is read in the sandbox processes,
under `sandbox_time_limit_s` and `sandbox_memory_mb`, like an inline descriptor: past the budget is a 422 at
body.model naming it, and the API's loop never waits on it.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.settings import Settings


def relu_chain(n: int) -> str:
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm")]
    prev = "a"
    for i in range(n):
        nodes.append(helper.make_node("Relu", [prev], [f"{i}"]))
        prev = f"{i}"
    graph = helper.make_graph(nodes, "relus", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, 4])],
                              [numpy_helper.from_array(np.ones((4, 4), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return base64.b64encode(model.SerializeToString()).decode()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # a reading budget far below what 49,000 nodes take (over a CPU second), far above a 2-node model's
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile_schedule_model"), solver_processes=1,
                        sandbox_time_limit_s=0.25, wait_limit_s=60)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_reading_a_large_model_is_held_to_the_sandbox_budget(client: TestClient) -> None:
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "model": relu_chain(49_000)})
    assert r.status_code == 422, r.text[:500]
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "model"] and d["type"] == "too_costly" and "sandbox_time_limit_s" in d["msg"], d


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile_schedule_roomy"), solver_processes=1,
                        wait_limit_s=60)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_a_small_model_is_still_planned_and_its_errors_keep_their_place(roomy: TestClient) -> None:
    client = roomy
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "model": relu_chain(1),
                                       "options": {"time_limit_s": 2}})
    assert r.status_code == 200, r.text[:500]
    assert [p["layer"]["name"] for p in r.json()["plans"]] == ["mm"]
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "model": "not base64!"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "model"], r.text[:500]


def _layer_model(node: Any, x: list[int], w: Any) -> str:
    from onnx import TensorProto, helper

    graph = helper.make_graph([node], "odd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return base64.b64encode(model.SerializeToString()).decode()


def _odd(case: str) -> str:
    """Layers ONNX's checker would refuse but POST /schedule's reading (shape inference, not strict) let through to
    the layer's own validation: a 500 (pydantic's ValidationError, a ZeroDivisionError) out of the sandbox."""
    from onnx import helper, numpy_helper

    w4 = numpy_helper.from_array(np.ones((4, 4, 3, 3), np.float32), "w")
    if case == "negative dims":
        w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
        w.dims[:] = [-4, -4]
        return _layer_model(helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), [4, 4], w)
    attrs = {"group 0": {"group": 0}, "strides 0": {"strides": [0, 0]}, "pads 2^40": {"pads": [1 << 40] * 4},
             "dilations 0": {"dilations": [0, 0]}}[case]
    return _layer_model(helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs), [1, 4, 8, 8], w4)


@pytest.mark.parametrize("case", ["negative dims", "group 0", "strides 0", "pads 2^40", "dilations 0"])
def test_a_layer_onnx_would_not_accept_is_a_422_at_the_model(roomy: TestClient, case: str) -> None:
    r = roomy.post("/schedule", json={"hardware": "gemmini-16x16", "model": _odd(case)})
    assert r.status_code == 422, r.text[:500]
    d = r.json()["detail"][0]
    assert d["loc"][:2] in (["body", "model"], ["body", "layers"]), d  # (never a field the body does not have)


def test_a_model_with_too_many_layers_is_refused_at_the_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    """More layers than max_layers in a `model` is the model's fault: the 413 names body.model (it named
    body.layers, a field the request did not send)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, prev = [], "x"
    for i in range(3):
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        prev = f"m{i}"
    ws = [numpy_helper.from_array(np.ones((4, 4 + i), np.float32) if i == 0 else np.ones((4 + i - 1, 4 + i),
                                  np.float32), f"w{i}") for i in range(3)]
    graph = helper.make_graph(nodes, "three", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], ws)
    model = base64.b64encode(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                             .SerializeToString()).decode()
    settings = Settings(data_dir=tmp_path_factory.mktemp("too_many_layers"), solver_processes=1, max_layers=2)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/schedule", json={"hardware": "gemmini-16x16", "model": model})
    assert r.status_code == 413, r.text[:500]  # (as too many `layers`: the request is too large)
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "model"] and "at most 2" in d["msg"] and d["type"] == "too_many_layers", d
