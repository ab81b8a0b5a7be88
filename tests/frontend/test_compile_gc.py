"""compile_model keeps the garbage collector's full passes off the heap that lives through the compile (the
decoded model, TVM's modules, the Relax module: gc.freeze before the planner and the worker processes run) and
hands it back to the collector when the compile ends, also when it fails."""

from __future__ import annotations

import gc

import pytest

from tileplan.frontend import zoo
from tileplan.frontend.compile import CompileOptions, compile_model, default_planner
from tileplan.hardware.catalog import resolve_hardware


def test_the_heap_is_frozen_while_planning_and_handed_back_after() -> None:
    hw = resolve_hardware("gemmini-16x16")
    seen: list[int] = []

    def planner(layer, hw_, options):  # type: ignore[no-untyped-def]
        seen.append(gc.get_freeze_count())
        return default_planner(layer, hw_, options)

    gc.unfreeze()
    result = compile_model(zoo.build("cnn_small", "qdq"), hw, CompileOptions(emulate=False, time_limit_s=5),
                           planner=planner, workers=1)
    assert result.summary["total"]["accelerator_ops"] > 0
    assert seen and all(n > 0 for n in seen)  # planned with the heap frozen
    assert gc.get_freeze_count() == 0  # and handed back


def test_a_failing_compile_hands_the_heap_back() -> None:
    hw = resolve_hardware("gemmini-16x16")
    seen: list[int] = []

    def failing(layer, hw_, options):  # type: ignore[no-untyped-def]
        seen.append(gc.get_freeze_count())
        raise RuntimeError("a planner's own failure")

    gc.unfreeze()
    with pytest.raises(RuntimeError):
        compile_model(zoo.build("cnn_small", "qdq"), hw, CompileOptions(emulate=False), planner=failing, workers=1)
    assert seen and seen[0] > 0  # it failed with the heap frozen
    assert gc.get_freeze_count() == 0
