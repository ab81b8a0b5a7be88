"""Hostile probes, thirteenth round (branch hostile13): each was stored as sent, redone at full cost, or taken
silently, and is now a 4xx naming the field (or answered from what the server remembers).

1. Names with control characters: a layer's `name` in POST /schedule, `?name=` on a plan's links, a descriptor's
   level or dataflow names, an ONNX model's graph, node, input and output names. Only NUL was refused; ESC, BEL,
   CR/LF, the C1 controls and the bidirectional overrides were stored and served to every other client (the plans
   listing, a compile's model name, the browser view, the server's logfmt log lines, where a newline in a model's
   name forged a line). Now a name holding one is a 422 naming the field and the character, on every door, before
   anything is stored; a descriptor's `description` keeps tab and newline (it is text) and refuses the rest.
2. Refusals of the sandbox (an inline descriptor read, POST /schedule's `model` read) were not remembered: the same
   200 KB Timeloop tree of 3,000 levels sent again spent the sandbox's whole budget again (a 10 s refusal, each
   time, for a 200 KB request). Now a refusal is remembered by the digest of what was sent (bounded in bytes): the
   same body is refused again without the sandbox; a refusal for the budget (`too_costly`, which the server's load
   may have caused) is remembered for a while only.
3. A model importing the default ONNX domain twice (opset 17 and opset 9: which one do its nodes mean?) or 20,000
   opset imports: taken silently (TVM's importer picks one). Now a 422 at the model's `opset_import`.
4. A request body that stops arriving (a client sending its declared Content-Length a byte at a time, or not at
   all) held its connection and the request's resources for ever. Now a body that does not progress for
   `body_idle_s` is a 408.
5. POST /hardware had no bound per owner: one token could register 256 KiB descriptors until the database was full,
   and GET /hardware reads every one. Now `owner_max_hardware` (100) each; past it a 409.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.settings import Settings

LAYER = {"name": "mm", "op": "matmul", "M": 16, "K": 16, "N": 16}
CONTROLS = ["\x1b[2J", "\nb", "\rb", "\x07", "\tb", "\x7f", "\x9b", "\u202e", "\u2066"]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile13"), solver_processes=1, wait_limit_s=120)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _detail(r: Any) -> dict[str, Any]:
    body = r.json()
    return dict((body.get("detail") or [body.get("error")])[0])


def _plans(c: TestClient) -> int:
    return len(c.get("/plans", params={"limit": 500}).json()["plans"])


# -- 1: control characters in names ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", CONTROLS)
def test_a_layer_name_with_a_control_character_is_a_422_storing_nothing(client: TestClient, bad: str) -> None:
    before = _plans(client)
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [{**LAYER, "name": "x" + bad},
                                                                               {**LAYER, "M": 32}],
                                       "options": {"time_limit_s": 1}})
    assert r.status_code == 422, r.text[:300]
    d = _detail(r)
    assert d["loc"] == ["body", "layers", 0, "name"] and d["type"] == "string_control", d
    assert "control character" in d["msg"] and "position 1" in d["msg"], d
    assert _plans(client) == before


def test_a_plain_name_and_any_printable_text_are_still_names(client: TestClient) -> None:
    r = client.post("/schedule", json={"hardware": "gemmini-16x16",
                                       "layers": [{**LAYER, "name": "Conv_0/blöck.1 (δ) \u00e9 ok"}],
                                       "options": {"time_limit_s": 1}})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["plans"][0]["layer"]["name"] == "Conv_0/blöck.1 (δ) \u00e9 ok"


@pytest.mark.parametrize("path", ["", "/module", "/timeloop"])
def test_a_query_name_with_a_control_character_is_a_422(client: TestClient, path: str) -> None:
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [LAYER], "options": {"time_limit_s": 1}})
    key = r.json()["plans"][0]["key"]
    r = client.get(f"/plans/{key}{path}", params={"name": "mm\r\nevent=forged"})
    assert r.status_code == 422, r.text[:300]
    d = _detail(r)
    assert d["loc"] == ["query", "name"] and d["type"] == "string_control", d


def _gemmini(**changes: Any) -> dict[str, Any]:
    import yaml

    hw = yaml.safe_load((Path(__file__).resolve().parents[2] / "hw_catalog" / "gemmini-16x16.yaml").read_text())
    hw.pop("cost_params", None)
    hw.update(changes)
    return dict(hw)


def test_a_descriptor_level_name_with_a_control_character_is_a_422(client: TestClient) -> None:
    hw = _gemmini(name="ctl-levels")
    old = hw["memory_levels"][0]["name"]
    hw["memory_levels"][0]["name"] = old + "\x1b[31m"
    for df in hw["pe_array"]["dataflows"]:
        if old in (df.get("levels") or {}):
            df["levels"][old + "\x1b[31m"] = df["levels"].pop(old)
    r = client.post("/schedule", json={"hardware": hw, "layers": [LAYER], "options": {"time_limit_s": 1}})
    assert r.status_code == 422, r.text[:300]
    d = _detail(r)
    assert d["loc"][:2] == ["body", "hardware"] and d["loc"][-1] == "name" and d["type"] == "string_control", d


def test_a_description_keeps_newlines_and_refuses_other_controls(client: TestClient) -> None:
    r = client.post("/hardware", json=_gemmini(name="described-ok", description="line one\n\tline two"))
    assert r.status_code in (200, 201), r.text[:300]
    r = client.post("/hardware", json=_gemmini(name="described-bad", description="ok\x1b]52;c;cGF5bG9hZA==\x07"))
    assert r.status_code == 422, r.text[:300]
    d = _detail(r)
    assert d["loc"][-1] == "description" and d["type"] == "string_control", d
    assert client.get("/hardware/described-bad").status_code == 404


def _relu(graph: str = "g", node: str = "r", x: str = "x", y: str = "y") -> bytes:
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", [x], [y], name=node)], graph,
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 16])])
    return bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


@pytest.mark.parametrize("where", ["graph", "node", "x", "y"])
def test_a_model_name_with_a_control_character_is_a_422_before_anything_is_stored(client: TestClient,
                                                                                  where: str) -> None:
    model = _relu(**{where: "n\x1b[2J\nts=forged level=ERROR"})
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(),
                                      "options": {"time_limit_s": 1}, "wait": True})
    assert r.status_code == 422, r.text[:300]
    d = _detail(r)
    assert d["loc"][:2] == ["body", "model"] and d["type"] == "string_control", d
    assert "control character" in d["msg"], d
    assert "id" not in r.json()
    assert client.get("/compiles").json()["compiles"] == []


def test_a_schedule_models_node_name_with_a_control_character_is_a_422(client: TestClient) -> None:
    import numpy as np
    from hostile_models import qdq_in
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    model = qdq_in([helper.make_node("MatMul", ["dq", "w"], ["y"], name="mm\u202egnp.exe")], [w])
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "options": {"time_limit_s": 1},
                                       "model": base64.b64encode(model.SerializeToString()).decode()})
    assert r.status_code == 422, r.text[:300]
    d = _detail(r)
    assert d["loc"][:2] == ["body", "model"] and d["type"] == "string_control", d


# -- 2: remembered sandbox refusals ---------------------------------------------------------------------------------

NO_COMPUTE = ("architecture:\n  version: 0.3\n  subtree:\n    - name: S\n      local:\n"
              "        - {name: B0, class: SRAM, attributes: {entries: 64, word-bits: 8}}\n")


class Counting:
    """Wraps the sandbox's slots: counts the calls run (`slow`: each takes longer than any budget)."""

    def __init__(self, real: Any, slow: bool = False) -> None:
        self.real, self.slow, self.calls = real, slow, 0

    async def run(self, fn: Any, *args: Any, timeout: float) -> Any:
        from tileplan.jobs.slots import SlotTimeout

        self.calls += 1
        if self.slow:
            await asyncio.sleep(0.05)
            raise SlotTimeout("over its budget")
        return await self.real.run(fn, *args, timeout=timeout)


