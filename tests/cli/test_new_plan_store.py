"""`tileplan compile` with a plan store that does not exist yet (a new SQLite file): nothing can be looked up, so
the store is opened only to save the solved plans, among the compile's deferred work (NewStorePlanner), not on
the compile's serial start; the plans it saves are the ones a compile with an existing store saves."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tileplan.cli import _new_sqlite_file
from tileplan.frontend import zoo
from tileplan.frontend.compile import NewStorePlanner, StorePlanner


def _compile(model: Path, db: Path, caches: Path, out: Path) -> dict:
    caches.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "tileplan.cli", "compile", str(model), "--hw", "gemmini-16x16",
                           "--out", str(out), "--plans-db", f"sqlite:///{db}", "--jobs", "2", "--json"],
                          capture_output=True, text=True, env={**os.environ, "TMPDIR": str(caches)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _plans(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as c:
        return sorted(c.execute("SELECT key, hardware, op, layer_name, mapper, cycles, baseline_cycles FROM plans"))


def test_a_new_store_gets_the_plans_an_existing_store_gets(tmp_path: Path) -> None:
    from tileplan.store.repository import Store

    model = tmp_path / "m.onnx"
    model.write_bytes(zoo.build("cnn_small", "qdq"))
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    Store(f"sqlite:///{old}").close()  # exists, migrated, empty: opened before the compile as always
    a = _compile(model, new, tmp_path / "c1", tmp_path / "o1")
    b = _compile(model, old, tmp_path / "c2", tmp_path / "o2")
    assert new.exists() and _plans(new) and _plans(new) == _plans(old)
    assert a["total"]["cycles_emulated"] == b["total"]["cycles_emulated"]
    assert (tmp_path / "o1" / "m.tar").read_bytes() == (tmp_path / "o2" / "m.tar").read_bytes()
    # the store made by the first compile answers a later one (fresh kernel and compile caches)
    again = _compile(model, new, tmp_path / "c3", tmp_path / "o3")
    assert again["total"]["cycles_emulated"] == a["total"]["cycles_emulated"]
    assert _plans(new) == _plans(old)


class _FakeStore:
    def __init__(self) -> None:
        self.put: list[Any] = []
        self.closed = False

    def put_plan(self, plan: Any, hw: Any) -> None:
        self.put.append((plan, hw))

    def close(self) -> None:
        self.closed = True


class _Dumps:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def model_dump(self, mode: str) -> dict[str, Any]:
        return self.doc


def test_new_store_planner_opens_the_store_once_to_save() -> None:
    opened: list[_FakeStore] = []

    def open_store() -> _FakeStore:
        opened.append(_FakeStore())
        return opened[-1]

    p = NewStorePlanner(open_store)
    assert isinstance(p, StorePlanner)  # (the compile hands its misses to the workers as for any store)
    assert p.lookup(None, None, None) is None
    p.save(_Dumps({"plan": 1}), _Dumps({"hw": 1}))  # type: ignore[arg-type]
    assert not opened
    p.flush()
    p.save(_Dumps({"plan": 2}), _Dumps({"hw": 1}))  # type: ignore[arg-type]
    p.close()
    assert len(opened) == 1 and opened[0].closed
    assert opened[0].put == [({"plan": 1}, {"hw": 1}), ({"plan": 2}, {"hw": 1})]


def test_compile_model_saves_the_plans_before_it_returns() -> None:
    from tileplan.frontend.compile import CompileOptions, compile_model
    from tileplan.hardware.catalog import get_hardware

    opened: list[_FakeStore] = []
    p = NewStorePlanner(lambda: opened.append(_FakeStore()) or opened[-1])
    res = compile_model(zoo.build("cnn_small", "qdq"), get_hardware("gemmini-16x16"), CompileOptions(time_limit_s=2.0), planner=p, workers=2)
    assert len(opened) == 1 and not opened[0].closed  # the caller closes it
    assert len(opened[0].put) == res.summary["total"]["plans"] > 0


@pytest.mark.parametrize("url,new", [("sqlite:///{tmp}/x.db", True), ("sqlite:///{tmp}/there.db", False),
                                     ("sqlite:///{tmp}/x.db?mode=ro", False), ("sqlite:///:memory:", False),
                                     ("postgresql://u@h/db", False)])
def test_which_urls_name_a_new_sqlite_file(tmp_path: Path, url: str, new: bool) -> None:
    (tmp_path / "there.db").write_bytes(b"")
    assert _new_sqlite_file(url.format(tmp=tmp_path)) is new
