"""Issue 23, cases 8 and 9: storage errors are 503s (never 500s, never an "ok" health), and POST /compile's
`input_shapes` are strict positive integers within the server's bounds, with every oversized body a 413.

Case 8: the `plans` table's pages in the SQLite file are overwritten (a damaged disk, a torn copy): /healthz must
say 503 (the database is not ok), and the endpoints that read plans answer 503 with a JSON body, not a 500.

Case 9: `true`, `"16"`, `1e3` and `1e23` are not dimensions (JSON's loose coercions would take the first three, the
last one overflowed into a 500); a shape past the server's bounds (`[1, 3, 2^20, 2^20]`) is refused up front as the
request's fault (a 422 naming the input), before anything is stored or run; a chunked multipart upload over the
compile limit is a 413 like a declared one.
"""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.frontend import zoo
from tileplan.settings import Settings

LAYER = {"name": "fc", "op": "matmul", "M": 4, "K": 16, "N": 16}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile_limits"), solver_processes=1,
                        max_compile_bytes=256 * 1024)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _model(name: str = "mlp", symbolic: tuple[int, ...] = (0,)) -> str:
    """A zoo model whose input has symbolic dimensions at `symbolic` (input_shapes then says what they are)."""
    import onnx

    m = onnx.load_model_from_string(zoo.build(name, "qdq"))
    for i in symbolic:
        m.graph.input[0].type.tensor_type.shape.dim[i].dim_param = f"d{i}"
    return base64.b64encode(m.SerializeToString()).decode()


@pytest.mark.parametrize("dims", [[True, 64], ["16", 64], [1e3, 64], [1e23, 64], [16.0, 64], [-1, 64], [0, 64],
                                  [], "1x64", [[1, 64]]])
def test_input_shapes_are_strict_positive_integers(client: TestClient, dims: object) -> None:
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": _model(), "input_shapes": {"input": dims},
                                      "wait": False})
    assert r.status_code == 422, r.text
    loc = r.json()["detail"][0]["loc"]
    assert loc[:3] == ["body", "input_shapes", "input"], loc
    assert client.get("/compiles").json()["compiles"] == []


def test_a_shape_past_the_servers_bounds_is_refused_up_front(client: TestClient) -> None:
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": _model("cnn_small", (2, 3)),
                                      "input_shapes": {"input": [1, 3, 1 << 20, 1 << 20]}, "wait": False})
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["loc"][:3] == ["body", "input_shapes", "input"] and "elements" in d["msg"], d
    assert client.get("/compiles").json()["compiles"] == []


def _chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


def test_an_oversized_chunked_multipart_upload_is_a_413(client: TestClient) -> None:
    boundary = "hostileboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n"
            '{"hardware": "gemmini-16x16"}\r\n'
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"; filename=\"m.onnx\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + bytes(1024 * 1024) + \
        f"\r\n--{boundary}--\r\n".encode()
    r = client.post("/compile", content=_chunks(body),
                    headers={"content-type": f"multipart/form-data; boundary={boundary}"})
    assert r.status_code == 413, r.text
    assert r.json()["detail"][0]["type"] == "too_large"
    r = client.post("/compile", content=_chunks(b'{"hardware": "gemmini-16x16", "model": "' + b"A" * (1 << 20)
                                                + b'"}'), headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text


# -- case 8: damaged storage ----------------------------------------------------------------------------------


def _damage(db: Path, table: str) -> None:
    """Overwrite the pages of `table` (its b-tree's root page and the rest of the file after it) with garbage."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    con.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * page)
        f.write(b"\xa5" * page)


def test_damaged_plans_table_is_a_503_on_health_and_on_the_endpoints_it_breaks(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, solver_processes=1, wait_limit_s=120)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [LAYER],
                                      "options": {"time_limit_s": 2}})
        assert r.status_code == 200, r.text
        key = r.json()["plans"][0]["key"]
        assert c.get("/healthz").status_code == 200
    _damage(tmp_path / "tileplan.db", "plans")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        h = c.get("/healthz")
        assert h.status_code == 503, h.text
        assert h.json()["database"] != "ok"
        for method, path, body in [("GET", f"/plans/{key}", None), ("GET", "/plans", None),
                                   ("POST", "/schedule", {"hardware": "gemmini-16x16", "layers": [LAYER],
                                                          "options": {"time_limit_s": 2}})]:
            r = c.request(method, path, json=body)
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert r.json()["detail"][0]["type"] == "service_unavailable", r.text