@pytest.fixture()
def counted(client: TestClient) -> Iterator[Counting]:
    sandbox = client.app.state.scheduler.sandbox  # type: ignore[attr-defined]
    real = sandbox.slots
    sandbox.slots = Counting(real)
    sandbox.forget_refusals()
    try:
        yield sandbox.slots
    finally:
        sandbox.slots = real


def test_a_refused_descriptor_is_refused_again_without_the_sandbox(client: TestClient, counted: Counting) -> None:
    body = {"hardware": {"name": "nothing", "format": "timeloop", "source": NO_COMPUTE}, "layers": [LAYER],
            "options": {"time_limit_s": 1}}
    first = client.post("/schedule", json=body)
    assert first.status_code == 422 and counted.calls == 1, first.text[:300]
    for path, doc in (("/schedule", body), ("/evaluate", {"hardware": body["hardware"], "layer": LAYER,
                                                          "mapping": {"levels": [{"name": "B0"}]}})):
        again = client.post(path, json=doc)
        assert again.status_code == 422, again.text[:300]
        assert again.json()["detail"] == first.json()["detail"]
    assert counted.calls == 1  # (was: the sandbox read it three times)


def test_a_refused_schedule_model_is_refused_again_without_the_sandbox(client: TestClient,
                                                                       counted: Counting) -> None:
    body = {"hardware": "gemmini-16x16", "model": base64.b64encode(_relu(graph="no-layers")).decode(),
            "options": {"time_limit_s": 1}}
    first = client.post("/schedule", json=body)
    assert first.status_code == 422 and "no convolution" in first.text, first.text[:300]
    again = client.post("/schedule", json=body)
    assert again.status_code == 422 and again.json()["detail"] == first.json()["detail"]
    assert counted.calls == 1


