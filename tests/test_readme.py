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


# -- as a new user: a fresh copy of the repository, every line run by the shell as written ----------------------


def code_block(heading: str) -> list[str]:
    """The shell lines of the first code block after `heading` (continuations joined, comments kept)."""
    text = (REPO / "README.md").read_text()
    block = text[text.index(heading):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    lines, current = [], ""
    for line in block.strip().splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    return lines


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files (tracked, and new ones not ignored) with nothing beside them: no data, no build
    outputs, no example model; the virtualenv is the checkout's."""
    import shutil

    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    root = tmp_path_factory.mktemp("clone") / "tileplan"
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / name)
    (root / ".venv").symlink_to(Path(sys.prefix))
    return root


def run_as_written(root: Path, line: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEPLAN_")}
    env["TQDM_DISABLE"] = "1"
    r = subprocess.run(["bash", "-c", line], cwd=root, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, f"{line}\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, f"{line}\n{r.stderr[-3000:]}"


def test_every_quick_start_line_runs_in_a_fresh_copy(fresh_copy: Path) -> None:
    lines = code_block("## Quick start (CLI)")
    assert len(lines) >= 10
    for line in lines:
        run_as_written(fresh_copy, line)
    assert (fresh_copy / "params.yaml").is_file() and (fresh_copy / "mm.c").is_file()


def test_the_whole_model_walkthrough_runs_in_a_fresh_copy(fresh_copy: Path) -> None:
    lines = code_block("### Whole models: one program for the accelerator")
    assert [line.split()[1] for line in lines if line.startswith(".venv/bin/tileplan")] == ["compile", "run"]
    for line in lines:
        run_as_written(fresh_copy, line)
    assert (fresh_copy / "build" / "small_cnn_int8.tar").is_file() and (fresh_copy / "out.npy").is_file()


def test_no_internal_issue_numbers_and_the_client_has_a_readme() -> None:
    import re

    for doc in (REPO / "README.md", REPO / "client" / "README.md"):
        text = doc.read_text()
        assert not re.search(r"\bissues? #?\d+", text, re.IGNORECASE), doc
    assert "AsyncTileplanClient" in (REPO / "client" / "README.md").read_text()
