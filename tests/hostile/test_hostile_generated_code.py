"""Names a client chooses flow into the code the server generates and builds: an ONNX graph's name, its inputs',
outputs' and nodes' names land in comments of the artifact's C files, its Makefile and its README, and the server
runs `make host` on that Makefile (the compile's emulated run) and echoes a failed build's compiler errors.

A name holding `*/` (or a backslash-newline, which C splices before it looks for comments), a newline and
`#include "/etc/passwd"` would make gcc read a server file and print its lines in the error the client gets; a
newline and `$(shell ...)` in the Makefile's first comment would run a command on the server. Every such name
must come out as inert text: the compile succeeds, nothing is run, no artifact file holds a directive of the
client's, and the artifact's tar members stay under its one top directory.
"""

from __future__ import annotations

import base64
import io
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.frontend import zoo
from tileplan.frontend.program import c_comment
from tileplan.settings import Settings


def _named(marker: Path, lines: bool = False) -> bytes:
    """The QDQ MLP with every name a client controls set to an injection attempt (`lines`: with the newlines that
    would put a directive or a make line on a line of its own; such names are refused since hostile13, and the
    generated files' comments would make them inert too: test_c_comment_is_inert)."""
    import onnx

    nl = "\n" if lines else " "
    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    leak = f'*/{nl}#include "/etc/passwd"{nl}/*'
    m.graph.name = f"mlp {leak} \\{nl}$(shell touch {marker}){nl}x{{{{ 7*7 }}}}{{% raw %}} ??/"
    m.doc_string = f"doc {leak}"
    renames = {m.graph.input[0].name: f"in*\\{nl}/{nl}#include \"/etc/hostname\"{nl}/*{marker}",
               m.graph.output[0].name: f"out {leak} $(shell touch {marker})"}
    for node in m.graph.node:
        node.name = f"{node.name} {leak}"
        node.input[:] = [renames.get(i, i) for i in node.input]
        node.output[:] = [renames.get(o, o) for o in node.output]
    for vi in (*m.graph.input, *m.graph.output):
        vi.name = renames.get(vi.name, vi.name)
    return m.SerializeToString()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile_names"), solver_processes=1, wait_limit_s=600)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_c_comment_is_inert() -> None:
    for text in ["a */ b", "a *\\\n/ b", "x\n#include <y>", "a /* b", "??/", "\x00\x7f\u2028é", "$(shell id)\\"]:
        out = c_comment(text)
        assert "*/" not in out and "/*" not in out and "\\" not in out and "??" not in out, out
        assert all(32 <= ord(ch) < 127 for ch in out), out
    assert c_comment("conv1/weight: 3x3") == "conv1/weight: 3x3"  # (ordinary names unchanged)
    assert len(c_comment("n" * 100_000)) <= 200


def _code_outside_comments(src: str) -> str:
    """C source without its comments and string literals (backslash-newlines spliced first, as the compiler does;
    one left-to-right scan, as its lexer: a `/*` inside a string starts no comment)."""
    src = src.replace("\\\n", "")
    return re.sub(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", " ", src, flags=re.S)


def test_names_in_a_model_cannot_inject_code_or_commands(client: TestClient, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(_named(marker)).decode(),
                                      "options": {"time_limit_s": 2}, "wait": True})
    assert "root:" not in r.text and "/bin/" not in r.text, r.text[:2000]  # (/etc/passwd's lines, as gcc quotes them)
    assert r.status_code == 200, r.text[:2000]
    assert not marker.exists()
    tar = client.get(f"/compiles/{r.json()['id']}/artifact")
    assert tar.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(tar.content)) as t:
        members = t.getmembers()
        tops = {m.name.split("/")[0] for m in members}
        assert len(tops) == 1 and all(m.isfile() and not m.name.startswith("/") and ".." not in m.name.split("/")
                                      for m in members)
        files = {m.name.split("/", 1)[1]: t.extractfile(m).read().decode(errors="replace")  # type: ignore[union-attr]
                 for m in members}
    for name, text in files.items():
        if name.endswith((".c", ".h", ".S")):
            code = _code_outside_comments(text)
            assert not re.search(r"^\s*#\s*include\s*\"/|/etc/", code, flags=re.M), (name, code)
    for line in files["Makefile"].splitlines():
        assert "pwned" not in line or line.startswith("#"), line
    assert not any(line.rstrip().endswith("\\") for line in files["Makefile"].splitlines() if line.startswith("#"))


def test_names_of_more_than_one_line_are_refused(client: TestClient, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "options": {"time_limit_s": 2}, "wait": True,
                                      "model": base64.b64encode(_named(marker, lines=True)).decode()})
    assert r.status_code == 422, r.text[:2000]
    assert r.json()["detail"][0]["loc"][:2] == ["body", "model"] and "control character" in r.text
    assert not marker.exists()


def _long_named(n: int) -> bytes:
    import onnx

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    m.graph.name = "g" * n
    for i, node in enumerate(m.graph.node):
        node.name = f"{i}" + "n" * n
    return m.SerializeToString()


def test_very_long_names_compile(client: TestClient) -> None:
    """100,000-character graph and node names: not file names too long for the file system (a 500), and not in
    every comment whole."""
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(_long_named(100_000))
                                      .decode(), "options": {"time_limit_s": 2}, "wait": True})
    assert r.status_code in (200, 422), r.text[:2000]
    if r.status_code == 422:
        assert r.json()["detail"][0]["loc"][:2] == ["body", "model"], r.text[:2000]
    else:
        tar = client.get(f"/compiles/{r.json()['id']}/artifact")
        with tarfile.open(fileobj=io.BytesIO(tar.content)) as t:
            assert all(len(m.name) < 512 for m in t.getmembers())



def _run(client: TestClient, model: bytes, x: Any) -> Any:
    from tileplan.frontend.runner import run_artifact

    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(),
                                      "options": {"time_limit_s": 2}, "wait": True})
    assert r.status_code == 200, r.text[:2000]
    tar = client.get(f"/compiles/{r.json()['id']}/artifact").content
    return next(iter(run_artifact(tar, {"input": x}).outputs.values()))


def test_names_that_are_one_c_name_do_not_share_a_kernel(client: TestClient) -> None:
    """Node names `n.`, `n..`, `n...` are all the C name `n`: each layer's kernel was written to
    kernels/tpk_n.c in turn, and the program called the last one for every layer (silently wrong outputs)."""
    import numpy as np
    import onnx

    plain = zoo.build("mlp", "qdq")
    m = onnx.load_model_from_string(plain)
    for i, node in enumerate(m.graph.node):
        node.name = "n" + "." * (i + 1)
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_array_equal(_run(client, m.SerializeToString(), x), _run(client, plain, x))


def test_a_non_ascii_graph_name_downloads(client: TestClient) -> None:
    """The artifact's file name (Content-Disposition) is made from the graph's name: letters outside Latin-1 could
    not be sent in a header at all (a 500 on every download of that compile)."""
    import onnx

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    m.graph.name = "модель 模型 " + "ß" * 300
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(m.SerializeToString())
                                      .decode(), "options": {"time_limit_s": 2}, "wait": True})
    assert r.status_code == 200, r.text[:2000]
    tar = client.get(f"/compiles/{r.json()['id']}/artifact")
    assert tar.status_code == 200, tar.text[:500]
    name = tar.headers["content-disposition"]
    assert name.isascii() and len(name) < 200, name
