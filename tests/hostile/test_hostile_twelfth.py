"""Hostile probes, twelfth round (branch hostile12): each let one client take what others needed, or was a 5xx, and
is now bounded or a 4xx naming the field.

1. GET /plans/{key}/module?name=X builds the plan's module again under the asker's name (not stored) in the module
   process, which is also where compiles run. Distinct names are distinct builds (~2 s each), a read (no write token
   needed), and they were queued first come first served: 20 concurrent GETs from one address held another
   client's 4 s compile of a small MLP for over 25 s (100 would hold it minutes). Module builds now take turns in
   the compile lane's fair share, round robin by owner with compiles: another owner's build or compile waits for at
   most two of the flood's builds (the one running, the one its turn was owed), however many there are.
2. A model holding a string tensor (an initializer, a Constant's value, even one no node reads) passed every check
   and was stored as a compile, which then ran in the compile lane to fail in TVM's importer ("unknown dtype
   `object`": a 4-string, 16 MB initializer held the lane 7 s and left a failed compile stored). A compiled program
   has no string type: now a 422 at the model naming the tensor, before anything is stored.
3. The sandbox process (reading inline descriptors, POST /evaluate, POST /schedule's `model`) served its callers
   first come first served. A Timeloop descriptor of 3,000 storage levels (200 KB) takes the sandbox's whole 10 s
   budget to be refused, and /evaluate is a read: six such anonymous requests at once held another client's 1.8 s
   /evaluate for 94 s. Sandbox calls now take turns round robin by owner: another owner's call waits for at most
   the one running and the one its turn was owed.
4. `tileplan-client` printed what the service sent as it came: a layer name another client stored
   ("\x1b]0;title\x07\x1b[2J": retitles the terminal and clears it; OSC 52 writes some terminals' clipboard) in
   the `plans` table, and a hostile server's error messages. Now every control character the CLI prints (but tab and
   newline), and the bidirectional overrides, are shown escaped (`\x1b`).
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.settings import Settings

TOKENS = ["alice-token", "bob-token"]
ALICE, BOB = ({"authorization": f"Bearer {t}-token"} for t in ("alice", "bob"))
LAYER = {"name": "mm", "op": "matmul", "M": 16, "K": 16, "N": 16}


def _detail(r: Any) -> dict[str, Any]:
    body = r.json()
    return dict((body.get("detail") or [body.get("error")])[0])


# -- 1: renamed module builds take fair turns ---------------------------------------------------------------------

BUILD_S = 0.4


@pytest.fixture()
def slow_builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, float]]]:
    """Module builds that take BUILD_S each, one at a time (the module lane's one process), recorded by layer name;
    no TVM process is started."""
    import asyncio

    from tileplan.jobs.solve import SolverPool

    started: list[tuple[str, float]] = []
    lane: dict[str, asyncio.Lock] = {}

    async def build(self: Any, hardware: dict[str, Any], layer: dict[str, Any], mapping: dict[str, Any], *,
                    timeout: float) -> dict[str, Any]:
        lock = lane.setdefault("lock", asyncio.Lock())
        async with lock:
            started.append((str(layer.get("name")), time.monotonic()))
            await asyncio.sleep(BUILD_S)
        name = str(layer.get("name"))
        return {"ok": True, "name": name, "tar": b"", "c_source": f"// {name}\n", "tvmscript": "", "notes": [],
                "model_cycles": 1.0, "seconds": BUILD_S}

    monkeypatch.setattr(SolverPool, "build", build)
    yield started


def test_one_clients_renamed_module_builds_do_not_hold_another_clients(
        tmp_path: Path, slow_builds: list[tuple[str, float]]) -> None:
    settings = Settings(data_dir=tmp_path, solver_processes=1, tokens=TOKENS)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [LAYER],
                                      "options": {"time_limit_s": 1}}, headers=ALICE)
        assert r.status_code == 200, r.text[:300]
        key = r.json()["plans"][0]["key"]
        answers: dict[str, int] = {}

        def get(name: str, headers: dict[str, str]) -> None:
            answers[name] = c.get(f"/plans/{key}/module", params={"name": name, "format": "c"},
                                  headers=headers).status_code

        flood = [threading.Thread(target=get, args=(f"flood{i}", ALICE)) for i in range(8)]
        for t in flood:
            t.start()
        end = time.monotonic() + 30
        while not slow_builds and time.monotonic() < end:  # the flood's first build is running
            time.sleep(0.01)
        time.sleep(0.1)  # (and the rest of it queued)
        get("bob", BOB)
        for t in flood:
            t.join(60)
        assert set(answers.values()) == {200}, answers
        order = [name for name, _ in slow_builds]
        # the plan's own module ("mm", shared by everyone asking), then bob's build waited for the flood's running
        # build and at most one more (the turn the rotation owed alice as his arrived), not for the whole flood (was:
        # all 8 of alice's builds first)
        assert order[0] == "mm" and order.index("bob") <= 3, order


def test_module_builds_and_compiles_share_one_fair_share(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, solver_processes=1)
    with TestClient(create_app(settings)) as c:
        app: Any = c.app
        assert app.state.modules.fair is app.state.compiler.fair


# -- 2: string tensors ----------------------------------------------------------------------------------------------

def _with_strings(where: str) -> bytes:
    """A QDQ matmul with a string tensor (no node reads it) as an initializer, or a Constant node's value."""
    import numpy as np
    from hostile_models import qdq_in
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["dq", "w"], ["y"], name="mm")]
    strings = helper.make_tensor("words", TensorProto.STRING, [2], vals=[b"a" * 1000, b"b"])
    inits = [w]
    if where == "initializer":
        inits.append(strings)
    elif where == "constant":
        nodes.append(helper.make_node("Constant", [], ["c"], name="words_const", value=strings))
    else:
        nodes.append(helper.make_node("Constant", [], ["c"], name="words_const", value_strings=["a", "b"]))
    return bytes(qdq_in(nodes, inits).SerializeToString())


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile12"), solver_processes=1, wait_limit_s=120)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("where", ["initializer", "constant", "value_strings"])
def test_a_string_tensor_is_a_422_naming_it_before_anything_is_stored(client: TestClient, where: str) -> None:
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "options": {"time_limit_s": 2}, "wait": True,
                                      "model": base64.b64encode(_with_strings(where)).decode()})
    assert r.status_code == 422, r.text[:300]
    d = _detail(r)
    assert d["loc"][:2] == ["body", "model"], d
    assert "string" in d["msg"] and ("words" in d["msg"] or "words_const" in d["loc"]), d
    assert "id" not in r.json(), "refused before anything was stored"
    assert client.get("/compiles").json()["compiles"] == []


