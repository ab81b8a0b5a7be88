"""Hostile probes, tenth round (branch hostile10): each was a 5xx (or worse) and is now a 4xx naming the field.

1. A model whose graph inputs (or outputs) are of a type the program's C has no type for (float16, bfloat16, the
   float8 and 4-bit types): POST /compile failed in the compile with a KeyError (a 500, run again by every identical
   request). Now a 422 at the model, naming the input and its type, before anything is stored.
2. A model whose graph has no outputs: the checker passes it, and the compile failed building the artifact's host
   target (`make` on a `tileplan_run` of no outputs: a 500).
3. A Conv whose `kernel_shape` attribute disagrees with its weight's shape (ONNX's inference does not compare them,
   it takes the attribute): compiled into a program of the attribute's output shape computing the weight's kernel
   (wrong values, silently), or, with a kernel_shape larger than the weight, the compile's process aborted ("corrupted
   double-linked list", SIGABRT, counted as the server's: a 500 run again). Now a 422 naming the node.
4. A graph name or node name holding a NUL: names a compile stores (the model's name, the planned layers' names).
   PostgreSQL refuses a NUL in text: the compile's row could not be written (a 503 blaming the server's storage) or
   the plan store's write failed in the compile (a 500). Now a 422 at the model naming where the NUL is, on every
   database (SQLite stored it).
5. The SDK and CLI against a server that is not Tileplan's API (a proxy's page, JSON of another shape, JSON nested
   past Python's recursion limit, an endless or gzip-bombed body): KeyError, TypeError, AttributeError or
   RecursionError tracebacks, or the whole body read into memory. Now a ServiceError, one line from the CLI.
6. Error answers many times their request: 50,000 errors (7.2 MB) for a 500 KB /evaluate body. Now at most 20.
7. A Timeloop descriptor's `entries: 1e308` (a whole number): its capacity in bytes overflowed float arithmetic, a
   500. Now a 422 at the field naming the bound (2^62).
8. A Gather whose constant index is outside its data (onnxruntime refuses the model when it runs): TVM's `take`
   clips the index, so the compile succeeded and the program read the edge row. Now a 422 naming the node.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hostile_models import qdq_in as _qdq_in

from tileplan.api.app import create_app
from tileplan.errors import InputError
from tileplan.frontend.onnx_bytes import parse_model
from tileplan.settings import Settings


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile10"), solver_processes=1, wait_limit_s=120)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _compile(c: TestClient, model: bytes) -> Any:
    return c.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(),
                                    "options": {"time_limit_s": 2}, "wait": True})


def _detail(r: Any) -> dict[str, Any]:
    body = r.json()
    return dict((body.get("detail") or [body.get("error")])[0])


# -- 1: inputs of a type C has no type for --------------------------------------------------------------------------

UNTYPED = ["FLOAT16", "BFLOAT16", "FLOAT8E4M3FN", "INT4"]


def typed_identity(type_name: str, where: str = "input") -> bytes:
    """x [1, 4] of the type -> Identity -> y (`where` = "output": a float input Cast to the type)."""
    from onnx import TensorProto, helper

    t = getattr(TensorProto, type_name)
    if where == "input":
        nodes = [helper.make_node("Identity", ["x"], ["y"], name="i")]
        x_type = t
    else:
        nodes = [helper.make_node("Cast", ["x"], ["y"], name="c", to=t)]
        x_type = TensorProto.FLOAT
    g = helper.make_graph(nodes, "typed", [helper.make_tensor_value_info("x", x_type, [1, 4])],
                          [helper.make_tensor_value_info("y", t, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


@pytest.mark.parametrize("type_name", UNTYPED)
def test_an_input_of_a_type_the_program_cannot_hold_is_a_422(client: TestClient, type_name: str) -> None:
    r = _compile(client, typed_identity(type_name))
    assert r.status_code == 422, r.text
    err = _detail(r)
    assert err["loc"] == ["body", "model"], err
    assert "input 'x'" in err["msg"] and type_name.lower()[:5] in err["msg"].lower(), err
    assert "id" not in r.json(), "refused before anything was stored"


def test_an_output_of_a_type_the_program_cannot_hold_is_a_422(client: TestClient) -> None:
    r = _compile(client, typed_identity("FLOAT16", where="output"))
    assert r.status_code == 422, r.text
    assert "output 'y'" in _detail(r)["msg"]


# -- 2: no outputs --------------------------------------------------------------------------------------------------


def mute() -> bytes:
    """x -> Relu -> y, and no graph outputs."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "mute",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_graph_without_outputs_is_a_422(client: TestClient) -> None:
    r = _compile(client, mute())
    assert r.status_code == 422, r.text
    err = _detail(r)
    assert err["loc"] == ["body", "model"] and "no outputs" in err["msg"], err


