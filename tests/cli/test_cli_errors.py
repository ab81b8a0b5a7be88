"""Every mistake on the command line is one line naming the argument and the reason, exit 2, found before long
work starts (issue: a fresh machine; tracebacks and exit 1 came out of these before)."""

from __future__ import annotations

import io
import json
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest

from tileplan.cli import main

REPO = Path(__file__).resolve().parents[2]
MM = "matmul:M=64,K=64,N=64"


def err_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Runs the command, asserts exit 2 and one line on stderr naming no traceback; returns that line."""
    code = main(list(argv))
    _, err = capsys.readouterr()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tileplan: error: "), err
    return lines[0]


def artifact(tmp_path: Path, inputs: list[str]) -> Path:
    """A tar shaped like `tileplan compile`'s (its manifest names the inputs); never built: the checks come first."""
    manifest = {"inputs": [{"name": n, "dtype": "int8", "shape": [1, 4]} for n in inputs], "outputs": []}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("m/tileplan.json", json.dumps(manifest).encode()), ("m/Makefile", b"all:\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "m.tar"
    path.write_bytes(buf.getvalue())
    return path


def test_compile_out_that_is_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    existing = tmp_path / "README.md"
    existing.write_text("x")
    line = err_of(capsys, "compile", str(existing), "--hw", "gemmini-16x16", "--out", str(existing))
    assert "out:" in line and "not a directory" in line


def test_compile_out_that_cannot_be_created(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    line = err_of(capsys, "compile", str(model), "--hw", "gemmini-16x16", "--out", "/proc/nope/")
    assert "out:" in line and "/proc/nope" in line


def test_compile_plans_db_given_a_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    line = err_of(capsys, "compile", str(model), "--hw", "gemmini-16x16", "--out", str(tmp_path / "o"),
                  "--plans-db", "plans.db")
    assert "plans_db:" in line and "sqlite:///plans.db" in line


def test_codegen_out_in_a_missing_directory(capsys: pytest.CaptureFixture[str]) -> None:
    line = err_of(capsys, "codegen", "--hw", "gemmini-16x16", "--layer", MM, "--out", "/nonexistent/mm.c")
    assert "out:" in line and "does not exist" in line


def test_schedule_out_checked_before_planning(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = err_of(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", MM, "--out", str(tmp_path / "no" / "p.json"))
    assert "out:" in line
    line = err_of(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", MM, "--out", str(tmp_path))
    assert "is a directory" in line


def test_run_output_checked_before_the_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    x = tmp_path / "in.npy"
    np.save(x, np.zeros((1, 4), np.int8))
    line = err_of(capsys, "run", str(artifact(tmp_path, ["x"])), "--input", str(x), "--output", "/nonexistent/o.npy")
    assert "output:" in line and "does not exist" in line


def test_run_unknown_input_name_lists_the_inputs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    x = tmp_path / "in.npy"
    np.save(x, np.zeros((1, 4), np.int8))
    line = err_of(capsys, "run", str(artifact(tmp_path, ["input"])), "--input", f"wrong={x}")
    assert "input.wrong" in line and "its inputs are input" in line


def test_serve_db_given_a_path(capsys: pytest.CaptureFixture[str]) -> None:
    line = err_of(capsys, "serve", "--db", "plans.db", "--port", "1")
    assert "db:" in line and "not a database URL" in line


def test_layer_bounds_and_time_limit_are_the_apis(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    line = err_of(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", "matmul:M=100000000,K=100000000,N=100000000")
    assert "layer.M" in line and "max_layer_extent" in line
    line = err_of(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", MM, "--time-limit", "10000")
    assert "time_limit" in line and "at most 120" in line
    from tileplan.settings import get_settings

    monkeypatch.setenv("TILEPLAN_MAX_LAYER_EXTENT", "32")  # the service's setting is the CLI's too
    get_settings.cache_clear()
    try:
        line = err_of(capsys, "codegen", "--hw", "gemmini-16x16", "--layer", MM)
    finally:
        monkeypatch.delenv("TILEPLAN_MAX_LAYER_EXTENT")
        get_settings.cache_clear()
    assert "over this server's bound of 32" in line


def test_tensor_bound_is_the_apis_and_the_error_says_how_to_raise_it(capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """A model with a tensor over max_tensor_elements is refused before any work, and TILEPLAN_MAX_TENSOR_ELEMENTS
    sets the CLI's bound as it sets the service's (VGG's 102,760,448-element classifier weight was over the old
    default 2^26, and the CLI ignored the setting)."""
    from onnx import TensorProto, helper, save

    from tileplan.settings import get_settings

    w = helper.make_tensor("w", TensorProto.FLOAT, [40, 50], np.ones(2000, np.float32))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 50])], [w])
    path = tmp_path / "m.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    monkeypatch.setenv("TILEPLAN_MAX_TENSOR_ELEMENTS", "1000")
    get_settings.cache_clear()
    try:
        line = err_of(capsys, "compile", str(path), "--hw", "gemmini-16x16", "--out", str(tmp_path / "out"))
    finally:
        monkeypatch.delenv("TILEPLAN_MAX_TENSOR_ELEMENTS")
        get_settings.cache_clear()
    assert "2000 elements" in line and "bound of 1000" in line and "TILEPLAN_MAX_TENSOR_ELEMENTS" in line
    line = err_of(capsys, "compile", str(path), "--hw", "gemmini-16x16", "--out", str(tmp_path / "out"))
    assert "bound" not in line and "float" in line  # past the (default) bound: the next check, a float model


def test_option_typos_are_refused_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    line = err_of(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", MM, "--objective", "latncy=1")
    assert "objective.latncy" in line and "did you mean 'latency'" in line


def test_evaluate_layer_by_plan_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["schedule", "--hw", "gemmini-16x16", "--no-baseline", "--json", "--time-limit", "2",
                 "--layer", "matmul:name=proj,M=64,K=64,N=64", "--layer", "matmul:name=head,M=64,K=128,N=32"]) == 0
    plans = tmp_path / "plans.json"
    plans.write_text(capsys.readouterr().out)
    assert main(["evaluate", "--hw", "gemmini-16x16", "--mapping", str(plans), "--layer", "head"]) == 0
    assert capsys.readouterr().out.startswith("valid:")
    line = err_of(capsys, "evaluate", "--hw", "gemmini-16x16", "--mapping", str(plans), "--layer", "conv2")
    assert "'conv2' is neither a layer spec" in line and "its plans: proj, head" in line


def test_calibration_scores_constant_runs_without_warnings() -> None:
    from tileplan.cost.calibrate import rank_correlation, score

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rank_correlation(np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0])) == 0.0
        m = score(np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 2.0, 2.0, 2.0]), ["a", "a", "a", "b"])
    assert m.spearman == 0.0 and m.within_layer_spearman_median == 0.0


def test_serve_refuses_a_public_address_without_tokens(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from tileplan.cli import _loopback
    from tileplan.settings import get_settings

    monkeypatch.delenv("TILEPLAN_TOKENS", raising=False)
    get_settings.cache_clear()
    try:
        line = err_of(capsys, "serve", "--host", "0.0.0.0", "--port", "1")
    finally:
        get_settings.cache_clear()
    assert "host:" in line and "TILEPLAN_TOKENS" in line and "--allow-anonymous" in line
    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("::") and not _loopback("example.org")


def test_compile_refuses_a_bad_model_before_the_plan_store_and_tvm(tmp_path: Path) -> None:
    """A file that is not ONNX is refused before SQLAlchemy (the plan store) or TVM is imported (issue 24: a bad
    model is refused in under a second)."""
    import subprocess
    import sys

    bad = tmp_path / "m.onnx"
    bad.write_bytes(b"not an onnx model")
    code = ("import sys\nfrom tileplan.cli import main\n"
            f"sys.argv = ['tileplan', 'compile', {str(bad)!r}, '--hw', 'gemmini-16x16', '--out', {str(tmp_path)!r}, "
            f"'--plans-db', 'sqlite:///{tmp_path}/p.db']\n"
            "rc = main()\nprint(rc, 'sqlalchemy' in sys.modules, 'tvm' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.stdout.split() == ["2", "False", "False"], run.stderr


def test_summary_line_of_an_all_host_compile_says_there_is_no_library_tiling() -> None:
    """A model with nothing on the accelerator has no library tiling to compare with: the summary says so (it
    printed 'library tiling nan')."""
    from tileplan.cli import _summary_table
    total = {"accelerator_ops": 0, "ops": 3, "accelerator_mac_share": 0.0, "cycles_emulated": 0, "cycles_model": 0,
             "baseline_cycles_model": None}
    line = _summary_table({"ops": [], "total": total}).splitlines()[-1]
    assert "nan" not in line
    assert line.endswith("(no op on the accelerator: no library tiling to compare)")
    with_ops = {**total, "accelerator_ops": 2, "cycles_model": 100, "baseline_cycles_model": 150}
    assert _summary_table({"ops": [], "total": with_ops}).splitlines()[-1].endswith("(library tiling 150)")
    no_baseline = {**with_ops, "baseline_cycles_model": None}
    assert _summary_table({"ops": [], "total": no_baseline, "options": {"baseline": False}}).splitlines()[-1].endswith(
        "(library tiling not costed: --no-baseline)")


@pytest.mark.parametrize("argv, named", [
    (["compile", "m.onnx", "--hw", "gemmini-16x16", "--out", "o", "--jobs", "0"], "jobs"),
    (["compile", "m.onnx", "--hw", "gemmini-16x16", "--out", "o", "--jobs", "100000"], "jobs"),
    (["serve", "--port", "99999"], "port"),
    (["serve", "--workers", "0"], "workers"),
    (["worker", "--concurrency", "-1"], "concurrency"),
    (["compile", "m.onnx", "--hw", "gemmini-16x16"], "out"),  # a missing argument: one line too, no usage block
    (["compile", "m.onnx", "--hw", "gemmini-16x16", "--out", "o", "--mapper", "nope"], "mapper"),
])
def test_a_bad_count_or_port_is_one_line_before_any_work(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                          named: str) -> None:
    """`--jobs 100000` compiled (a pool that size on a cold cache), `--workers 0` served a queue nobody runs and
    `--port 99999` bound another port; argparse's own errors printed a usage block above the line."""
    line = err_of(capsys, *argv)
    assert named in line, line
