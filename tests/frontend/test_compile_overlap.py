"""A compile with workers lowers its host part (and compiles its C) in a forked process while the layers are
planned (`EarlyHost`): the program is byte for byte the one made without it, and the host part lowered there is
used only when it is exactly the compile's own (every offloaded op got its kernel)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from frontend_helpers import HW, OPTIONS

from tileplan.frontend import compile as compile_mod
from tileplan.frontend import zoo
from tileplan.frontend.compile import compile_model, store_planner
from tileplan.store.repository import Store

OPTS = OPTIONS.model_copy(update={"emulate": False})


def _compile(data: bytes, where: Path, monkeypatch: pytest.MonkeyPatch, workers: int, options: Any = OPTS) -> Any:
    """A cold compile: fresh kernel, lowering and build caches and a new plan store under `where`."""
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    store = Store(f"sqlite:///{where / 'plans.db'}")
    try:
        return compile_model(data, HW, options, planner=store_planner(store), workers=workers)
    finally:
        store.close()


def _count_lowerings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record host_ops.lower_host calls made in this process (a forked one counts in its own copy)."""
    from tileplan.frontend import host_ops

    calls: list[int] = []
    real = host_ops.lower_host
    monkeypatch.setattr(host_ops, "lower_host", lambda mod: calls.append(1) or real(mod))
    return calls


@pytest.mark.parametrize("model", ["resnet_block", "bert_encoder"])
def test_the_early_host_part_makes_the_same_program(model, tmp_path, monkeypatch):
    """workers=2: the host part comes from the forked lowering (this process lowers nothing); the artifact
    equals one process's, and that of workers=2 without the forked lowering."""
    data = zoo.build(model, "qdq", seed=3)
    serial = _compile(data, tmp_path / "serial", monkeypatch, 1)
    lowered = _count_lowerings(monkeypatch)
    early = _compile(data, tmp_path / "early", monkeypatch, 2)
    assert lowered == []
    assert early.artifact == serial.artifact
    monkeypatch.setattr(compile_mod.EarlyHost, "start", classmethod(lambda cls, *a: cls()))
    late = _compile(data, tmp_path / "late", monkeypatch, 2)
    assert lowered == [1]  # (this time here)
    assert late.artifact == serial.artifact


_REFUSED: dict[str, str] = {}
_GENERATE = compile_mod.generate_kernel


def _refusing(spec: Any, hw: Any, mapping: Any, name: str, stream: str) -> Any:
    """generate_kernel, refusing the kernel named _REFUSED["name"] (module level: the worker pool pickles it)."""
    from tileplan.codegen.registry import CodegenError

    if name == _REFUSED.get("name"):
        raise CodegenError(f"refused for the test: {name}")
    return _GENERATE(spec, hw, mapping, name, stream)


def test_an_op_without_a_kernel_stops_the_early_host_part(tmp_path, monkeypatch):
    """An offloaded op whose kernel cannot be made goes to the host, so the host part lowered early is not the
    program's: it is dropped and this process lowers the right one; the same program as one process makes."""
    data = zoo.build("resnet_block", "qdq", seed=3)
    probe = _compile(data, tmp_path / "probe", monkeypatch, 1)
    monkeypatch.setattr(compile_mod, "generate_kernel", _refusing)
    monkeypatch.setitem(_REFUSED, "name", next(o for o in probe.summary["ops"] if o.get("kernel"))["kernel"])
    serial = _compile(data, tmp_path / "serial", monkeypatch, 1)
    assert any("refused for the test" in o["reason"] for o in serial.summary["ops"])
    lowered = _count_lowerings(monkeypatch)
    got = _compile(data, tmp_path / "early", monkeypatch, 2)
    assert lowered == [1]
    assert got.artifact == serial.artifact