# -- 3: kernel_shape against the weight -----------------------------------------------------------------------------


def conv(kernel_shape: list[int], weight_hw: int = 3) -> bytes:
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(np.ones((8, 8, weight_hw, weight_hw), np.int8), "w"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz")]
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], name="wdq"),
             helper.make_node("Conv", ["dq", "wd"], ["c"], name="conv", kernel_shape=kernel_shape),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"], name="oq"),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"], name="odq")]
    from onnx import TensorProto

    m = _qdq_in(nodes, inits)
    m.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8]))
    out = 8 - kernel_shape[0] + 1  # as ONNX's inference has it (from the attribute)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, out, out]))
    return m.SerializeToString()


def test_a_kernel_shape_that_is_not_the_weights_is_a_422_naming_the_node(client: TestClient) -> None:
    r = _compile(client, conv([5, 5]))
    assert r.status_code == 422, r.text
    err = _detail(r)
    assert err["loc"] == ["body", "model", "conv"], err
    assert "kernel_shape" in err["msg"], err


def test_a_kernel_shape_that_is_the_weights_still_compiles(client: TestClient) -> None:
    r = _compile(client, conv([3, 3]))
    assert r.status_code == 200, r.text


# -- 8: constant Gather indices outside the data ------------------------------------------------------------------


def gather(index: int, as_constant_node: bool = False) -> bytes:
    """x [4, 8] -> Gather(axis 0) at a constant index -> y [1, 8]."""
    from onnx import TensorProto, helper, numpy_helper

    ind = numpy_helper.from_array(np.array([index], np.int64), "ind")
    nodes = [helper.make_node("Gather", ["x", "ind"], ["y"], name="pick", axis=0)]
    if as_constant_node:
        nodes.insert(0, helper.make_node("Constant", [], ["ind"], name="k", value=ind))
    g = helper.make_graph(nodes, "gather", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [] if as_constant_node else [ind])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize(("index", "as_constant_node"), [(4, False), (1 << 40, False), (-5, True)])
def test_a_constant_gather_index_outside_its_data_is_a_422_naming_the_node(
        client: TestClient, index: int, as_constant_node: bool) -> None:
    """onnxruntime refuses such a model when it runs ("indices element out of data bounds"); TVM's `take` clipped the
    index, so the compile succeeded and its program read the edge row of x."""
    r = _compile(client, gather(index, as_constant_node))
    assert r.status_code == 422, r.text
    err = _detail(r)
    assert err["loc"] == ["body", "model", "pick"], err
    assert f"index {index} is outside [-4, 3]" in err["msg"], err


@pytest.mark.parametrize("index", [3, -4])
def test_a_constant_gather_index_inside_its_data_compiles(client: TestClient, index: int) -> None:
    r = _compile(client, gather(index))
    assert r.status_code == 200, r.text


# -- 4: NUL in the names a compile stores ---------------------------------------------------------------------------


def named(graph: str = "g", node: str = "out") -> bytes:
    from onnx import helper

    m = _qdq_in([helper.make_node("Identity", ["dq"], ["y"], name=node)], [])
    m.graph.name = graph
    return m.SerializeToString()


@pytest.mark.parametrize(("graph", "node", "where"), [("g\x00", "out", "graph name"), ("g", "o\x00ut", "node")])
def test_a_nul_in_a_stored_name_is_refused_naming_it(graph: str, node: str, where: str) -> None:
    with pytest.raises(InputError) as e:
        parse_model(named(graph, node))
    assert e.value.loc[0] == "model" and where in e.value.msg and "NUL" in e.value.msg


def test_compile_and_schedule_refuse_a_nul_in_a_name_on_postgresql(fresh_pg: str, tmp_path: Any) -> None:
    settings = Settings(data_dir=tmp_path, database_url=fresh_pg, solver_processes=1, wait_limit_s=120)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        for model in (named(graph="g\x00"), conv_named("co\x00nv")):
            r = _compile(c, model)
            assert r.status_code == 422, r.text
            assert "NUL" in _detail(r)["msg"]
        r = c.post("/schedule", json={"hardware": "gemmini-16x16",
                                      "model": base64.b64encode(conv_named("co\x00nv")).decode()})
        assert r.status_code == 422, r.text
        assert _detail(r)["loc"][:2] == ["body", "model"], r.text
        assert c.get("/healthz").status_code == 200
        assert _compile(c, named()).status_code == 200  # the database still takes compiles


