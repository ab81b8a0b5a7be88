"""The README's Quick start, as written: every line parses, names files the repository ships (or an earlier line
writes), and the quick ones run. (The whole-network, codegen and calibration lines are exercised by
test_cli.py on smaller inputs; here they are parsed and their inputs checked.)"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tileplan.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]
SLOW = ("resnet50_unique", "calibrate", "codegen", "in_channels=64,out_channels=64")


def quick_start() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Quick start (CLI)"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    commands, current = [], ""
    for line in block.strip().splitlines():
        line = line.split("  #")[0].rstrip()
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        commands.append(shlex.split(current + line))
        current = ""
    return commands


def test_the_first_lines_are_the_make_targets() -> None:
    text = (REPO / "README.md").read_text()
    first = text[text.index("```") + 3:]
    assert first[:first.index("```")].split() == ["make", "serve", "make", "test"]
    makefile = (REPO / "Makefile").read_text()
    assert "\nserve:" in makefile and "\ntest:" in makefile


def test_quick_start_lines_work_from_a_clone(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    commands = quick_start()
    assert len(commands) >= 10
    monkeypatch.chdir(REPO)
    written: set[str] = set()
    for argv in commands:
        assert argv[0] in (".venv/bin/tileplan", ".venv/bin/python"), argv
        if argv[0] == ".venv/bin/python":  # the example model's script
            script = REPO / argv[1]
            assert script.is_file(), argv
            out = tmp_path / "small_cnn_int8.onnx"
            r = subprocess.run([sys.executable, str(script), "--out", str(out)], capture_output=True, text=True,
                               timeout=300, env={**os.environ, "PYTHONPATH": str(REPO / "service")})
            assert r.returncode == 0, r.stderr
            written.add("examples/models/small_cnn_int8.onnx")
            continue
        args = argv[1:]
        parsed = build_parser().parse_args(args)  # every flag as written exists
        for flag in ("workload", "model", "mapping", "data", "artifact"):
            value = getattr(parsed, flag, None)
            for path in value if isinstance(value, list) else [value] if value else []:
                assert path in written or (REPO / path).exists(), f"{' '.join(argv)}: {path} is not in the repository"
        if getattr(parsed, "command", "") == "hardware" and parsed.action == "validate":
            assert (REPO / parsed.name).is_file()
        if getattr(parsed, "out", None):
            written.add(parsed.out)
        if any(s in " ".join(args) for s in SLOW):
            continue
        # run it, with files written by earlier lines kept out of the repository
        run = [str(tmp_path / a) if a in written else a for a in args]
        if "--model" in args:
            run[run.index("--model") + 1] = str(tmp_path / "small_cnn_int8.onnx")
        code = main(run)
        _, err = capsys.readouterr()
        assert code == 0, f"{' '.join(argv)}: {err}"
