"""The HTTP shapes of contracts.md, against the app in-process (SQLite, local solver pool)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from service_procs import FC, LAYER

from tileplan.api.app import create_app
from tileplan.hardware.catalog import catalog
from tileplan.settings import Settings

PLAN_FIELDS = {"key", "layer", "hardware", "mapper", "mapping", "metrics", "baseline", "solver", "cached", "links"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data = tmp_path_factory.mktemp("api")
    app = create_app(Settings(data_dir=data, solver_processes=1, tokens=["s3cret"]))
    with TestClient(app) as c:
        yield c


WRITE = {"authorization": "Bearer s3cret"}  # with tokens configured every write needs one


def schedule(client: TestClient, layers: list[dict], hardware: object = "gemmini-16x16", **body: object):
    return client.post("/schedule", json={"hardware": hardware, "layers": layers, **body}, headers=WRITE)


def test_schedule_returns_plans_in_contract_shape(client: TestClient) -> None:
    r = schedule(client, [LAYER, FC])
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["status"] == "done" and doc["id"]
    assert len(doc["plans"]) == 2
    for plan, asked in zip(doc["plans"], [LAYER, FC]):
        assert PLAN_FIELDS <= set(plan)
        assert len(plan["key"]) == 64
        assert plan["hardware"] == "gemmini-16x16"
        assert plan["mapper"] == "cosa"
        assert plan["layer"]["name"] == asked["name"]
        assert set(plan["layer"]["dims"]) >= {"N", "K", "C", "P", "Q", "R", "S"}
        levels = [lv["name"] for lv in plan["mapping"]["levels"]]
        assert levels == [lv.name for lv in catalog()["gemmini-16x16"].memory_levels]
        for f in ("cycles", "energy_pj", "utilization", "dram_bytes", "ideal_cycles", "bound"):
            assert f in plan["metrics"]
        assert plan["baseline"]["mapper"] and "cycles" in plan["baseline"]["metrics"]
        assert plan["solver"]["status"] and plan["solver"]["seconds"] >= 0
        assert plan["links"]["self"] == f"/plans/{plan['key']}"
        assert plan["links"]["timeloop"] == f"/plans/{plan['key']}/timeloop"
    conv = doc["plans"][0]["layer"]["dims"]
    assert conv["K"] == 64 and conv["C"] == 64 and conv["P"] == 56 and conv["R"] == 3
    fc = doc["plans"][1]["layer"]["dims"]
    assert (fc["P"], fc["C"], fc["K"]) == (1, 2048, 1000)
    s = doc["summary"]
    assert s["layers"] == 2 and s["unique_layers"] == 2
    assert s["cycles"] == pytest.approx(sum(p["metrics"]["cycles"] for p in doc["plans"]))

    again = schedule(client, [LAYER, FC]).json()
    assert [p["cached"] for p in again["plans"]] == [True, True]
    assert [p["key"] for p in again["plans"]] == [p["key"] for p in doc["plans"]]
    assert again["summary"]["cached"] == 2 and again["summary"]["solved"] == 0


def test_equivalent_requests_share_a_key(client: TestClient) -> None:
    base = schedule(client, [LAYER]).json()["plans"][0]["key"]
    rewritten = [
        # same layer: scalar kernel/padding, reordered keys, defaults spelled out, another name
        {"padding": 1, "kernel": 3, "in_w": 56, "in_h": 56, "out_channels": 64, "in_channels": 64, "op": "conv2d",
         "name": "other", "stride": [1, 1], "dilation": 1, "groups": 1, "batch": 1, "dtype": "int8"},
    ]
    assert schedule(client, rewritten).json()["plans"][0]["key"] == base
    # the same descriptor under another name, inline as an object and as YAML text
    desc = catalog()["gemmini-16x16"].model_dump(mode="json")
    renamed = {**desc, "name": "my-gemmini", "description": "a copy"}
    r1 = schedule(client, [LAYER], hardware=renamed).json()["plans"][0]
    assert r1["key"] == base and r1["hardware"] == "my-gemmini" and r1["cached"] is True
    r2 = schedule(client, [LAYER], hardware={"name": "yaml-gemmini", "format": "tileplan",
                                             "source": yaml.safe_dump(renamed, sort_keys=True)}).json()["plans"][0]
    assert r2["key"] == base
    # matmul written as dense with reordered fields
    fc_key = schedule(client, [FC]).json()["plans"][0]["key"]
    assert schedule(client, [{"N": 1000, "K": 2048, "M": 1, "op": "dense"}]).json()["plans"][0]["key"] == fc_key
    # a different option is a different plan
    other = schedule(client, [LAYER], options={"objective": {"latency": 1, "energy": 0, "memory_utilization": 0}})
    assert other.json()["plans"][0]["key"] != base


def test_layer_listed_twice_is_solved_once(client: TestClient) -> None:
    layer = {**LAYER, "in_channels": 32, "out_channels": 48, "name": "a"}
    before = client.app.state.queue.pool.solves  # type: ignore[attr-defined]
    doc = schedule(client, [layer, {**layer, "name": "b"}]).json()
    assert client.app.state.queue.pool.solves - before == 1  # type: ignore[attr-defined]
    assert doc["plans"][0]["key"] == doc["plans"][1]["key"]
    assert [p["layer"]["name"] for p in doc["plans"]] == ["a", "b"]
    assert doc["summary"]["unique_layers"] == 1 and doc["summary"]["layers"] == 2


def test_no_wait_gives_a_job_to_poll(client: TestClient) -> None:
    layer = {**LAYER, "in_channels": 96, "out_channels": 32, "name": "poll"}
    r = schedule(client, [layer, FC], wait=False)
    assert r.status_code == 202, r.text
    doc = r.json()
    assert doc["status"] in ("queued", "running") and doc["links"]["self"] == f"/jobs/{doc['id']}"
    assert doc["progress"]["total"] == 2
    end = time.monotonic() + 60
    while True:
        job = client.get(doc["links"]["self"]).json()
        assert job["progress"]["total"] == 2 and 0 <= job["progress"]["done"] <= 2
        if job["status"] == "done" or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert job["status"] == "done", job
    assert job["progress"]["done"] == 2
    assert [p["layer"]["name"] for p in job["plans"]] == ["poll", "fc"]
    assert job["plans"][1]["cached"] is True  # FC was in the cache when the job was made
    assert client.get("/jobs/0123456789abcdef0123456789abcdef").status_code == 404


def test_plans_listing_and_lookup(client: TestClient) -> None:
    key = schedule(client, [FC]).json()["plans"][0]["key"]
    plan = client.get(f"/plans/{key}").json()
    assert plan["key"] == key and plan["cached"] is True and PLAN_FIELDS <= set(plan)
    page = client.get("/plans", params={"limit": 1}).json()
    assert len(page["plans"]) == 1 and page["next_cursor"]
    rest = client.get("/plans", params={"limit": 100, "cursor": page["next_cursor"]}).json()
    keys = {p["key"] for p in page["plans"]} | {p["key"] for p in rest["plans"]}
    assert key in keys and len(keys) == 1 + len(rest["plans"])
    matmuls = client.get("/plans", params={"op": "matmul", "hardware": "gemmini-16x16"}).json()["plans"]
    assert matmuls and all(p["layer"]["op"] == "matmul" for p in matmuls)
    assert client.get("/plans/" + "0" * 64).status_code == 404
    # a cached plan says when it was cached (UTC, ISO 8601), in the listing and the lookup alike
    when = datetime.fromisoformat(plan["cached_at"])
    assert when.utcoffset() == timedelta(0) and abs(datetime.now(UTC) - when) < timedelta(hours=1)
    assert {p["key"]: p["cached_at"] for p in page["plans"] + rest["plans"]}[key] == plan["cached_at"]


def test_evaluate(client: TestClient) -> None:
    # a layer Tileplan's code wins on (on the ResNet FC layer cosa's weighted optimum is not faster than the library's
    # tiling under the calibrated model, so its plan is that tiling, run as the library: _not_slower_than)
    plan = schedule(client, [LAYER]).json()["plans"][0]
    ok = client.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": LAYER, "mapping": plan["mapping"]})
    assert ok.status_code == 200 and ok.json()["valid"] is True
    assert ok.json()["metrics"]["cycles"] == pytest.approx(plan["metrics"]["cycles"])
    bad = dict(plan["mapping"])
    bad["levels"] = [dict(lv) for lv in bad["levels"]]
    bad["levels"][-1]["temporal"] = [["K", 7]]  # factors no longer multiply to the bounds
    r = client.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": LAYER, "mapping": bad})
    assert r.status_code == 200 and r.json()["valid"] is False and r.json()["violations"]
    # the baseline's cycles are the mapping run by Gemmini's own library: ask for that executor, get them
    base = plan["baseline"]
    lib = client.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": LAYER, "mapping": base["mapping"],
                                         "executor": "library"}).json()
    assert lib["metrics"]["executor"] == "library" and lib["metrics"]["cycles"] == pytest.approx(base["metrics"]["cycles"])
    assert ok.json()["metrics"]["executor"] == "tileplan" and plan["mapping"]["executor"] == "tileplan"
    # a request can name the cost model: Timeloop's semantics on Gemmini too; the calibrated one stays the default
    tl = client.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": LAYER, "mapping": plan["mapping"],
                                        "model": "timeloop"})
    assert tl.status_code == 200 and tl.json()["metrics"]["model"] == "timeloop"
    assert ok.json()["metrics"]["model"] == "gemmini"
    wrong = client.post("/evaluate", json={"hardware": "simba", "layer": LAYER, "mapping": plan["mapping"],
                                           "model": "gemmini"})
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"] == ["body", "model"]
    # a bare mapping (no executor of its own) runs as the hardware's library, the way its measurements ran
    bare = {k: v for k, v in plan["mapping"].items() if k != "executor"}
    r = client.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": LAYER, "mapping": bare}).json()
    assert r["metrics"]["executor"] == "library"
    r = client.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": LAYER, "mapping": plan["mapping"],
                                       "executor": "fpga"})
    assert r.status_code == 422 and "executor" in r.text


def test_hardware_endpoints_and_tokens(client: TestClient) -> None:
    names = {h["name"]: h["source"] for h in client.get("/hardware").json()["hardware"]}
    assert names["gemmini-16x16"] == "catalog"
    hw = client.get("/hardware/gemmini-16x16").json()
    assert hw["name"] == "gemmini-16x16" and hw["memory_levels"]
    assert client.get("/hardware/nope").status_code == 404

    desc = {**catalog()["gemmini-8x8"].model_dump(mode="json"), "name": "team-npu"}
    assert client.post("/hardware", json=desc).status_code == 401
    assert client.post("/hardware", json=desc, headers={"authorization": "Bearer wrong"}).status_code == 403
    auth = {"authorization": "Bearer s3cret"}
    r = client.post("/hardware", json=desc, headers=auth)
    assert r.status_code == 201, r.text
    assert r.json()["links"]["self"] == "/hardware/team-npu"
    text = yaml.safe_dump({**desc, "name": "yaml-npu"})
    r = client.post("/hardware", content=text, headers={**auth, "content-type": "application/yaml"})
    assert r.status_code == 201, r.text
    listed = {h["name"]: h["source"] for h in client.get("/hardware").json()["hardware"]}
    assert listed["team-npu"] == "registered" and listed["yaml-npu"] == "registered"
    plan = schedule(client, [FC], hardware="team-npu").json()["plans"][0]
    assert plan["hardware"] == "team-npu"
    conflict = client.post("/hardware", json={**desc, "name": "gemmini-16x16"}, headers=auth)
    assert conflict.status_code == 409
    assert client.delete("/hardware/yaml-npu").status_code == 401
    assert client.delete("/hardware/yaml-npu", headers=auth).status_code == 204
    assert client.get("/hardware/yaml-npu").status_code == 404


def test_health_metrics_and_docs(client: TestClient) -> None:
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["database"] == "ok" and h["queue"] == "local"
    text = client.get("/metrics").text
    for name in ("tileplan_http_requests_total", "tileplan_http_request_seconds_bucket", "tileplan_cache_hits_total",
                 "tileplan_cache_misses_total", "tileplan_solves_total", "tileplan_solve_seconds_bucket",
                 "tileplan_queue_depth"):
        assert name in text, name
    assert 'route="/schedule"' in text
    paths = set(client.get("/openapi.json").json()["paths"])
    assert {"/schedule", "/evaluate", "/plans", "/plans/{key}", "/plans/{key}/timeloop", "/jobs/{job_id}",
            "/hardware", "/hardware/{name}", "/healthz", "/metrics"} <= paths
    assert client.get("/docs").status_code == 200


def test_protect_reads(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, solver_processes=1, tokens=["t1", "t2"], protect_reads=True))
    with TestClient(app) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/plans").status_code == 401
        assert c.get("/plans").headers["www-authenticate"] == "Bearer"
        assert c.get("/plans", headers={"authorization": "Bearer t2"}).status_code == 200
        r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [FC]})
        assert r.status_code == 401 and r.json()["detail"][0]["loc"] == ["header", "authorization"]


def test_timeloop_export(client: TestClient) -> None:
    plan = schedule(client, [LAYER]).json()["plans"][0]
    r = client.get(plan["links"]["timeloop"])
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/yaml")
    doc = yaml.safe_load(r.text)
    targets = {e["target"] for e in doc["mapping"]}
    assert targets == {lv["name"] for lv in plan["mapping"]["levels"]}
    temporal = [e for e in doc["mapping"] if e["type"] == "temporal"]
    assert all(set(e["factors"].split()) and "=" in e["factors"] for e in temporal)
    bundle = yaml.safe_load(client.get(plan["links"]["timeloop"], params={"bundle": "true"}).text)
    assert {"architecture", "problem", "mapping"} <= set(bundle)
    assert client.get("/plans/" + "1" * 64 + "/timeloop").status_code == 404
