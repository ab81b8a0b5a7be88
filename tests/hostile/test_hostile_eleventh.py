"""Hostile probes, eleventh round (branch hostile11): each was a 5xx, a silent acceptance or a wasted budget, and is
now a 4xx naming the field (or, on the client's side, an error before anything is written).

1. A descriptor's memory levels and dataflows were bounded only by the request's size (256 KiB of descriptor: 3,800
   levels or 13,000 dataflows). Each /schedule naming one spent the layer's whole solve budget (about 10 s of a
   solver process for time_limit_s 2) and then failed it. Now more than 16 of either is a 422 at the field, before
   any item is read.
2. A dataflow's `keeps` or `spatial_dims` and a loop constraint's `permutation` that name one thing many times (a
   40,000-item permutation of two dimensions) were accepted silently. Now a 422 at the field.
3. A registered descriptor the server no longer accepts (registered under looser bounds: an upgrade's new bound, or
   a row written by an older version): POST /schedule, /evaluate and /compile naming it were 500s (pydantic's
   ValidationError out of the store's read). Now a 422 at body.hardware saying to replace or delete it; the row stays
   readable and deletable. A plan's own stored descriptor keeps being read (its Timeloop export, its module).
4. The SDK's `save_artifact` (what `tileplan-client compile` writes) wrote any 200 answer's body as the program's
   tar: a broken or hostile server's HTML page, or a tar whose members climb out (`../`) or are links, or that is
   not a Tileplan program; `Module.save` (`tileplan-client module --format tar`) likewise. Now a ServiceError before
   anything is written.
5. `tileplan run`'s reader of an artifact read every member whole into memory, whatever its declared size: a
   compressed tar of one 2^40-byte member (a few KB of xz) would be inflated. Now a member is read only within a
   bound on the artifact's unpacked size.
6. Every read of a compile parsed its whole summary in the API process (and GET encoded it again): a 1.4 MB model of
   40,000 Identity nodes has a 12 MB summary, 1.3 s of the API's event loop per GET, 3.9 s per view of its page. Now
   the database cuts the per-op list out of what the API parses, GET sends the stored text, the page lists 1,000 ops.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.settings import Settings

REPO = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((REPO / "hw_catalog" / "gemmini-16x16.yaml").read_text())
LAYER = {"op": "matmul", "M": 16, "K": 16, "N": 16}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile11"), solver_processes=1, wait_limit_s=120)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _detail(r: Any) -> dict[str, Any]:
    body = r.json()
    return dict((body.get("detail") or [body.get("error")])[0])


def descriptor(name: str, levels: int = 0, dataflows: int = 0) -> dict[str, Any]:
    """gemmini-16x16 under `name`, with `levels` extra memory levels below DRAM and, with `dataflows`, that many
    dataflows of no overrides in place of its own."""
    hw = copy.deepcopy(BASE)
    hw["name"] = name
    hw.pop("cost_params", None)
    if levels:
        extra = [{"name": f"S{i}", "capacity": f"{512 + i}KiB", "keeps": ["I", "W", "O"]} for i in range(levels)]
        hw["memory_levels"] = hw["memory_levels"][:-1] + extra + hw["memory_levels"][-1:]
    if dataflows:
        hw["pe_array"]["dataflows"] = [{"name": f"d{i}"} for i in range(dataflows)]
    return hw


# -- 1: level and dataflow counts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("levels, dataflows, loc", [
    (13, 0, ["memory_levels"]),  # 4 + 13 = 17 levels
    (3_000, 0, ["memory_levels"]),
    (0, 17, ["pe_array", "dataflows"]),
    (0, 12_000, ["pe_array", "dataflows"]),
])
def test_a_descriptor_of_too_many_levels_or_dataflows_is_a_422_at_the_field(
        client: TestClient, levels: int, dataflows: int, loc: list[str]) -> None:
    hw = descriptor(f"many-{levels}-{dataflows}", levels, dataflows)
    r = client.post("/hardware", json=hw)
    assert r.status_code == 422, r.text[:300]
    d = _detail(r)
    assert d["loc"] == ["body", "hardware", *loc]
    assert "at most 16" in d["msg"]
    assert client.get(f"/hardware/{hw['name']}").status_code == 404  # nothing registered
    # inline in a request: refused before anything is solved (was: the solve budget spent, then a 422)
    r = client.post("/schedule", json={"hardware": hw, "layers": [LAYER], "options": {"time_limit_s": 2}})
    assert r.status_code == 422, r.text[:300]
    assert _detail(r)["loc"] == ["body", "hardware", *loc]
    assert "at most 16" in _detail(r)["msg"]


def test_sixteen_levels_and_dataflows_are_still_a_descriptor(client: TestClient) -> None:
    r = client.post("/hardware", json=descriptor("sixteen-levels", levels=12))
    assert r.status_code == 201, r.text[:300]
    r = client.post("/hardware", json=descriptor("sixteen-dataflows", dataflows=16))
    assert r.status_code == 201, r.text[:300]


# -- 2: lists that repeat ------------------------------------------------------------------------------------------

def _with(path: str, value: Any) -> dict[str, Any]:
    hw = descriptor("repeats")
    if path == "dataflow keeps":
        hw["pe_array"]["dataflows"][0]["levels"]["Registers"]["keeps"] = value
    elif path == "dataflow spatial_dims":
        hw["pe_array"]["dataflows"][0]["levels"]["Scratchpad"]["spatial_dims"] = value
    elif path == "level spatial_dims":
        hw["memory_levels"][2]["spatial_dims"] = value
    else:
        hw["constraints"] = {"loops": {"Scratchpad": {"temporal": {"permutation": value}}}}
    return hw


@pytest.mark.parametrize("path, value, loc", [
    ("dataflow keeps", ["W"] * 5_000, ["pe_array", "dataflows", 0, "levels", "Registers", "keeps"]),
    ("dataflow spatial_dims", ["K", "K"], ["pe_array", "dataflows", 0, "levels", "Scratchpad", "spatial_dims"]),
    ("level spatial_dims", ["K"] * 3_000, ["memory_levels", 2, "spatial_dims"]),
    ("permutation", ["K", "C"] * 20_000, ["constraints", "loops", "Scratchpad", "temporal", "permutation"]),
])
def test_a_list_of_dimensions_or_tensors_naming_one_twice_is_a_422(
        client: TestClient, path: str, value: list[str], loc: list[Any]) -> None:
    r = client.post("/schedule", json={"hardware": _with(path, value), "layers": [LAYER],
                                       "options": {"time_limit_s": 2}})
    assert r.status_code == 422, r.text[:300]  # was: a 200, the repeats taken silently
    d = _detail(r)
    assert d["loc"] == ["body", "hardware", *loc]
    assert "more than once" in d["msg"]


# -- 3: a registered descriptor the server no longer accepts ----------------------------------------------------------

def test_a_registered_descriptor_over_todays_bounds_is_a_422_not_a_500(client: TestClient) -> None:
    store = client.app.state.store  # type: ignore[attr-defined]
    name = "registered-before-the-bound"
    store.put_hardware(name, descriptor(name, dataflows=40), owner="addr:testclient")  # as an older server kept it
    requests = [
        ("/schedule", {"hardware": name, "layers": [LAYER], "options": {"time_limit_s": 2}}),
        ("/evaluate", {"hardware": name, "layer": LAYER, "mapping": {"levels": []}}),
        # (the hardware is resolved before the model is read: any bytes do)
        ("/compile", {"hardware": name, "model": base64.b64encode(b"not read").decode()}),
    ]
    for path, body in requests:
        r = client.post(path, json=body)
        assert r.status_code == 422, (path, r.status_code, r.text[:300])  # was: 500 internal_error
        d = _detail(r)
        assert d["loc"] == ["body", "hardware"], path
        assert d["type"] == "hardware_invalid"
        assert "40 dataflows; at most 16" in d["msg"] and f"PUT /hardware/{name}" in d["msg"]
    # nothing stored is lost: it is listed, readable, and its owner can replace or delete it
    assert name in {h["name"] for h in client.get("/hardware").json()["hardware"]}
    assert len(client.get(f"/hardware/{name}").json()["pe_array"]["dataflows"]) == 40
    assert client.put(f"/hardware/{name}", json=descriptor(name, dataflows=3)).status_code == 200
    r = client.post("/schedule", json={"hardware": name, "layers": [LAYER], "options": {"time_limit_s": 2}})
    assert r.status_code == 200, r.text[:300]
    assert client.delete(f"/hardware/{name}").status_code == 204


def test_a_plan_keeps_reading_the_descriptor_it_was_solved_for(client: TestClient) -> None:
    """A plan solved before the bound, on 20 dataflows: its Timeloop export and module still come from its own
    stored descriptor (the store's copy; written here as the older server wrote it)."""
    from sqlalchemy import update

    from tileplan.store.models import PlanRow

    hw = descriptor("plan-before-the-bound", dataflows=2)
    hw["pe_array"]["dataflows"] = copy.deepcopy(BASE["pe_array"]["dataflows"])
    r = client.post("/schedule", json={"hardware": hw, "layers": [LAYER], "options": {"time_limit_s": 2}})
    assert r.status_code == 200, r.text[:300]
    key = r.json()["plans"][0]["key"]
    store = client.app.state.store  # type: ignore[attr-defined]
    old = store.plan_descriptor(key)
    old["pe_array"]["dataflows"] += [{"name": f"extra{i}"} for i in range(18)]
    with store.engine.begin() as conn:
        conn.execute(update(PlanRow).where(PlanRow.key == key).values(descriptor=json.dumps(old)))
    r = client.get(f"/plans/{key}/timeloop")
    assert r.status_code == 200, r.text[:300]  # was a 500 once the bound was added without the store's context
    r = client.get(f"/plans/{key}/module", params={"format": "c"})
    assert r.status_code in (200, 202), r.text[:300]
    assert client.get(f"/ui/plans/{key}").status_code == 200


# -- 4: what the SDK writes as the program ---------------------------------------------------------------------------

def _tar(members: list[tuple[str, bytes | None, str | None]], mode: str = "w") -> bytes:
    """(name, data, link target) -> tar bytes; data None and a target: a symbolic link."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:  # type: ignore[call-overload]
        for name, data, target in members:
            info = tarfile.TarInfo(name)
            if target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
            else:
                assert data is not None
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


GOOD = [("m/tileplan.json", b"{}", None), ("m/Makefile", b"all:\n", None), ("m/main.c", b"int main(){}\n", None)]


def _sdk_against(body: bytes, content_type: str = "application/x-tar") -> Any:
    from tileplan_client import TileplanClient

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": content_type})

    return TileplanClient("http://server.invalid", transport=httpx.MockTransport(answer))


@pytest.mark.parametrize("label, body, content_type", [
    ("an HTML page", b"<html><body>Login</body></html>", "text/html"),
    ("JSON", b'{"ok": true}', "application/json"),
    ("a tar that is not a program", _tar([("m/readme.txt", b"hi", None)]), "application/x-tar"),
    ("a ../ member", _tar([*GOOD, ("m/../../evil.sh", b"echo pwned", None)]), "application/x-tar"),
    ("an absolute member", _tar([*GOOD, ("/tmp/evil.sh", b"echo pwned", None)]), "application/x-tar"),
    ("a link out", _tar([*GOOD, ("m/link", None, "/etc/passwd")]), "application/x-tar"),
    ("two top directories", _tar([*GOOD, ("other/x.c", b"", None)]), "application/x-tar"),
], ids=lambda v: v if isinstance(v, str) and " " in v else "")
def test_the_sdk_writes_no_artifact_that_is_not_a_program_tar(
        tmp_path: Path, label: str, body: bytes, content_type: str) -> None:
    from tileplan_client import ServiceError

    client = _sdk_against(body, content_type)
    out = tmp_path / "model.tar"
    with pytest.raises(ServiceError) as info:
        client.save_artifact("0" * 32, out)
    assert "artifact" in str(info.value), label
    assert not out.exists(), label  # was: the body written as the program
    assert list(tmp_path.iterdir()) == [], label


def test_the_sdk_writes_a_program_tar(tmp_path: Path) -> None:
    body = _tar(GOOD)
    out = tmp_path / "model.tar"
    assert _sdk_against(body).save_artifact("0" * 32, out) == str(out)
    assert out.read_bytes() == body


def test_the_cli_says_in_one_line_that_the_server_sent_no_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`tileplan-client compile` against a server whose artifact answer is an HTML page: exit 1, one line, no
    <model>.tar left in --out."""
    from tileplan_client import cli

    done = {"id": "0" * 32, "status": "done", "summary": {"ops": [], "total": {}}, "notes": [],
            "links": {"self": "/compiles/" + "0" * 32, "artifact": "/compiles/" + "0" * 32 + "/artifact"}}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/artifact"):
            return httpx.Response(200, content=b"<html>not a tar</html>", headers={"content-type": "text/html"})
        return httpx.Response(200, json=done)

    real = httpx.Client

    def mocked(*args: Any, **kwargs: Any) -> httpx.Client:
        kwargs["transport"] = httpx.MockTransport(answer)
        return real(*args, **kwargs)

    monkeypatch.setattr(httpx, "Client", mocked)
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07")
    out = tmp_path / "build"
    code = cli.main(["--url", "http://server.invalid", "compile", str(model), "--hw", "gemmini-16x16",
                     "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1, err  # SERVICE_ERROR
    assert "artifact" in err and len(err.strip().splitlines()) == 1, err
    assert not (out / "m.tar").exists()


# -- 5: reading an artifact within a bound ---------------------------------------------------------------------------

def test_reading_an_artifact_refuses_a_member_past_the_bound_before_reading_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tileplan.errors import InputError
    from tileplan.frontend import runner

    monkeypatch.setattr(runner, "MAX_ARTIFACT_BYTES", 1 << 20)
    big = _tar([*GOOD, ("m/weights.bin", b"\0" * (2 << 20), None)], mode="w:xz")
    assert len(big) < 64 << 10  # a few KB that unpack to 2 MiB (2^40 bytes would be as small)
    with pytest.raises(InputError) as info:
        runner.read_artifact(big)
    assert "unpacked" in info.value.msg
    assert set(runner.read_artifact(_tar(GOOD))) == {"tileplan.json", "Makefile", "main.c"}


# -- 6: a compile of tens of thousands of ops -------------------------------------------------------------------------

def store_many_ops(store: Any, n_ops: int) -> str:
    """A done compile whose summary lists `n_ops` ops (as a 1.4 MB model of 40,000 Identity nodes makes one: its
    summary was 12 MB), written through the store as the compile's process writes it; its id."""
    import time as _time
    import uuid

    cid = uuid.uuid4().hex
    assert store.create_compile(cid, model=b"model", model_name="many-ops", hardware="gemmini-16x16",
                                request={"hardware": "gemmini-16x16"}, deadline=_time.time() + 600)
    ops = [{"name": f"i{i}", "op": "identity", "onnx_op": "Identity", "where": "host", "reason": "copies",
            "plan_key": None, "macs": 0, "cycles_emulated": None, "cycles_model": None, "speedup": None}
           for i in range(n_ops)]
    total = {"ops": n_ops, "accelerator_ops": 0, "host_ops": n_ops, "kernels": 0, "plans": 0,
             "qdq_nodes": {"accelerator": 0, "host": 2}, "steps": 1, "macs": 0, "accelerator_macs": 0,
             "accelerator_mac_share": 0.0, "cycles_emulated": 0, "dram_bytes_emulated": 0, "cycles_model": 0,
             "baseline_cycles_model": None, "speedup_model": None, "arena_bytes": 64, "weights_bytes": 0,
             "fusion": {"mode": "auto", "groups": 0, "fused_groups": 0, "intermediate_bytes": 0,
                        "intermediate_bytes_fused": 0},
             "compile_seconds": 50.0, "phase_seconds": {"load": 36.0}, "phase_cpu_seconds": {"load": 5.8}}
    summary = {"model": "many-ops", "hardware": "gemmini-16x16",
               "inputs": [{"name": "x", "shape": [1, 16], "dtype": "float32"}],
               "outputs": [{"name": "y", "shape": [1, 16], "dtype": "float32"}], "options": {"mapper": "cosa"},
               "ops": ops, "total": total, "notes": ["a note"], "groups": []}
    assert store.finish_compile(cid, summary, _tar(GOOD))
    return cid


def _stored_compile(client: TestClient, n_ops: int) -> str:
    return store_many_ops(client.app.state.store, n_ops)  # type: ignore[attr-defined]


def test_reading_a_compile_does_not_parse_its_per_op_list(client: TestClient) -> None:
    """Every read of a compile (GET, its page, each row of a listing, a POST answered from the store) parsed the whole
    summary in the API process, and GET encoded it again: 1.2 s of the interpreter's lock per answer for a 12 MB
    summary (/healthz stalled 1.3 s; the page 3.9 s). The store now hands out the summary's head; GET sends the stored
    text as it is; the page lists the first ops only."""
    store = client.app.state.store  # type: ignore[attr-defined]
    cid = _stored_compile(client, 5_000)
    head = store.get_compile(cid).summary
    assert "ops" not in head  # was: the 5,000 ops parsed on every read
    assert head["total"]["ops"] == 5_000 and head["notes"] == ["a note"]
    assert all("ops" not in c.summary for c in store.list_compiles(limit=5) if c.summary)
    ops, n = store.compile_ops(cid, 3)
    assert n == 5_000 and [o["name"] for o in ops] == ["i0", "i1", "i2"]

    r = client.get(f"/compiles/{cid}")
    assert r.status_code == 200
    doc = r.json()
    assert [o["name"] for o in doc["summary"]["ops"]] == [f"i{i}" for i in range(5_000)]  # all of them, in order
    assert doc["summary"]["total"]["ops"] == 5_000 and doc["notes"] == ["a note"]
    assert doc["artifact"]["bytes"] == len(_tar(GOOD))
    r = client.get("/compiles", params={"limit": 5})
    assert r.status_code == 200 and any(c["id"] == cid and c["total"]["ops"] == 5_000 for c in r.json()["compiles"])

    page = client.get(f"/ui/compiles/{cid}")
    assert page.status_code == 200
    assert "the first 1,000 of 5,000 ops" in page.text  # was: all 5,000 rows
    assert ">i999<" in page.text and ">i1000<" not in page.text


def _store_cuts_the_per_op_list(url: str) -> None:
    """The summary's head, its ops and its text as the database at `url` gives them (SQLite's json_remove /
    json_each, PostgreSQL's jsonb operators), names with quotes and non-ASCII text included."""
    import time as _time

    from tileplan.store import Store

    store = Store(url)
    try:
        ops = [{"name": f'op "{i}" é', "where": "host"} for i in range(12)]
        summary = {"model": "m", "ops": ops, "total": {"ops": 12}, "notes": ["n"]}
        assert store.create_compile("c1", model=b"m", model_name="m", hardware="h", request={},
                                    deadline=_time.time() + 60)
        assert store.finish_compile("c1", summary, b"tar")
        assert store.create_compile("c2", model=b"m", model_name="m", hardware="h", request={},
                                    deadline=_time.time() + 60)  # not done: no summary
        got = store.get_compile("c1")
        assert got is not None and got.summary == {"model": "m", "total": {"ops": 12}, "notes": ["n"]}
        assert store.compile_ops("c1", 5) == (ops[:5], 12)
        assert store.compile_ops("c1", 50) == (ops, 12)
        assert store.compile_ops("c2", 5) == ([], 0) and store.compile_ops("nope", 5) == ([], 0)
        assert json.loads(store.compile_summary_text("c1") or "") == summary
        assert {c.id: c.summary for c in store.list_compiles()} == {"c1": got.summary, "c2": None}
    finally:
        store.engine.dispose()


def test_the_store_cuts_the_per_op_list_on_sqlite(tmp_path: Path) -> None:
    _store_cuts_the_per_op_list(f"sqlite:///{tmp_path / 'tileplan.db'}")


def test_the_store_cuts_the_per_op_list_on_postgresql(fresh_pg: str) -> None:
    _store_cuts_the_per_op_list(fresh_pg)


def test_a_module_tar_that_climbs_out_is_not_written(tmp_path: Path) -> None:
    """`tileplan-client module KEY --format tar --out F` (Module.save) wrote any bytes the server sent as the tar."""
    from tileplan_client import ServiceError
    from tileplan_client.models import Module

    for label, data in [("a ../ member", _tar([("k/k.c", b"", None), ("k/../../evil.sh", b"x", None)])),
                        ("a link out", _tar([("k/k.c", b"", None), ("k/l", None, "/etc/passwd")])),
                        ("an HTML page", b"<html></html>")]:
        out = tmp_path / "k.tar"
        with pytest.raises(ServiceError):
            Module(key="0" * 64, format="tar", data=data).save(str(out))
        assert list(tmp_path.iterdir()) == [], label
    good = _tar([("tileplan_kernel/tileplan_kernel.c", b"int x;\n", None)])
    assert Module(key="0" * 64, format="tar", data=good).save(str(tmp_path / "k.tar")) == str(tmp_path / "k.tar")
    assert (tmp_path / "k.tar").read_bytes() == good
    assert Module(key="0" * 64, format="c", data=b"int x;\n").save(str(tmp_path / "k.c")) == str(tmp_path / "k.c")
