"""An unknown option is a 422 naming it (and the option meant, where one is close), in POST /schedule and
POST /compile alike: a typo used to plan with the defaults and answer 200."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from service_procs import FC

from tileplan.api.app import create_app
from tileplan.settings import Settings


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("options"), solver_processes=1)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_schedule_option_typo(client: TestClient) -> None:
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [FC],
                                       "options": {"mapperr": "random", "time_limt_s": 1}})
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"] == ["body", "options", "mapperr"] and item["type"] == "extra_forbidden"
    assert "did you mean 'mapper'" in item["msg"]


def test_schedule_objective_typo(client: TestClient) -> None:
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [FC],
                                       "options": {"objective": {"latncy": 1}}})
    assert r.status_code == 422, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "options", "objective", "latncy"] and "did you mean 'latency'" in item["msg"]


def test_schedule_unknown_top_level_key_still_refused(client: TestClient) -> None:
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [FC], "optons": {}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "optons"]


def test_compile_unknown_option(client: TestClient) -> None:
    from test_workload_onnx import quantized_cnn

    model = base64.b64encode(quantized_cnn()).decode()
    # ('fusion' itself became an option: tileplan.fusion's fused-layer groups)
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": model, "options": {"fuson": "auto"}})
    assert r.status_code == 422, r.text
    item = r.json()["detail"][0]
    assert item["loc"] == ["body", "options", "fuson"] and "unknown option 'fuson'" in item["msg"]
    assert "did you mean 'fusion'" in item["msg"]


def test_an_unknown_query_parameter_is_a_422_naming_it(client: TestClient) -> None:
    """GET /plans?hardwre=x listed every plan (the typo was ignored): like an unknown option in a body, an unknown
    query parameter is refused, naming it and the parameter meant."""
    r = client.get("/plans", params={"hardwre": "gemmini-16x16"})
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"] == ["query", "hardwre"] and item["type"] == "extra_forbidden"
    assert "did you mean 'hardware'" in item["msg"]
    r = client.get("/healthz", params={"verbose": "1"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "verbose"]
    assert "takes no query parameters" in r.json()["detail"][0]["msg"]
    # the declared ones still work, on every router
    assert client.get("/plans", params={"hardware": "gemmini-16x16", "limit": 5}).status_code == 200
    assert client.get("/compiles", params={"limit": 5}).status_code == 200
    assert client.get("/healthz").status_code == 200
