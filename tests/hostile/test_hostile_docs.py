"""Case 10 of issue 16: with reads protected, the API's description (/docs, /openapi.json) needs the token too;
/redoc is not served at all."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.settings import Settings


def test_docs_need_the_token_when_reads_are_protected(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(data_dir=tmp_path, solver_processes=1, tokens=["s3cret"], protect_reads=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        for path in ("/docs", "/openapi.json"):
            assert c.get(path).status_code == 401, path
            assert c.get(path, headers={"authorization": "Bearer wrong"}).status_code == 403, path
            assert c.get(path, headers={"authorization": "Bearer s3cret"}).status_code == 200, path
        c.cookies.set("tileplan_token", "s3cret")  # the browser view's sign-in cookie opens them like any read
        assert c.get("/openapi.json").json()["info"]["title"] == "Tileplan"
        assert c.get("/redoc").status_code == 404


def test_docs_stay_open_when_reads_are_not_protected(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(data_dir=tmp_path, solver_processes=1, tokens=["s3cret"])
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert c.get("/openapi.json").status_code == 200 and c.get("/docs").status_code == 200