def test_a_refusal_for_the_budget_is_remembered_for_a_while_only(client: TestClient, counted: Counting,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from tileplan.jobs import sandbox as sandbox_module

    counted.slow = True
    body = {"hardware": {"name": "costly", "format": "timeloop", "source": NO_COMPUTE + "# costly\n"},
            "layers": [LAYER], "options": {"time_limit_s": 1}}
    for _ in range(3):
        r = client.post("/schedule", json=body)
        assert r.status_code == 422 and _detail(r)["type"] == "too_costly", r.text[:300]
    assert counted.calls == 1
    now = time.monotonic()
    monkeypatch.setattr(sandbox_module, "_now", lambda: now + sandbox_module.COSTLY_REFUSAL_S + 1)
    r = client.post("/schedule", json=body)
    assert r.status_code == 422 and counted.calls == 2  # (read again: the server's load may have been the cause)


def test_a_good_descriptor_is_not_refused_after_anothers_refusal(client: TestClient, counted: Counting) -> None:
    bad = {"hardware": {"name": "nothing", "format": "timeloop", "source": NO_COMPUTE}, "layers": [LAYER],
           "options": {"time_limit_s": 1}}
    assert client.post("/schedule", json=bad).status_code == 422
    good = client.post("/schedule", json={"hardware": _gemmini(name="fine"), "layers": [LAYER],
                                          "options": {"time_limit_s": 1}})
    assert good.status_code == 200, good.text[:300]


# -- 3: opset imports -----------------------------------------------------------------------------------------------

def _opsets(opsets: list[tuple[str, int]]) -> bytes:
    import onnx
    from onnx import helper

    m = onnx.load_model_from_string(_relu())
    del m.opset_import[:]
    m.opset_import.extend(helper.make_opsetid(d, v) for d, v in opsets)
    return bytes(m.SerializeToString())


@pytest.mark.parametrize("case", ["twice", "ai.onnx", "many"])
def test_a_models_opset_imports_are_one_per_domain_and_bounded(client: TestClient, case: str) -> None:
    opsets = {"twice": [("", 17), ("", 9)], "ai.onnx": [("", 17), ("ai.onnx", 9)],
              "many": [("", 17)] + [(f"d{i}", 1) for i in range(20_000)]}[case]
    model = base64.b64encode(_opsets(opsets)).decode()
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": model, "options": {"time_limit_s": 1},
                                      "wait": True})
    assert r.status_code == 422, r.text[:300]
    d = _detail(r)
    assert d["loc"] == ["body", "model", "opset_import"], d
    assert client.get("/compiles").json()["compiles"] == []


