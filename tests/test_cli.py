"""The `tileplan` command: exit codes, one-line errors, JSON plans in the contract shape."""

import json
from pathlib import Path

import pytest
import yaml

from tileplan.cli import main

LAYER = "conv2d:in_channels=64,out_channels=64,in_h=56,in_w=56,kernel=3,padding=1"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_schedule_json_is_contract_plan(capsys):
    code, out, _ = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", LAYER, "--json", "--no-baseline")
    assert code == 0
    (plan,) = json.loads(out)
    assert plan["mapper"] == "cosa" and plan["hardware"] == "gemmini-16x16"
    assert plan["layer"]["dims"] == {"N": 1, "G": 1, "K": 64, "C": 64, "P": 56, "Q": 56, "R": 3, "S": 3}
    assert [lv["name"] for lv in plan["mapping"]["levels"]] == ["Registers", "Accumulator", "Scratchpad", "DRAM"]
    for field in ("cycles", "energy_pj", "utilization", "dram_bytes", "ideal_cycles", "bound"):
        assert field in plan["metrics"]
    assert set(plan["solver"]) >= {"status", "seconds", "mip_gap", "objective"}
    assert len(plan["key"]) == 64 and plan["links"]["self"] == f"/plans/{plan['key']}"


def test_schedule_table(capsys):
    code, out, _ = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", LAYER, "--layer",
                       "matmul:M=128,K=768,N=768", "--no-baseline")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["layer", "cycles", "baseline", "speedup"]
    assert lines[-1].startswith("total (x count)")


def test_bad_layer_is_one_line_and_exit_2(capsys):
    code, out, err = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", "conv2d:in_channels=0,out_channels=4,in_h=8,in_w=8")
    assert code == 2 and out == ""
    assert err.strip() == "tileplan: error: in_channels: Input should be greater than 0"


def test_unknown_hardware(capsys):
    code, _, err = run(capsys, "schedule", "--hw", "tpu-v9", "--layer", "matmul:M=1,K=1,N=1")
    assert code == 2 and "unknown hardware 'tpu-v9'" in err and len(err.strip().splitlines()) == 1


def test_hardware_list_show_validate(capsys, tmp_path):
    code, out, _ = run(capsys, "hardware", "list")
    assert code == 0 and "gemmini-16x16" in out and "simba" in out
    code, out, _ = run(capsys, "hardware", "show", "gemmini-chip")
    assert code == 0 and "name: gemmini-chip" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(out.replace("capacity: 65536", "capacity: 64 KX"))
    code, _, err = run(capsys, "hardware", "validate", str(bad))
    assert code == 2 and "memory_levels[2].capacity: '64 KX' is not a size" in err
    good = tmp_path / "good.yaml"
    good.write_text(out)
    code, out2, _ = run(capsys, "hardware", "validate", str(good))
    assert code == 0 and "valid descriptor 'gemmini-chip'" in out2


def test_evaluate_roundtrip_and_violations(capsys, tmp_path):
    code, out, _ = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", "matmul:M=64,K=64,N=64", "--json", "--no-baseline")
    plan = json.loads(out)[0]
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    code, out, _ = run(capsys, "evaluate", "--hw", "gemmini-16x16", "--layer", "matmul:M=64,K=64,N=64", "--mapping", str(f), "--json")
    assert code == 0
    assert json.loads(out)["metrics"]["cycles"] == pytest.approx(plan["metrics"]["cycles"])
    code, out, _ = run(capsys, "evaluate", "--hw", "gemmini-16x16", "--layer", "matmul:M=64,K=64,N=128", "--mapping", str(f))
    assert code == 3 and "factors of K multiply to 64, bound is 128" in out


def test_codegen_emits_c_and_runs_bit_exact(capsys, tmp_path):
    out = tmp_path / "k.c"
    code, _, err = run(capsys, "codegen", "--hw", "gemmini-16x16", "--layer", "matmul:M=32,K=48,N=20",
                       "--out", str(out), "--run")
    assert code == 0, err
    assert '#include "gemmini.h"' in out.read_text()
    assert "bit-exact" in err
    code, _, err = run(capsys, "codegen", "--hw", "gemmini-16x16", "--layer", "matmul:M=4,K=4,N=4", "--format", "tar")
    assert code == 2 and "a tar archive needs --out FILE" in err


