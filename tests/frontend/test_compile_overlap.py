"""A compile with workers starts the layers' solves before TVM is imported (`EarlyPlans`) and lowers its host
part in a forked process while the layers are planned (`EarlyHost`): the program is byte for byte the one made
without either, and a speculated solve or host part is used only when it is exactly the compile's own."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from frontend_helpers import HW, OPTIONS

from tileplan.frontend import compile as compile_mod
from tileplan.frontend import zoo
from tileplan.frontend.compile import EarlyPlans, compile_model, store_planner
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


def _count_taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record every EarlyPlans.take: whether it handed out a started solve."""
    taken: list[bool] = []
    real = EarlyPlans.take

    def take(self: EarlyPlans, layer: Any) -> Any:
        fut = real(self, layer)
        taken.append(fut is not None)
        return fut

    monkeypatch.setattr(EarlyPlans, "take", take)
    return taken


def _count_lowerings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record host_ops.lower_host calls made in this process (a forked one counts in its own copy)."""
    from tileplan.frontend import host_ops

    calls: list[int] = []
    real = host_ops.lower_host
    monkeypatch.setattr(host_ops, "lower_host", lambda mod: calls.append(1) or real(mod))
    return calls


@pytest.mark.parametrize("model", ["resnet_block", "bert_encoder"])
def test_early_solves_and_host_part_make_the_same_program(model, tmp_path, monkeypatch):
    """workers=2: every distinct layer's plan comes from a solve started before TVM was imported and the host
    part from the forked lowering (this process lowers nothing); the artifact equals one process's, and that of
    workers=2 with neither started early."""
    data = zoo.build(model, "qdq", seed=3)
    serial = _compile(data, tmp_path / "serial", monkeypatch, 1)
    taken = _count_taken(monkeypatch)
    lowered = _count_lowerings(monkeypatch)
    early = _compile(data, tmp_path / "early", monkeypatch, 2)
    assert taken and all(taken) and len(taken) == early.summary["total"]["plans"]
    assert lowered == []
    assert early.artifact == serial.artifact
    monkeypatch.setattr(EarlyPlans, "start", classmethod(lambda cls, *a: cls()))
    monkeypatch.setattr(compile_mod.EarlyHost, "start", classmethod(lambda cls, *a: cls()))
    late = _compile(data, tmp_path / "late", monkeypatch, 2)
    assert lowered == [1]  # (this time here)
    assert late.artifact == serial.artifact


def test_a_speculated_layer_is_used_only_when_it_is_exactly_the_compiles(tmp_path, monkeypatch):
    """The layers read from the ONNX graph, each with its name kept and its output channels changed: no started
    solve is taken (the compile solves its own layers) and the program is the one made without them."""
    import tileplan.workload_onnx as wo

    data = zoo.build("resnet_block", "qdq", seed=3)
    serial = _compile(data, tmp_path / "serial", monkeypatch, 1)
    real = wo.graph_layers

    def other_layers(g: Any) -> Any:
        layers, notes = real(g)
        return [la.model_copy(update={"out_channels": la.out_channels + 16}) if hasattr(la, "out_channels")
                else la.model_copy(update={"N": la.N + 16}) for la in layers], notes

    monkeypatch.setattr(wo, "graph_layers", other_layers)
    taken = _count_taken(monkeypatch)
    got = _compile(data, tmp_path / "other", monkeypatch, 2)
    assert taken and not any(taken)
    assert got.artifact == serial.artifact


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
