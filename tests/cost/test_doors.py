"""One Gemmini model behind every door (issue 13): the calibration and the benches, the Python API, the CLI and
POST /evaluate give the same cycles for the same hardware, layer and mapping — FireSim runs sent as a user of
DOSA would send them (its Timeloop-style architecture YAML inline, the layer, the mapping converted)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tileplan import cli
from tileplan.api.app import create_app
from tileplan.cost import CostParams
from tileplan.cost.calibrate import feature_matrix, predict
from tileplan.cost.firesim import FireSimRun, load_artifact, load_rows
from tileplan.hardware.catalog import load_descriptor
from tileplan.plan import evaluate
from tileplan.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
RANDOM = ROOT / "bench" / "data" / "firesim" / "gemmini_firesim_random_mappings.csv"
ARTIFACT = ROOT / "bench" / "data" / "dosa_artifact"


@pytest.fixture(scope="module")
def runs() -> list[FireSimRun]:
    """A DOSA mapping and the library's tiler on a 16x16 configuration (a conv and a matmul each), and random
    mappings on the 128x128 one (a conv, a matmul on a small software array, a padded conv)."""
    art = load_artifact(ARTIFACT / "dnn_resnet50.csv") + load_artifact(ARTIFACT / "dnn_bert.csv")
    rows = load_rows(RANDOM)
    pick = [
        next(r for r in art if r.kind == "mapping" and r.op == "conv" and r.layer_key.startswith("C64_K64_P56")),
        next(r for r in art if r.kind == "library" and r.op == "conv" and r.layer_key.startswith("C3_K64")),
        next(r for r in art if r.kind == "mapping" and r.op == "matmul"),
        next(r for r in art if r.kind == "library" and r.op == "matmul"),
        rows[1], rows[1105], rows[3],
    ]
    return pick


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("doors"), solver_processes=1))
    with TestClient(app) as c:
        yield c


def _layer_spec(run: FireSimRun) -> str:
    doc = run.layer.model_dump(mode="json", exclude={"count", "name", "dtype", "acc_dtype"})
    op = doc.pop("op")
    parts = []
    for k, v in doc.items():
        parts.append(f"{k}={'x'.join(map(str, v)) if isinstance(v, list) else v}")
    return f"{op}:" + ",".join(parts)


def test_every_door_gives_the_same_cycles(runs, client, tmp_path, capsys) -> None:
    bench = predict(feature_matrix(runs), CostParams())
    for i, run in enumerate(runs):
        hw = load_descriptor(run.hardware_yaml, fmt="timeloop", name=run.config)
        library = evaluate(run.layer, hw, run.mapping)
        assert library.valid and library.metrics is not None, library.violations
        api = client.post("/evaluate", json=run.request())
        assert api.status_code == 200, api.text
        hw_file = tmp_path / f"hw{i}.yaml"
        hw_file.write_text(run.hardware_yaml)
        map_file = tmp_path / f"map{i}.json"
        map_file.write_text(json.dumps(run.mapping.model_dump(mode="json")))
        capsys.readouterr()
        code = cli.main(["evaluate", "--hw", str(hw_file), "--layer", _layer_spec(run), "--mapping", str(map_file),
                         "--json"])
        assert code == 0
        from_cli = json.loads(capsys.readouterr().out)
        got = {
            "bench / calibration": float(bench[i]),
            "Python API": library.metrics.cycles,
            "POST /evaluate": api.json()["metrics"]["cycles"],
            "CLI": from_cli["metrics"]["cycles"],
        }
        assert max(got.values()) == pytest.approx(min(got.values()), rel=1e-12), (run.source, run.index, got)
        # and the interval the answer carries contains its own prediction
        lo, hi = api.json()["metrics"]["cycles_interval"]
        assert lo <= got["POST /evaluate"] <= hi


def test_a_bare_dosa_mapping_is_costed_as_the_library_runs_it(runs, client) -> None:
    """What issue 13 found on the user path: a bare mapping (no double_buffered, no executor) overlaps like the
    library, loads no bias the layer does not have, uses the calibrated DRAM rate, and runs on the array its
    spatial factors occupy."""
    run = runs[0]
    body = run.request()
    assert body["mapping"]["double_buffered"] == {} and body["mapping"]["executor"] is None
    m = client.post("/evaluate", json=body).json()["metrics"]
    assert m["model"] == "gemmini" and m["executor"] == "library"
    declared = {**body, "mapping": {**body["mapping"], "double_buffered": {"Scratchpad": ["I", "W"], "Accumulator": ["O"]}}}
    assert client.post("/evaluate", json=declared).json()["metrics"]["cycles"] == m["cycles"]
    with_bias = {**body, "layer": {**body["layer"], "bias": True}}
    assert client.post("/evaluate", json=with_bias).json()["metrics"]["cycles"] > m["cycles"]
    assert any("nominal 8 B/cycle is not used" in n for n in m["notes"])
