"""The program's entry point (`tileplan`, `python -m tileplan.cli`): main's exit code, and the garbage collector's
heap frozen after main returns (the interpreter's teardown then skips its last full passes); main itself, which
in-process callers use, leaves the collector alone."""

from __future__ import annotations

import gc
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tileplan import cli

ROOT = Path(__file__).resolve().parents[2]


def test_entry_exits_with_mains_code_and_freezes_the_heap_only_after_main(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    def fake_main() -> int:
        events.append("main")
        return 3

    monkeypatch.setattr(cli, "main", fake_main)
    monkeypatch.setattr(gc, "freeze", lambda: events.append("freeze"))
    with pytest.raises(SystemExit) as exc:
        cli.entry()
    assert exc.value.code == 3
    assert events == ["main", "freeze"]


def test_main_leaves_the_collector_alone(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    assert cli.main(["hardware", "list"]) == 0
    assert frozen == []


def test_the_command_and_the_module_run_the_entry_point(tmp_path: Path) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tileplan"] == "tileplan.cli:entry"
    # python -m tileplan.cli: the frozen heap is visible to an exit handler registered by the command's own process
    code = ("import atexit, gc, runpy, sys\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0, file=sys.stderr))\n"
            "sys.argv = ['tileplan', 'hardware', 'list']\n"
            "runpy.run_module('tileplan.cli', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "frozen True" in proc.stderr
