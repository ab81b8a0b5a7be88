"""`tileplan-client` exit codes: 0 ok, 1 service error, 2 bad input, 3 slower than the baseline."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from service_procs import env, free_port, start_api

LAYERS = [
    {"name": "fc", "op": "matmul", "M": 1, "K": 2048, "N": 1000},
    {"name": "c1", "op": "conv2d", "in_channels": 64, "out_channels": 64, "in_h": 28, "in_w": 28, "kernel": 3,
     "padding": 1},
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    api = start_api(tmp_path_factory.mktemp("cli"), solvers=2)
    try:
        yield api.url
    finally:
        api.stop()


def run(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tileplan_client.cli", "--url", url, "--retries", "0", *args],
        capture_output=True, text=True, env=env(), timeout=300,
    )


def test_schedule_ok_writes_plans(service: str, tmp_path: Path) -> None:
    wl = tmp_path / "layers.yaml"
    wl.write_text(yaml.safe_dump({"network": "tiny", "layers": LAYERS}))
    out = tmp_path / "plans.json"
    r = run("schedule", "--hw", "gemmini-16x16", "--workload", str(wl), "--out", str(out), url=service)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["status"] == "done" and [p["layer"]["name"] for p in doc["plans"]] == ["fc", "c1"]
    quiet = json.loads(r.stdout)  # not a terminal: one line of JSON, no progress bar
    assert quiet["summary"]["layers"] == 2 and "\r" not in r.stderr
    # an inline descriptor file works too, and the second run is all cache hits
    hw = tmp_path / "my-gemmini.yaml"
    hw.write_text(yaml.safe_dump(_descriptor(service)))
    assert "gemmini-16x16" in {h["name"] for h in json.loads(run("hardware", url=service).stdout)}
    r = run("schedule", "--hw", str(hw), "--workload", str(wl), url=service)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert all(p["cached"] and p["cached_at"] for p in doc["plans"]) and doc["plans"][0]["hardware"] == "my-gemmini"


def _descriptor(url: str) -> dict:
    import httpx

    d = httpx.get(url + "/hardware/gemmini-16x16").json()
    d.pop("source", None)
    d["name"] = "my-gemmini"
    return d


def test_bad_input_exits_2(service: str, tmp_path: Path) -> None:
    assert run("schedule", "--hw", "gemmini-16x16", "--workload", str(tmp_path / "missing.yaml"),
               url=service).returncode == 2
    broken = tmp_path / "broken.yaml"
    broken.write_text("layers: [ {op: conv2d, in_channels: 3\n")
    r = run("schedule", "--hw", "gemmini-16x16", "--workload", str(broken), url=service)
    assert r.returncode == 2 and "YAML" in r.stderr
    wl = tmp_path / "ok.yaml"
    wl.write_text(yaml.safe_dump(LAYERS))
    r = run("schedule", "--hw", "tpu-v9", "--workload", str(wl), url=service)
    assert r.returncode == 2 and "hardware" in r.stderr and "tpu-v9" in r.stderr
    impossible = tmp_path / "impossible.yaml"
    impossible.write_text(yaml.safe_dump([{**LAYERS[1], "in_h": 1, "in_w": 1, "padding": 0}]))
    r = run("schedule", "--hw", "gemmini-16x16", "--workload", str(impossible), url=service)
    assert r.returncode == 2 and "layers.0.kernel" in r.stderr
    assert run("schedule", "--hw", "gemmini-16x16", url=service).returncode == 2  # usage error


def test_unreachable_service_exits_1(tmp_path: Path) -> None:
    wl = tmp_path / "ok.yaml"
    wl.write_text(yaml.safe_dump(LAYERS))
    r = run("schedule", "--hw", "gemmini-16x16", "--workload", str(wl), url=f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 1 and "cannot reach" in r.stderr


class _Canned(BaseHTTPRequestHandler):
    status = 200
    body: dict = {}

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        data = json.dumps(self.body).encode()
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _canned_server(status: int, body: dict) -> tuple[ThreadingHTTPServer, str]:
    handler = type("H", (_Canned,), {"status": status, "body": body})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def _plan(cycles: float, baseline: float) -> dict:
    m = {"energy_pj": 1.0, "utilization": 0.5, "dram_bytes": 1.0, "ideal_cycles": 1.0, "bound": "compute"}
    return {"key": "b" * 64, "layer": {"name": "fc"}, "hardware": "h", "mapper": "cosa", "mapping": {},
            "metrics": {"cycles": cycles, **m},
            "baseline": {"mapper": "gemmini-auto", "mapping": {}, "metrics": {"cycles": baseline, **m}},
            "solver": {}, "cached": True, "links": {}}


@pytest.mark.parametrize(("cycles", "code"), [(120.0, 3), (80.0, 0)])
def test_fail_if_slower_than_baseline(tmp_path: Path, cycles: float, code: int) -> None:
    """The exit-code logic against a canned answer (the real solver rarely loses to its baseline)."""
    srv, url = _canned_server(200, {"id": "x", "status": "done", "plans": [_plan(cycles, 100.0)],
                                    "summary": {"layers": 1}})
    try:
        wl = tmp_path / "ok.yaml"
        wl.write_text(yaml.safe_dump(LAYERS[:1]))
        r = run("schedule", "--hw", "h", "--workload", str(wl), "--fail-if-slower-than-baseline", url=url)
        assert r.returncode == code, r.stderr
        assert ("slower than the baseline: fc" in r.stderr) == (code == 3)
        r = run("schedule", "--hw", "h", "--workload", str(wl), url=url)
        assert r.returncode == 0
    finally:
        srv.shutdown()


def test_service_error_exits_1(tmp_path: Path) -> None:
    srv, url = _canned_server(500, {"detail": [{"loc": [], "msg": "internal error (reference r)", "type": "i"}]})
    try:
        wl = tmp_path / "ok.yaml"
        wl.write_text(yaml.safe_dump(LAYERS[:1]))
        r = run("schedule", "--hw", "h", "--workload", str(wl), url=url)
        assert r.returncode == 1 and "HTTP 500" in r.stderr
    finally:
        srv.shutdown()


def test_schedule_an_onnx_model(service: str, tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_workload_onnx import quantized_cnn

    model = tmp_path / "tiny.onnx"
    model.write_bytes(quantized_cnn())
    r = run("schedule", "--hw", "gemmini-16x16", "--model", str(model), "--mapper", "gemmini-auto", url=service)
    assert r.returncode == 0, r.stderr
    assert [p["layer"]["name"] for p in json.loads(r.stdout)["plans"]] == ["stem", "dw", "classifier"]
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    r = run("schedule", "--hw", "gemmini-16x16", "--model", str(junk), url=service)
    assert r.returncode == 2 and "model" in r.stderr
    both = run("schedule", "--hw", "gemmini-16x16", "--model", str(model), "--workload", str(model), url=service)
    assert both.returncode == 2


# -- notes, modules, nests and the README's SDK example against the real service ----------------------------------


def test_notes_reach_the_client(service: str, tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
    from test_answers import model_with_a_conv_transpose

    model = tmp_path / "up.onnx"
    model.write_bytes(model_with_a_conv_transpose())
    r = run("schedule", "--hw", "gemmini-16x16", "--model", str(model), "--time-limit", "1", url=service)
    assert r.returncode == 0, r.stderr
    assert "note: model: 1 ConvTranspose node(s) not planned" in r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert notes[0] == "model: 1 ConvTranspose node(s) not planned (no conv2d/matmul form)"
    # the model is float: its one planned layer is named as such (workload_onnx), and nothing else is said
    assert len(notes) == 2 and "not quantized" in notes[1] and "'enc'" in notes[1]


def test_plan_module_timeloop_evaluate_and_hardware_commands(service: str, tmp_path: Path) -> None:
    import io
    import tarfile

    wl = tmp_path / "one.yaml"
    wl.write_text(yaml.safe_dump([{"name": "mm2", "op": "matmul", "M": 32, "K": 48, "N": 20}]))
    out = tmp_path / "plans.json"
    r = run("schedule", "--hw", "gemmini-16x16", "--workload", str(wl), "--time-limit", "1", "--out", str(out),
            url=service)
    assert r.returncode == 0, r.stderr
    key = json.loads(out.read_text())["plans"][0]["key"]
    r = run("plan", key, "--nest", url=service)
    assert r.returncode == 0 and "baseline: gemmini-auto" in r.stdout and "legend: " in r.stdout
    tar = tmp_path / "mm3.tar"
    r = run("module", key, "--name", "mm3", "--format", "tar", "--out", str(tar), url=service)
    assert r.returncode == 0, r.stderr
    with tarfile.open(fileobj=io.BytesIO(tar.read_bytes())) as tf:
        assert "mm3/mm3.c" in tf.getnames()
    r = run("module", key, "--format", "c", url=service)
    assert r.returncode == 0 and "void mm2(" in r.stdout
    r = run("module", key, "--format", "tar", url=service)
    assert r.returncode == 2 and "--out" in r.stderr
    tl = tmp_path / "tl.yaml"
    r = run("timeloop", key, "--bundle", "--out", str(tl), url=service)
    assert r.returncode == 0 and {"architecture", "problem", "mapping"} <= set(yaml.safe_load(tl.read_text()))
    r = run("evaluate", "--hw", "gemmini-16x16", "--mapping", str(out), "--json", url=service)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["metrics"]["cycles"] == json.loads(out.read_text())["plans"][0]["metrics"]["cycles"]
    r = run("hardware", "--json", url=service)
    assert r.returncode == 0 and any(h["name"] == "simba" for h in json.loads(r.stdout))
    r = run("plan", "0" * 64, url=service)
    assert r.returncode == 2 and "no plan" in r.stderr


def test_the_readme_sdk_example_runs(service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python example, as written, against a live service (in a scratch directory holding the
    example model, as `examples/make_example_model.py` writes it)."""
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text()
    section = readme[readme.index("## The client: SDK"):]
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    assert "TileplanClient" in code
    model = tmp_path / "examples" / "models" / "small_cnn_int8.onnx"
    model.parent.mkdir(parents=True)
    r = subprocess.run([sys.executable, str(repo / "examples" / "make_example_model.py"), "--out", str(model)],
                       capture_output=True, text=True, timeout=300, env=env())
    assert r.returncode == 0, r.stderr
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(code.replace("http://127.0.0.1:8000", service), "README.md", "exec"), scope)
    compiled = scope["compiled"]
    assert compiled.status == "done" and compiled.ops and (tmp_path / "small_cnn_int8.tar").stat().st_size > 0  # type: ignore[attr-defined]
    result, done = scope["result"], scope["done"]
    assert result.plans[0].name == "qkv" and result.summary.baseline_mapper == "gemmini-auto"  # type: ignore[attr-defined]
    assert "void qkv(" in scope["c_source"] and "mapping" in scope["timeloop_yaml"]  # type: ignore[operator]
    assert scope["check"].valid and done.plans[0].metrics.cycles > 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("args, named", [
    (["--retries", "-1", "health"], "--retries"),
    (["--request-timeout", "nan", "health"], "--request-timeout"),
    (["--request-timeout", "0", "health"], "--request-timeout"),
    (["plans", "--limit", "0"], "--limit"),
    (["schedule", "--hw", "gemmini-16x16", "--timeout", "-5", "--workload", "w.yaml"], "--timeout"),
    (["schedule"], "--hw"),
])
def test_bad_numbers_and_usage_are_one_line_exit_2(args: list[str], named: str) -> None:
    """`--retries -1` and `--request-timeout nan` ended in tracebacks (AssertionError: unreachable, ValueError from
    the socket), `--limit 0` reached the service; argparse's errors printed a usage block. Now: one line, exit 2,
    nothing sent (the URL below has no server)."""
    r = run(*args, url=f"http://127.0.0.1:{free_port()}")
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tileplan-client: error: ") and named in lines[0], r.stderr
