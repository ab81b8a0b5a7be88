"""Whole models through the SDK (`TileplanClient.compile`, its async twin) and `tileplan-client compile`, against
a real service: typed results, the artifact, notes about host-side ops at every door, errors naming the node."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from service_procs import env, start_api

from tileplan.frontend import zoo
from tileplan_client import AsyncTileplanClient, BadInput, TileplanClient

HW = "gemmini-16x16"
OPTIONS = {"time_limit_s": 2}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    api = start_api(tmp_path_factory.mktemp("compile-sdk"), solvers=1, wait_limit_s="300")
    try:
        yield api.url
    finally:
        api.stop()


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "cnn_small.onnx"
    path.write_bytes(zoo.build("cnn_small", "qdq", size=8))
    return path


@pytest.fixture(scope="module")
def compiled(service: str, model_file: Path) -> dict:
    with TileplanClient(service, timeout=300) as client:
        c = client.compile(HW, model_file, options=OPTIONS)
        return {"compile": c, "artifact": client.artifact(c)}


def _reverse_model() -> bytes:
    from onnx import TensorProto, helper

    g = zoo._Graph(0)
    y = g.conv("x", 3, 4, name="conv")
    g.nodes.append(helper.make_node("Bernoulli", [y], ["rev"], name="coin"))
    graph = helper.make_graph(g.nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("rev", TensorProto.FLOAT, [1, 4, 8, 8])], g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return zoo.quantize(m, "qdq", zoo.random_calibration(m, 4, 0))


def test_compile_returns_a_typed_summary_and_the_artifact(service: str, model_file: Path, compiled: dict) -> None:
    c = compiled["compile"]
    assert c.status == "done" and c.finished and c.model and c.hardware == HW
    accel = [o for o in c.ops if o.where == "accelerator" and o.plan_key]
    assert accel and all(o.cycles_emulated and o.cycles_model and o.speedup for o in accel)
    assert c.host_ops and all(o.reason for o in c.host_ops)  # pooling stays on the host, with the reason
    assert any("on the host" in n for n in c.notes)
    assert c.total["accelerator_ops"] == len(accel) and c.summary is not None
    with tarfile.open(fileobj=io.BytesIO(compiled["artifact"])) as tf:
        assert {"model.c", "tileplan_model.h", "Makefile"} <= {Path(m.name).name for m in tf.getmembers()}
    with TileplanClient(service) as client:
        again = client.compile(HW, model_file.read_bytes(), options=OPTIONS)  # bytes or a path: the same compile
        assert again.id == c.id and again.ops == c.ops
        assert client.get_compile(c.id).raw == again.raw
        page, _ = client.compiles(hardware=HW, status="done")
        assert c.id in {x.id for x in page}
        plan = client.plan(accel[0].plan_key)  # the compile's plans are in the plan cache
        assert plan.hardware == HW


def test_async_twin(service: str, model_file: Path, compiled: dict, tmp_path: Path) -> None:
    async def run() -> None:
        async with AsyncTileplanClient(service) as client:
            c = await client.compile(HW, str(model_file), options=OPTIONS)
            assert c.id == compiled["compile"].id
            path = await client.save_artifact(c, tmp_path / "m.tar")
            assert Path(path).read_bytes() == compiled["artifact"]
            items, _ = await client.compiles(limit=5)
            assert c.id in {x.id for x in items}

    asyncio.run(run())


def test_models_that_cannot_be_compiled(service: str) -> None:
    with TileplanClient(service, retries=0) as client:
        with pytest.raises(BadInput) as e:
            client.compile(HW, b"not a model at all")
        assert e.value.status == 422 and e.value.detail[0]["loc"] == ["body", "model"]
        with pytest.raises(BadInput) as e:
            client.compile(HW, zoo.build("mlp", "float"))
        assert "float model" in str(e.value) and "quantize" in str(e.value)
        bad = _reverse_model()
        with pytest.raises(BadInput) as e:  # waited: the service answers 422 naming the node
            client.compile(HW, bad, options=OPTIONS)
        assert e.value.detail[0]["loc"] == ["body", "model", "coin"]
        with pytest.raises(BadInput) as e:  # not waited for: refused all the same, before anything is stored
            client.submit_compile(HW, bad, options={"time_limit_s": 3})
        assert e.value.detail[0]["loc"] == ["body", "model", "coin"]


def run_cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tileplan_client.cli", "--url", url, "--retries", "0", *args],
                          capture_output=True, text=True, env=env(), timeout=600)


def test_cli_compile_writes_the_program_and_tells_the_notes(service: str, model_file: Path, compiled: dict,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "build"
    r = run_cli("compile", str(model_file), "--hw", HW, "--out", str(out), "--time-limit", "2", url=service)
    assert r.returncode == 0, r.stderr
    assert (out / "cnn_small.tar").read_bytes() == compiled["artifact"]
    summary = json.loads((out / "cnn_small.summary.json").read_text())
    assert summary == compiled["compile"].summary
    doc = json.loads(r.stdout)  # not a terminal: one line of JSON
    assert doc["id"] == compiled["compile"].id and doc["total"]["accelerator_ops"] > 0
    assert "note: on the host:" in r.stderr  # notes about host-side ops reach the client's door
    r = run_cli("compile", str(model_file), "--hw", HW, "--out", str(out), "--time-limit", "2", "--json", url=service)
    assert r.returncode == 0 and json.loads(r.stdout)["summary"]["ops"] == summary["ops"]
    r = run_cli("compiles", "--hardware", HW, "--json", url=service)
    assert compiled["compile"].id in {c["id"] for c in json.loads(r.stdout)["compiles"]}


def test_cli_compile_errors_exit_2_with_one_line(service: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    for args in ((str(bad), "--hw", HW), (str(tmp_path / "missing.onnx"), "--hw", HW),
                 (str(bad), "--hw", HW, "--input-shape", "x=1xA")):
        r = run_cli("compile", *args, "--out", str(tmp_path / "o"), url=service)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("error:"), r.stderr
    rev = tmp_path / "rev.onnx"
    rev.write_bytes(_reverse_model())
    r = run_cli("compile", str(rev), "--hw", HW, "--out", str(tmp_path / "o"), "--time-limit", "2", url=service)
    assert r.returncode == 2 and "coin" in r.stderr and "Bernoulli" in r.stderr


def test_sdk_and_cli_take_calibration_data(service: str, tmp_path: Path) -> None:
    float_model = tmp_path / "mlp_float.onnx"
    float_model.write_bytes(zoo.build("mlp", "float"))
    calib = tmp_path / "calib.npz"
    np.savez(calib, input=np.random.default_rng(9).standard_normal((2, 4, 64)).astype(np.float32))
    with TileplanClient(service, timeout=300) as client:
        c = client.compile(HW, float_model, quantize=True, calibration=calib, options=OPTIONS)
        assert any("2 given calibration input(s)" in n for n in c.notes)
    r = run_cli("compile", str(float_model), "--hw", HW, "--out", str(tmp_path / "o"), "--calibration", str(calib),
                url=service)  # calibration data without --quantize
    assert r.returncode == 2 and "calibration" in r.stderr and "quantize" in r.stderr, r.stderr
    r = run_cli("compile", str(float_model), "--hw", HW, "--out", str(tmp_path / "o"), "--quantize",
                "--calibration", str(calib), "--time-limit", "2", url=service)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["id"] == c.id and "note: float model quantized by Tileplan" in r.stderr


def test_sdk_and_cli_delete_compiles(service: str) -> None:
    """Deleting a compile you asked for (not waited for: a queued or running one is stopped)."""
    from tileplan_client import NotFound

    model = zoo.build("mlp", "qdq")
    with TileplanClient(service, timeout=300) as client:
        first = client.submit_compile(HW, model, options={"time_limit_s": 1, "emulate": False})
        client.delete_compile(first)
        with pytest.raises(NotFound):
            client.get_compile(first)
        with pytest.raises(NotFound):
            client.delete_compile(first)
        again = client.submit_compile(HW, model, options={"time_limit_s": 1, "emulate": False})
        assert again.id == first.id  # the same request, stored again
    r = run_cli("delete-compile", again.id, url=service)
    assert r.returncode == 0 and f"deleted {again.id}" in r.stderr, r.stderr
    assert run_cli("delete-compile", again.id, url=service).returncode == 2  # no such compile: bad input