# -- 3: the sandbox's turns ---------------------------------------------------------------------------------------

SANDBOX_S = 0.3
MAPPING = {"levels": [{"name": "Registers"}, {"name": "Accumulator"}, {"name": "Scratchpad"},
                      {"name": "DRAM", "temporal": [["K", 16], ["C", 16], ["P", 16]]}]}


def test_one_clients_costly_sandbox_calls_do_not_hold_another_clients(tmp_path: Path) -> None:
    import asyncio

    import yaml

    settings = Settings(data_dir=tmp_path, solver_processes=1, tokens=TOKENS)
    hw = yaml.safe_load((Path(__file__).resolve().parents[2] / "hw_catalog" / "gemmini-16x16.yaml").read_text())
    hw.pop("cost_params", None)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        app: Any = c.app
        ran: list[str] = []

        class Slow:
            """The sandbox's one process: each call takes SANDBOX_S (a costly descriptor), one at a time."""

            lock: asyncio.Lock | None = None

            async def run(self, fn: Any, *args: Any, timeout: float) -> Any:
                Slow.lock = Slow.lock or asyncio.Lock()
                async with Slow.lock:
                    ran.append(str(args[0].get("name")) if isinstance(args[0], dict) else fn.__name__)
                    await asyncio.sleep(SANDBOX_S)
                    return await asyncio.to_thread(fn, *args)

        sandbox = app.state.scheduler.sandbox
        real, sandbox.slots = sandbox.slots, Slow()
        answers: dict[str, int] = {}

        def evaluate(name: str, headers: dict[str, str]) -> None:
            answers[name] = c.post("/evaluate", json={"hardware": {**hw, "name": name}, "layer": LAYER,
                                                      "mapping": MAPPING}, headers=headers).status_code

        flood = [threading.Thread(target=evaluate, args=(f"flood{i}", ALICE)) for i in range(8)]
        for t in flood:
            t.start()
        end = time.monotonic() + 30
        while len(ran) < 2 and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(2 * SANDBOX_S)  # (every call of the flood waiting by now)
        arrived = len(ran)
        evaluate("bob", BOB)
        for t in flood:
            t.join(60)
        sandbox.slots = real
        assert set(answers.values()) == {200}, answers
        # bob's descriptor was read after the flood's running call and at most one more (was: after the flood's
        # 16 calls, a descriptor read and an evaluation each, all but the few run before he asked)
        assert ran.index("bob") <= arrived + 2, (arrived, ran)


# -- 4: what the CLI prints to a terminal ---------------------------------------------------------------------------

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\u202e\x9b"


def _no_controls(text: str) -> None:
    bad = [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0 or c == "\u202e"]
    assert not bad, repr(text[-400:])


def test_the_cli_prints_another_clients_layer_name_without_its_control_characters(
        client: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import functools
    import json
    import sys

    from sqlalchemy import text

    import tileplan_client.cli as cli

    # (such a name is a 422 since hostile13: this one is stored as a server before it, or a hostile one, keeps it)
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [{**LAYER, "N": 48, "name": "t"}],
                                       "options": {"time_limit_s": 1}})
    assert r.status_code == 200, r.text[:300]
    key = r.json()["plans"][0]["key"]
    app: Any = client.app
    with app.state.store.engine.begin() as db:
        layer = json.loads(db.execute(text("SELECT layer FROM plans WHERE key = :k"), {"k": key}).scalar_one())
        db.execute(text("UPDATE plans SET layer = :l WHERE key = :k"),
                   {"l": json.dumps({**layer, "name": "t" + ESCAPES}), "k": key})
    app.state.kept_answers.forget(key)
    monkeypatch.setattr(cli, "TileplanClient", functools.partial(cli.TileplanClient, transport=client._transport))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # (the table a terminal gets)
    for cmd in (["plans"], ["plan", r.json()["plans"][0]["key"]]):
        assert cli.main(["--url", "http://testserver", *cmd]) == 0
        out = capsys.readouterr().out
        assert "pwned" in out and "\\x1b" in out, out  # (shown, escaped)
        _no_controls(out)


def test_the_cli_prints_a_servers_error_without_its_control_characters(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import functools

    import httpx

    import tileplan_client.cli as cli

    body = {"detail": [{"loc": ["body"], "msg": "bad" + ESCAPES, "type": "value_error"}]}
    transport = httpx.MockTransport(lambda req: httpx.Response(422, json=body))
    monkeypatch.setattr(cli, "TileplanClient", functools.partial(cli.TileplanClient, transport=transport))
    assert cli.main(["--retries", "0", "plans"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "pwned" in err and len(err.strip().splitlines()) == 1, err
    _no_controls(err)
