"""Case 5 of issue 23: with tokens configured, anonymous clients wrote (POST /schedule, POST /compile) and any token
could write. Now tokens carry scopes (read, write, admin; a plain token is write): every write needs write, reads
need read where they are protected, only an admin acts on what another owner stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tileplan.api.app import create_app
from tileplan.hardware.catalog import catalog
from tileplan.settings import Settings

FC = {"name": "fc", "op": "matmul", "M": 1, "K": 64, "N": 64}
FAST = {"time_limit_s": 1, "baseline": False}
TOKENS = ["reader-token:read", "alice-token", "bob-token:write", "root-token:admin"]


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


READER, ALICE, BOB, ROOT = (bearer(t) for t in ("reader-token", "alice-token", "bob-token", "root-token"))


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("scopes"), solver_processes=1, tokens=TOKENS)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def error(r) -> dict:  # type: ignore[no-untyped-def]
    assert "Traceback" not in r.text
    return dict(r.json()["detail"][0])


def test_writes_need_a_write_token(client: TestClient) -> None:
    body = {"hardware": "gemmini-16x16", "layers": [FC], "options": FAST}
    r = client.post("/schedule", json=body)
    assert r.status_code == 401 and error(r)["loc"] == ["header", "authorization"], r.text
    assert r.headers["www-authenticate"] == "Bearer"
    r = client.post("/schedule", json=body, headers=READER)
    assert r.status_code == 403 and error(r)["type"] == "insufficient_scope", r.text
    # the body is not read before the token is checked
    assert client.post("/compile", content=b"{not json", headers={"content-type": "application/json"}).status_code == 401
    assert client.post("/compile", json={"hardware": "gemmini-16x16", "model": ""}, headers=READER).status_code == 403
    assert client.post("/schedule", json=body, headers=bearer("wrong")).status_code == 403
    r = client.post("/schedule", json=body, headers=ALICE)  # a plain token is write
    assert r.status_code == 200, r.text
    key = r.json()["plans"][0]["key"]
    assert client.post("/schedule", json=body, headers=BOB).status_code == 200  # all cached: its answer is kept
    # a kept answer is a write's answer too: still no token, no answer
    assert client.post("/schedule", json=body).status_code == 401
    assert client.post("/schedule", json=body, headers=READER).status_code == 403
    # reads are open here (protect_reads is off); /evaluate is a read
    assert client.get(f"/plans/{key}").status_code == 200
    plan = client.get(f"/plans/{key}").json()
    assert client.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": FC,
                                          "mapping": plan["mapping"]}).status_code == 200
    assert client.delete(f"/plans/{key}", headers=READER).status_code == 403
    assert client.delete(f"/plans/{key}", headers=BOB).status_code == 204


def test_only_the_owner_or_an_admin_acts_on_registered_hardware(client: TestClient) -> None:
    desc = {**catalog()["gemmini-8x8"].model_dump(mode="json"), "name": "scoped-npu"}
    assert client.post("/hardware", json=desc, headers=READER).status_code == 403
    r = client.post("/hardware", json=desc, headers=BOB)
    assert r.status_code == 201, r.text
    owner = r.json()["owner"]
    assert owner and "bob-token" not in owner  # a fingerprint, never the token
    assert client.put("/hardware/scoped-npu", json=desc, headers=ALICE).status_code == 403
    assert client.delete("/hardware/scoped-npu", headers=ALICE).status_code == 403
    r = client.put("/hardware/scoped-npu", json={**desc, "description": "v2"}, headers=ROOT)
    assert r.status_code == 200 and r.json()["owner"] == owner and r.json()["version"] == 2, r.text
    assert client.delete("/hardware/scoped-npu", headers=ROOT).status_code == 204


def test_protected_reads_take_any_scope_and_nothing_less(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, solver_processes=1, tokens=TOKENS, protect_reads=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert c.get("/plans").status_code == 401
        for headers in (READER, ALICE, ROOT):
            assert c.get("/plans", headers=headers).status_code == 200
        assert c.post("/ui/login", data={"token": "reader-token", "next": "/"}, follow_redirects=False
                      ).status_code == 303  # the browser view signs in as before, with any accepted token
        assert c.get("/plans").status_code == 200  # its cookie reads
        r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [FC]})
        assert r.status_code == 401  # and never writes


def test_a_misspelt_scope_fails_at_start_without_echoing_the_token() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(tokens="good-token:read,secret-value:wirte")
    assert "entry 2" in str(info.value) and "wirte" in str(info.value)
    assert "secret-value" not in str(info.value)
    assert Settings(tokens="a:b:admin,plain").tokens == ["a:b:admin", "plain"]
