"""What POST /schedule, GET /jobs/{id} and the plan links answer: the asker's names, notes, the baseline's mapper,
times, and codegen on hardware that has no code generator (the app in-process: SQLite, local solver pool)."""

from __future__ import annotations

import base64
import io
import re
import tarfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper

from tileplan.api.app import create_app
from tileplan.settings import Settings

FAST = {"time_limit_s": 1.0}
MM = {"op": "matmul", "M": 32, "K": 64, "N": 32}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # a short codegen limit: a module request that hangs shows up as a 503 here, not as a slow test; a long wait
    # limit: these tests check answers, and a loaded machine must not turn a plan into a 202 (a job to poll)
    settings = Settings(data_dir=tmp_path_factory.mktemp("answers"), solver_processes=1, codegen_time_limit_s=45,
                        wait_limit_s=300)
    with TestClient(create_app(settings)) as c:
        yield c


def post(client: TestClient, layers: list[dict], hardware: str = "gemmini-16x16", wait: bool = True,
         **options: object):
    return client.post("/schedule", json={"hardware": hardware, "layers": layers, "options": {**FAST, **options},
                                          "wait": wait})


def poll(client: TestClient, url: str) -> dict:
    end = time.monotonic() + 120
    while True:
        job = client.get(url).json()
        if job["status"] in ("done", "failed") or time.monotonic() > end:
            return job
        time.sleep(0.1)