def test_a_model_with_one_opset_per_domain_still_compiles(client: TestClient) -> None:
    model = base64.b64encode(_opsets([("", 17), ("com.microsoft", 1)])).decode()
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": model, "options": {"time_limit_s": 1},
                                      "wait": True})
    assert r.status_code == 200, r.text[:300]
    client.delete(f"/compiles/{r.json()['id']}")


# -- 4: a body that stops arriving ----------------------------------------------------------------------------------

def test_a_body_that_stops_arriving_is_a_408() -> None:
    from tileplan.api.metrics import Metrics, MetricsAndLimits

    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if not message.get("more_body"):
                break
        seen.append("read")

    async def receive() -> dict[str, Any]:
        if not seen:
            seen.append("first")
            return {"type": "http.request", "body": b"{", "more_body": True}
        await asyncio.sleep(3600)  # (the rest never comes)
        raise AssertionError

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    mw = MetricsAndLimits(app, metrics=Metrics(), max_body=1 << 20, body_idle_s=0.2)
    scope = {"type": "http", "method": "POST", "path": "/schedule", "headers": [(b"content-length", b"100")]}
    asyncio.run(asyncio.wait_for(mw(scope, receive, send), 10))
    assert sent and sent[0]["status"] == 408, sent
    assert b"body_idle_s" in sent[1]["body"]
    assert "read" not in seen


def test_a_body_arriving_slowly_but_steadily_is_read() -> None:
    from tileplan.api.metrics import Metrics, MetricsAndLimits

    got: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            got.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    parts = [b"a", b"b", b"c", b"d"]

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.1)  # each within the idle bound; all together past it
        body = parts.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(parts)}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    mw = MetricsAndLimits(app, metrics=Metrics(), max_body=1 << 20, body_idle_s=0.25)
    scope = {"type": "http", "method": "POST", "path": "/schedule", "headers": [(b"content-length", b"4")]}
    asyncio.run(mw(scope, receive, send))
    assert sent[0]["status"] == 200 and b"".join(got) == b"abcd"


# -- 5: registered descriptors per owner ------------------------------------------------------------------------------

def test_an_owner_registers_a_bounded_number_of_descriptors(tmp_path: Path) -> None:
    """POST /hardware had no bound: one token could register descriptors (256 KiB each) until the database was full,
    and GET /hardware, which lists them all, read every one into the API (1,000 of them: 256 MB per GET). Now an
    owner holds at most `owner_max_hardware`: past it a 409 naming the bound; replacing or deleting one is as
    before, and other owners are not held by it."""
    alice, bob = ({"authorization": f"Bearer {t}-token"} for t in ("alice", "bob"))
    settings = Settings(data_dir=tmp_path, solver_processes=1, tokens=["alice-token", "bob-token"],
                        owner_max_hardware=2)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        for i in range(2):
            assert c.post("/hardware", json=_gemmini(name=f"a{i}"), headers=alice).status_code == 201
        r = c.post("/hardware", json=_gemmini(name="a2"), headers=alice)
        assert r.status_code == 409, r.text[:300]
        d = _detail(r)
        assert d["type"] == "quota_exceeded" and "owner_max_hardware" in d["msg"], d
        assert c.get("/hardware/a2").status_code == 404
        assert c.put("/hardware/a1", json=_gemmini(name="a1", description="v2"), headers=alice).status_code == 200
        assert c.put("/hardware/a2", json=_gemmini(name="a2"), headers=alice).status_code == 409  # (PUT registers too)
        assert c.post("/hardware", json=_gemmini(name="b0"), headers=bob).status_code == 201
        assert c.delete("/hardware/a0", headers=alice).status_code == 204
        assert c.post("/hardware", json=_gemmini(name="a2"), headers=alice).status_code == 201