def test_calibrate_fits_and_writes_params(capsys, tmp_path):
    """`tileplan calibrate` on a small CSV (a slice of the FireSim data) and one artifact file: it runs, reports
    both data sets and writes loadable parameters."""
    import csv as _csv

    from tileplan.cost.params import CostParams

    data = Path(__file__).resolve().parents[1] / "bench" / "data" / "firesim" / "gemmini_firesim_random_mappings.csv"
    rows = list(_csv.DictReader(data.open()))
    small = tmp_path / "small.csv"
    with small.open("w", newline="") as f:
        w = _csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        # a few layer shapes, all their runs (cross-validation holds out one shape at a time)
        keep = {rows[i]["prob.C"] + rows[i]["prob.K"] + rows[i]["prob.P"] for i in (0, 100, 400, 900)}
        w.writerows(r for r in rows if r["prob.C"] + r["prob.K"] + r["prob.P"] in keep)
    artifact = Path(__file__).resolve().parents[1] / "bench" / "data" / "dosa_artifact" / "dnn_resnet50.csv"
    out = tmp_path / "params.yaml"
    assert main(["calibrate", "--data", str(small), "--artifact", str(artifact), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "random mappings" in text and "DOSA artifact (16x16)" in text
    fitted = yaml.safe_load(out.read_text())["cost_params"]
    CostParams(**fitted)  # every fitted value is within the parameter's bounds
    assert set(fitted) >= {"dram_efficiency", "overlap_loss", "overlap_loss_matmul"}


# -- defects of issue 14: every error one line and exit 2; `schedule --json` output accepted by `evaluate` --------


def test_codegen_on_hardware_without_a_code_generator_is_one_line_and_exit_2(capsys):
    code, out, err = run(capsys, "codegen", "--hw", "simba", "--layer", "matmul:M=32,K=64,N=32", "--time-limit", "1")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "no code generator for simba" in err


def test_codegen_refuses_eyeriss_for_the_right_reason(capsys):
    code, _, err = run(capsys, "codegen", "--hw", "eyeriss-os", "--layer", "matmul:M=32,K=64,N=32", "--time-limit", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no code generator for eyeriss-os" in err and "square" not in err


@pytest.mark.parametrize("flag", ["--data", "--artifact"])
def test_calibrate_with_a_missing_file_is_one_line_and_exit_2(capsys, tmp_path, flag):
    data = Path(__file__).resolve().parents[1] / "bench" / "data" / "firesim" / "gemmini_firesim_random_mappings.csv"
    args = {"--data": str(data)}
    args[flag] = str(tmp_path / "nowhere.csv")
    argv = ["calibrate"] + [x for kv in args.items() for x in kv]
    code, out, err = run(capsys, *argv)
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [f"tileplan: error: {flag[2:]}: cannot read {tmp_path / 'nowhere.csv'}: "
                                        "No such file or directory"]


def test_evaluate_reads_the_output_of_schedule_json(capsys, tmp_path):
    layers = ["matmul:M=64,K=64,N=64", "conv2d:in_channels=16,out_channels=32,in_h=8,in_w=8,kernel=3,padding=1"]
    code, out, _ = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", layers[0], "--layer", layers[1],
                       "--json", "--no-baseline", "--time-limit", "2")
    assert code == 0
    plans = json.loads(out)
    f = tmp_path / "plans.json"
    f.write_text(out)
    # the layer picks its plan from the file
    for layer, plan in zip(layers, plans):
        code, out, err = run(capsys, "evaluate", "--hw", "gemmini-16x16", "--layer", layer, "--mapping", str(f),
                             "--json")
        assert code == 0, err
        assert json.loads(out)["metrics"]["cycles"] == pytest.approx(plan["metrics"]["cycles"])
    # without --layer, every plan of the file with its own layer
    code, out, err = run(capsys, "evaluate", "--hw", "gemmini-16x16", "--mapping", str(f), "--json")
    assert code == 0, err
    assert [e["metrics"]["cycles"] for e in json.loads(out)] == pytest.approx([p["metrics"]["cycles"] for p in plans])
    # a layer no plan of the file is for: one line, exit 2
    code, _, err = run(capsys, "evaluate", "--hw", "gemmini-16x16", "--layer", "matmul:M=8,K=8,N=8", "--mapping", str(f))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no plan in" in err


def test_timeloop_mapping_export_folds_groups_only_when_asked(capsys, tmp_path):
    """The export passed the Problem where `fold_groups` (a bool) goes, so a grouped conv was folded unasked. Unfolded,
    G is a dimension of the exported map."""
    layer = "conv2d:in_channels=32,out_channels=32,in_h=8,in_w=8,kernel=3,padding=1,groups=32"
    code, out, _ = run(capsys, "schedule", "--hw", "simba", "--layer", layer, "--json", "--no-baseline",
                       "--time-limit", "2")
    assert code == 0
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(json.loads(out)[0]))
    argv = ["timeloop", "mapping", "--hw", "simba", "--layer", layer, "--mapping", str(f)]
    code, out, err = run(capsys, *argv)
    assert code == 0 and "folded" not in err and "G=" in out
    code, out, err = run(capsys, *argv, "--fold-groups")
    assert code == 0 and "folded into N" in err and "mapping:" in out


def test_schedule_names_the_baseline_mapper(capsys):
    code, out, _ = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", "matmul:M=32,K=64,N=32",
                       "--time-limit", "2")
    assert code == 0 and "baseline: gemmini-auto, Gemmini's hand-written tiling" in out
    code, out, _ = run(capsys, "schedule", "--hw", "simba", "--layer", "matmul:M=32,K=64,N=32", "--time-limit", "2")
    assert code == 0 and "baseline: random, the best of random legal mappings" in out