def link(url: str, **params: str) -> str:
    """`url` (a plan link, which may carry a query of its own) with `params` added."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=urlencode([*parse_qsl(parts.query), *params.items()])))


def utc(text: str) -> datetime:
    ts = datetime.fromisoformat(text)
    assert ts.utcoffset() == timedelta(0), text  # an explicit UTC offset, not a naive local-looking time
    return ts


# -- codegen on hardware without a code generator ------------------------------------------------------------


@pytest.mark.parametrize("hardware", ["simba", "eyeriss-os"])
def test_codegen_on_hardware_without_a_code_generator_is_a_422_that_keeps_the_plan(
    client: TestClient, hardware: str
) -> None:
    layer = {**MM, "name": f"cg_{hardware}", "N": 48}
    r = post(client, [layer], hardware=hardware, codegen=True)
    assert r.status_code == 422, r.text
    doc = r.json()
    (item,) = doc["detail"]
    assert item["loc"] == ["body", "options", "codegen"] and item["type"] == "codegen_unsupported"
    assert f"no code generator for {hardware}" in item["msg"] and "square" not in item["msg"]
    (plan,) = doc["plans"]  # the plan was solved and is kept
    assert plan["layer"]["name"] == layer["name"] and plan["metrics"]["cycles"] > 0
    assert client.get(f"/plans/{plan['key']}").status_code == 200
    again = post(client, [layer], hardware=hardware, codegen=True)  # from the cache: the same answer
    assert again.status_code == 422 and again.json()["plans"][0]["cached"] is True
    assert post(client, [layer], hardware=hardware).status_code == 200  # without codegen: just the plan


@pytest.mark.parametrize("hardware", ["simba", "eyeriss-os"])
def test_module_of_a_plan_without_a_code_generator_is_a_422_at_once(client: TestClient, hardware: str) -> None:
    r = post(client, [{**MM, "name": f"mod_{hardware}", "K": 96}], hardware=hardware)
    assert r.status_code == 200, r.text
    plan = r.json()["plans"][0]
    for fmt in ("c", "tar"):
        m = client.get(plan["links"]["module"].split("?")[0], params={"format": fmt})
        assert m.status_code == 422, m.text
        (item,) = m.json()["detail"]
        assert f"no code generator for {hardware}" in item["msg"] and "square" not in item["msg"]


# -- names -----------------------------------------------------------------------------------------------------


def test_a_cached_plan_carries_the_name_the_request_gave(client: TestClient) -> None:
    first = post(client, [{**MM, "name": "qkv_proj"}]).json()["plans"][0]
    for wait in (True, False):
        r = post(client, [dict(MM)], wait=wait)  # the same layer, unnamed: from the cache
        assert r.status_code == 200
        plan = r.json()["plans"][0]
        assert plan["key"] == first["key"] and plan["cached"] is True
        assert plan["layer"]["name"] == ""
        followed = client.get(plan["links"]["self"])  # the plan's own link keeps the asker's layer
        assert followed.status_code == 200 and followed.json()["layer"]["name"] == ""
    named = post(client, [{**MM, "name": "attn_out"}]).json()["plans"][0]
    assert named["layer"]["name"] == "attn_out"
    assert client.get(named["links"]["self"]).json()["layer"]["name"] == "attn_out"
    assert client.get(f"/plans/{first['key']}").json()["layer"]["name"] == "qkv_proj"  # the cache's own record


def test_a_module_unpacks_under_the_requested_plans_name(client: TestClient) -> None:
    conv = {"op": "conv2d", "in_channels": 16, "out_channels": 16, "in_h": 8, "in_w": 8, "kernel": 3, "padding": 1}
    conv2 = post(client, [{**conv, "name": "conv2"}], codegen=True, baseline=False)
    assert conv2.status_code == 200, conv2.text
    conv3 = post(client, [{**conv, "name": "conv3"}], codegen=True, baseline=False).json()["plans"][0]
    assert conv3["cached"] is True and conv3["key"] == conv2.json()["plans"][0]["key"]
    assert "name=conv3" in conv3["links"]["module"]
    tar = client.get(link(conv3["links"]["module"], format="tar"))
    assert tar.status_code == 200, tar.text
    assert 'filename="conv3.tar"' in tar.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(tar.content)) as tf:
        names = tf.getnames()
        assert {Path(n).parts[0] for n in names} == {"conv3"}
        assert "conv3/conv3.c" in names
        source = tf.extractfile("conv3/conv3.c").read().decode()  # type: ignore[union-attr]
    assert "void conv3(" in source and not re.search(r"\bconv2\b", source)
    c = client.get(link(conv3["links"]["module"], format="c"))
    assert c.status_code == 200 and "void conv3(" in c.text
    # the first asker's module is still its own
    c2 = client.get(link(conv2.json()["plans"][0]["links"]["module"], format="c"))
    assert "void conv2(" in c2.text


# -- notes, the baseline's mapper, times ------------------------------------------------------------------------


def model_with_a_conv_transpose() -> bytes:
    """Conv 8->16 3x3, then a ConvTranspose 16->8 (an upsampling decoder step Tileplan does not plan)."""
    w1 = numpy_helper.from_array(__import__("numpy").zeros((16, 8, 3, 3), "float32"), "w1")
    w2 = numpy_helper.from_array(__import__("numpy").zeros((16, 8, 2, 2), "float32"), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], name="enc", pads=[1, 1, 1, 1]),
        helper.make_node("ConvTranspose", ["c", "w2"], ["y"], name="dec", strides=[2, 2]),
    ]
    graph = helper.make_graph(nodes, "upsample", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_model_notes_reach_the_answer_and_the_job(client: TestClient) -> None:
    body = {"hardware": "gemmini-16x16", "model": base64.b64encode(model_with_a_conv_transpose()).decode(),
            "options": FAST}
    r = client.post("/schedule", json=body)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert [p["layer"]["name"] for p in doc["plans"]] == ["enc"]
    assert any("ConvTranspose" in n and "not planned" in n for n in doc["notes"]), doc.get("notes")
    job = client.post("/schedule", json={**body, "options": {**FAST, "time_limit_s": 0.9}, "wait": False}).json()
    done = poll(client, job["links"]["self"])
    assert done["status"] == "done" and any("ConvTranspose" in n for n in done["notes"])


def test_the_baseline_mapper_is_named_and_a_cold_summary_has_seconds_and_utc_times(client: TestClient) -> None:
    layer = {**MM, "name": "times", "K": 80}
    r = post(client, [layer], wait=False)
    assert r.status_code == 202
    job = poll(client, r.json()["links"]["self"])
    assert job["status"] == "done", job
    created, finished = utc(job["created_at"]), utc(job["finished_at"])
    assert created <= finished
    s = job["summary"]
    assert s["seconds"] == pytest.approx((finished - created).total_seconds(), abs=1e-3)
    assert s["baseline_mapper"] == "gemmini-auto"
    utc(job["plans"][0]["cached_at"]) if job["plans"][0].get("cached_at") else None
    cached = post(client, [layer]).json()
    assert cached["summary"]["baseline_mapper"] == "gemmini-auto" and cached["summary"]["seconds"] >= 0
    # a descriptor without a hand-written tiling: the baseline is the random mapper, and says so
    simba = post(client, [{**layer, "name": "times_simba"}], hardware="simba").json()
    assert simba["summary"]["baseline_mapper"] == "random"
    assert simba["plans"][0]["baseline"]["mapper"] == "random"