def conv_named(name: str) -> bytes:
    import onnx

    m = onnx.load_model_from_string(conv([3, 3]))
    for n in m.graph.node:
        if n.name == "conv":
            n.name = name
    return m.SerializeToString()


# -- 5: the SDK and CLI against a server that does not answer as Tileplan's API does --------------------------------

GARBAGE = {  # (status, body, content type): what a proxy, a wrong URL or a broken server answers
    "a JSON list": (200, b"[1, 2, 3]", "application/json"),
    "JSON null": (200, b"null", "application/json"),
    "an empty object": (200, b"{}", "application/json"),
    "fields of other types": (200, b'{"id": 5, "status": ["x"], "plans": "no", "hardware": {"a": 1}, '
                                   b'"compiles": 3, "progress": "x", "key": 1, "metrics": []}', "application/json"),
    "JSON nested past Python's recursion limit": (200, b"[" * 50_000 + b"]" * 50_000, "application/json"),
    "an error whose detail items are not objects": (422, b'{"detail": ["bad", 3, {"loc": 7, "msg": 1}]}',
                                                   "application/json"),
    "an error nested past the recursion limit": (500, b"[" * 50_000 + b"]" * 50_000, "application/json"),
}
CLI_COMMANDS = [["health"], ["hardware"], ["hardware", "gemmini-16x16"], ["plans"], ["plan", "a" * 64],
                ["compiles"], ["job", "j1"], ["timeloop", "a" * 64], ["module", "a" * 64]]


def _garbage_transport(case: str) -> Any:
    import httpx

    status, body, ctype = GARBAGE[case]
    return httpx.MockTransport(lambda req: httpx.Response(status, content=body, headers={"content-type": ctype}))


@pytest.mark.parametrize("case", list(GARBAGE))
def test_the_sdk_raises_its_own_errors_for_answers_that_are_not_the_apis(case: str) -> None:
    """Each call raises a TileplanError (a ServiceError for a 2xx that is not the API's answer), never a KeyError,
    TypeError, AttributeError or RecursionError from reading it."""
    from tileplan_client import TileplanClient, TileplanError

    calls = {
        "health": lambda c: c.health(), "hardware": lambda c: c.hardware(),
        "descriptor": lambda c: c.descriptor("gemmini-16x16"), "plans": lambda c: c.plans(),
        "plan": lambda c: c.plan("a" * 64), "compiles": lambda c: c.compiles(), "job": lambda c: c.job("j1"),
        "get_compile": lambda c: c.get_compile("c1"), "evaluate": lambda c: c.evaluate("g", {}, {}),
        "schedule": lambda c: c.schedule("gemmini-16x16", [{"op": "matmul", "M": 1, "K": 2, "N": 3}], timeout=1),
        "module": lambda c: c.module("a" * 64),
    }
    with TileplanClient("http://svc", transport=_garbage_transport(case), retries=0, poll_interval=0.01) as c:
        for name, call in calls.items():
            try:
                call(c)
            except TileplanError:
                continue
            except Exception as exc:  # noqa: BLE001 - the defect: an exception that is not the SDK's
                pytest.fail(f"{name} with {case}: {type(exc).__name__}: {str(exc)[:200]}")


