"""Generated modules over HTTP: POST /schedule with codegen, GET /plans/{key}/module (SQLite and PostgreSQL)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.settings import Settings

MM = {"name": "mm_small", "op": "matmul", "M": 32, "K": 48, "N": 20}
FAST = {"time_limit_s": 0.5, "baseline": False}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data = tmp_path_factory.mktemp("modules")
    with TestClient(create_app(Settings(data_dir=data, solver_processes=1))) as c:
        yield c


def schedule(client: TestClient, layer: dict, hardware: str = "gemmini-16x16", **options: object) -> dict:
    r = client.post("/schedule", json={"hardware": hardware, "layers": [layer], "options": {**FAST, **options}})
    assert r.status_code == 200, r.text
    return r.json()["plans"][0]


def check_module(client: TestClient, plan: dict) -> None:
    url = plan["links"]["module"]
    assert url == f"/plans/{plan['key']}/module"

    c = client.get(url, params={"format": "c"})
    assert c.status_code == 200, c.text
    assert c.headers["content-type"].startswith("text/plain")
    assert '#include "gemmini.h"' in c.text
    assert f"void {plan['layer']['name']}(" in c.text
    assert float(c.headers["x-model-cycles"]) > 0

    tvm = client.get(url, params={"format": "tvmscript"})
    assert tvm.status_code == 200 and tvm.headers["content-type"].startswith("text/plain")
    assert "@T.prim_func" in tvm.text and "tp_init" in tvm.text  # the tensorized tile calls

    tar = client.get(url, params={"format": "tar"})
    assert tar.status_code == 200
    assert tar.headers["content-type"] == "application/x-tar"
    assert 'filename="' in tar.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(tar.content)) as tf:
        members = {Path(m.name).name: tf.extractfile(m).read() for m in tf.getmembers()}
    name = plan["layer"]["name"]
    libs = {f"lib{name}_host.so", "libgemmini_emu.so"}  # the host library and the emulator it links against
    assert set(members) == {f"{name}.c", "gemmini.h", "gemmini_params.h", f"{name}.tvmscript.py", "BUILD.md",
                            "gemmini_emu.h"} | libs
    assert all(members[lib].startswith(b"\x7fELF") for lib in libs)
    members = {k: v.decode() for k, v in members.items() if k not in libs}
    assert members[f"{name}.c"] == c.text  # the tar carries the same stored module
    assert members[f"{name}.tvmscript.py"] == tvm.text
    assert "gemmini_" in members["gemmini.h"] and "#define DIM 16" in members["gemmini_params.h"]


def test_schedule_with_codegen_stores_the_module(client: TestClient) -> None:
    plan = schedule(client, MM, codegen=True)
    assert plan["cached"] is False
    store = client.app.state.store
    stored = store.get_module(plan["key"])  # built with the plan, before any GET
    assert stored is not None and stored.ok and stored.tar and stored.model_cycles and stored.model_cycles > 0
    check_module(client, plan)


def test_module_built_on_demand_for_a_plan_scheduled_without_codegen(client: TestClient) -> None:
    layer = {**MM, "name": "mm_on_demand", "N": 36}
    plan = schedule(client, layer)
    store = client.app.state.store
    assert store.get_module(plan["key"]) is None
    check_module(client, plan)
    assert store.get_module(plan["key"]).ok


def test_codegen_on_a_cached_plan_builds_its_module(client: TestClient) -> None:
    layer = {**MM, "name": "mm_cached", "M": 48}
    first = schedule(client, layer)
    store = client.app.state.store
    assert store.get_module(first["key"]) is None
    again = schedule(client, layer, codegen=True)  # codegen is not part of the key: a cache hit
    assert again["cached"] is True and again["key"] == first["key"]
    assert store.get_module(first["key"]).ok


def test_codegen_error_is_stored_and_reported(client: TestClient) -> None:
    # eyeriss-os is not Gemmini-like: a plan, but no module (POST /schedule with codegen: a 422 with the plan)
    r = client.post("/schedule", json={"hardware": "eyeriss-os", "layers": [{**MM, "name": "mm_eyeriss"}],
                                       "options": {**FAST, "codegen": True}})
    assert r.status_code == 422, r.text
    plan = r.json()["plans"][0]
    assert plan["metrics"]["cycles"] > 0  # the plan stands
    r = client.get(plan["links"]["module"], params={"format": "c"})
    assert r.status_code == 422
    (item,) = r.json()["detail"]
    assert item["type"] == "codegen_error" and "Gemmini-like" in item["msg"]
    stored = client.app.state.store.get_module(plan["key"])  # the reason is kept: no build on the next request
    assert stored is not None and not stored.ok and "no code generator for eyeriss-os" in stored.error


def test_unknown_key_and_bad_format(client: TestClient) -> None:
    r = client.get(f"/plans/{'0' * 64}/module", params={"format": "c"})
    assert r.status_code == 404
    assert r.json()["detail"][0]["loc"] == ["path", "key"] and r.json()["detail"][0]["type"] == "not_found"
    plan = schedule(client, MM)
    r = client.get(plan["links"]["module"], params={"format": "llvm"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "format"]


def test_deleting_a_plan_drops_its_module(client: TestClient) -> None:
    layer = {**MM, "name": "mm_deleted", "K": 64}
    plan = schedule(client, layer, codegen=True)
    store = client.app.state.store
    assert store.get_module(plan["key"]) is not None
    assert client.delete(f"/plans/{plan['key']}").status_code == 204
    assert store.get_module(plan["key"]) is None
    assert client.get(plan["links"]["module"]).status_code == 404


def test_modules_on_postgres(fresh_pg: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url=fresh_pg, solver_processes=1)
    with TestClient(create_app(settings)) as c:
        assert c.app.state.store.dialect == "postgresql"
        plan = schedule(c, MM, codegen=True)
        assert c.app.state.store.get_module(plan["key"]).ok
        check_module(c, plan)
        other = schedule(c, {**MM, "name": "mm_pg_on_demand", "N": 36})
        assert c.app.state.store.get_module(other["key"]) is None
        check_module(c, other)
        third = schedule(c, {**MM, "name": "mm_pg_queue", "K": 64})
    # an API whose solves run in `tileplan worker`s has no solver pool: it builds modules in one of its own
    with TestClient(create_app(settings.model_copy(update={"queue": "procrastinate"}))) as c:
        assert c.app.state.queue.kind == "procrastinate"
        assert c.app.state.store.get_module(third["key"]) is None
        check_module(c, third)
        assert c.app.state.modules._own_pool is not None