def test_out_and_json_on_every_command(capsys, tmp_path):
    plans = tmp_path / "plans.json"
    code, out, err = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", "matmul:M=32,K=64,N=32",
                         "--time-limit", "2", "--json", "--out", str(plans))
    assert code == 0 and out == "" and f"wrote {plans}" in err
    assert json.loads(plans.read_text())[0]["baseline"]["mapper"] == "gemmini-auto"
    table = tmp_path / "plans.txt"
    code, out, _ = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", "matmul:M=32,K=64,N=32",
                       "--time-limit", "2", "--out", str(table))
    assert code == 0 and out == "" and table.read_text().startswith("layer")
    code, out, _ = run(capsys, "hardware", "list", "--json")
    assert code == 0 and {"name": "simba"}.items() <= next(h for h in json.loads(out) if h["name"] == "simba").items()
    code, out, _ = run(capsys, "hardware", "show", "simba", "--json")
    assert code == 0 and json.loads(out)["name"] == "simba"
    code, out, _ = run(capsys, "evaluate", "--hw", "gemmini-16x16", "--mapping", str(plans), "--json")
    assert code == 0 and json.loads(out)["valid"] is True
    code, out, _ = run(capsys, "timeloop", "arch", "--hw", "gemmini-16x16", "--json")
    assert code == 0 and "architecture" in json.loads(out)
    arch = tmp_path / "arch.yaml"
    code, out, _ = run(capsys, "timeloop", "arch", "--hw", "gemmini-16x16", "--out", str(arch))
    assert code == 0 and out == "" and "architecture" in yaml.safe_load(arch.read_text())
    code, out, _ = run(capsys, "timeloop", "mapping", "--hw", "gemmini-16x16", "--mapping", str(plans), "--bundle")
    assert code == 0 and {"architecture", "problem", "mapping"} <= set(yaml.safe_load(out))
    code, _, err = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", "matmul:M=32,K=64,N=32",
                       "--out", str(tmp_path / "no" / "such" / "dir.json"))
    assert code == 2 and err.splitlines()[-1].startswith("tileplan: error: out: cannot write")  # (after any notes)


def test_loop_nest_view_beside_the_baseline_with_a_legend(capsys):
    code, out, _ = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer",
                       "conv2d:name=c1,in_channels=16,out_channels=32,in_h=8,in_w=8,kernel=3,padding=1",
                       "--time-limit", "2", "--nest")
    assert code == 0
    nest = out[out.index("== c1"):]
    head = nest.splitlines()[1]
    assert head.startswith("plan") and head.rstrip().endswith("baseline: gemmini-auto")
    assert "DRAM" in nest and "<< compute >>" in nest and "for " in nest and "par-for " in nest
    assert "keeps" in nest
    assert "legend: " in nest and "K output channels" in nest and "R filter rows" in nest


def test_model_notes_reach_the_cli(capsys, tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent / "service"))
    from test_answers import model_with_a_conv_transpose

    model = tmp_path / "up.onnx"
    model.write_bytes(model_with_a_conv_transpose())
    code, out, err = run(capsys, "schedule", "--hw", "gemmini-16x16", "--model", str(model), "--time-limit", "2")
    assert code == 0 and "enc" in out
    assert "tileplan: note: model: 1 ConvTranspose node(s) not planned" in err


def test_progress_bar_on_a_terminal(tmp_path):
    """Planning several layers shows a progress bar on stderr when it is a terminal (and none otherwise)."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["service", os.environ.get("PYTHONPATH", "")])}
    env.pop("TQDM_DISABLE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tileplan.cli", "schedule", "--hw", "gemmini-16x16", "--no-baseline",
         "--time-limit", "1", "--layer", "matmul:M=16,K=32,N=16", "--layer", "matmul:M=16,K=48,N=16"],
        stdout=subprocess.PIPE, stderr=follower, cwd=Path(__file__).resolve().parents[1], env=env,
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=120)
    os.close(leader)
    assert proc.returncode == 0
    assert b"planning" in seen and b"2/2" in seen
    assert b"planning" not in out  # the table on stdout stays clean


def test_group_packing_option(capsys):
    """A depthwise layer's plan packs 16 channels per array pass unless --group-packing off; the two plans have
    different cache keys (the default's key is the one requests without the option always had)."""
    layer = "conv2d:in_channels=32,out_channels=32,groups=32,in_h=8,in_w=8,kernel=3,padding=1"
    plans = {}
    for how in ("auto", "off"):
        code, out, _ = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", layer, "--json", "--no-baseline",
                           "--time-limit", "5", "--group-packing", how)
        assert code == 0
        (plans[how],) = json.loads(out)
    assert plans["auto"]["mapping"]["group_pack"] == 16 and plans["off"]["mapping"]["group_pack"] is None
    assert plans["auto"]["metrics"]["cycles"] < plans["off"]["metrics"]["cycles"]
    assert plans["auto"]["key"] != plans["off"]["key"]
    code, _, err = run(capsys, "schedule", "--hw", "gemmini-16x16", "--layer", layer, "--group-packing", "maybe")
    assert code == 2 and "--group-packing" in err and len(err.strip().splitlines()) == 1  # one line, exit 2