@pytest.mark.parametrize("case", list(GARBAGE))
def test_the_cli_says_one_line_and_exits_non_zero_on_answers_that_are_not_the_apis(
        case: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import functools

    import tileplan_client.cli as cli

    monkeypatch.setattr(cli, "TileplanClient", functools.partial(cli.TileplanClient,
                                                                 transport=_garbage_transport(case)))
    for cmd in CLI_COMMANDS:
        rc = cli.main(["--retries", "0", *cmd, "--json"] if cmd[0] not in ("timeloop", "module") else
                      ["--retries", "0", *cmd])
        err = capsys.readouterr().err
        if rc == 0:  # a command that prints what it got (JSON as it came, or text) may succeed
            continue
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and err.startswith("error: "), \
            (cmd, case, err[-500:])


# -- 6: error answers many times the size of their request ----------------------------------------------------------


@pytest.mark.parametrize("case", ["evaluate loops", "schedule layers"])
def test_an_error_answer_lists_a_bounded_number_of_errors(client: TestClient, case: str) -> None:
    """A 500 KB /evaluate body of 50,000 loops over a dimension that does not exist was answered with 50,000 errors,
    7.2 MB (the 2 MB body limit allows ~30 MB): an answer many times its request, for any client to ask for again
    and again (a /schedule of 512 layers that are not objects: 512 errors, 47 KB for a 2 KB body). Now at most
    MAX_DETAILS items, the last saying how many more there were."""
    from tileplan.api.errors import MAX_DETAILS

    n = 20_000
    if case == "evaluate loops":
        r = client.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": {"op": "matmul", "M": 4, "K": 8,
                                                                                 "N": 8},
                                           "mapping": {"levels": [{"name": "DRAM", "temporal": [["M", 1]] * n,
                                                                   "spatial": []}]}})
    else:
        r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [5] * 512})
    assert r.status_code == 422, r.text[:300]
    items = r.json()["detail"]
    assert len(items) <= MAX_DETAILS + 1 and len(r.content) < 10_000, (len(items), len(r.content))
    assert "more" in items[-1]["msg"], items[-1]


def test_the_sdk_reads_a_bounded_answer_and_says_so_in_bounded_words() -> None:
    """A server answering with more than the client's `max_answer_bytes` (an endless body, or gzip of one: httpx
    inflates it) is a ServiceError once that much has arrived, not a client that reads it all into memory; an error
    whose detail lists 20,000 items or a 3 MB message is told in a bounded message."""
    import gzip

    import httpx

    from tileplan_client import AsyncTileplanClient, BadInput, ServiceError, TileplanClient

    served = {"bytes": 0}

    def endless() -> Any:
        while True:
            served["bytes"] += 1 << 16
            yield b" " * (1 << 16)

    bomb = gzip.compress(b" " * (64 << 20))  # 64 MiB of spaces in 64 KB
    answers = {
        "/healthz": lambda: httpx.Response(200, content=endless(), headers={"content-type": "application/json"}),
        "/hardware": lambda: httpx.Response(200, content=bomb, headers={"content-encoding": "gzip",
                                                                        "content-type": "application/json"}),
        "/plans": lambda: httpx.Response(422, json={"detail": [{"loc": ["body", i], "msg": "x" * 100, "type": "t"}
                                                               for i in range(20_000)]}),
        "/compiles": lambda: httpx.Response(422, json={"detail": [{"loc": [], "msg": "y" * (3 << 20), "type": "t"}]}),
    }
    transport = httpx.MockTransport(lambda req: answers[req.url.path]())
    with TileplanClient("http://svc", transport=transport, retries=0, max_answer_bytes=4 << 20) as c:
        for call in (c.health, c.hardware):
            with pytest.raises(ServiceError, match="over this client's bound"):
                call()
        assert served["bytes"] <= 8 << 20
        for call in (c.plans, c.compiles):
            with pytest.raises(BadInput) as e:
                call()
            assert len(str(e.value)) < 10_000

    import asyncio

    async def go() -> None:
        async_transport = httpx.MockTransport(lambda req: answers[req.url.path]())
        async with AsyncTileplanClient("http://svc", transport=async_transport, retries=0,
                                       max_answer_bytes=4 << 20) as c:
            with pytest.raises(ServiceError, match="over this client's bound"):
                await c.hardware()

    asyncio.run(go())


# -- 7: a Timeloop descriptor's numbers past float's range ----------------------------------------------------------


@pytest.mark.parametrize("value", ["1e308", "1e300", str(10**400)])
def test_a_timeloop_number_past_floats_range_is_a_422_naming_it(client: TestClient, value: str) -> None:
    """`entries: 1e308` is a whole number; its capacity in bytes (entries x word-bits / 8, a float division)
    overflowed: OverflowError, a 500."""
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "examples/timeloop/gemmini_arch_legacy.yaml").read_text()
    source = source.replace("entries: 16384", f"entries: {value}")
    assert value in source
    r = client.post("/schedule", json={"hardware": {"name": "tl-big", "format": "timeloop", "source": source},
                                       "layers": [{"op": "matmul", "M": 4, "K": 16, "N": 16}]})
    assert r.status_code == 422, r.text
    assert _detail(r)["loc"] == ["body", "hardware", "arch", "storage", 1, "entries"], r.text
