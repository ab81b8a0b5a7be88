"""The kernel cache's key names every source a cached kernel depends on. An entry carries its modelled cycles,
which the cost model computes: a cost-model change must not leave warm compiles reporting the old model's cycles
(seen after a change to tileplan.cost: a warm compile's emulated-vs-modelled ratios were the previous model's)."""

from __future__ import annotations

from pathlib import Path

import tileplan.codegen
import tileplan.cost
from tileplan.frontend.compile import codegen_sources


def test_kernel_cache_key_covers_codegen_and_cost_model_sources():
    files = {Path(p).resolve() for p in codegen_sources()}
    for pkg, module in ((tileplan.codegen, "schedule.py"), (tileplan.cost, "gemmini.py"), (tileplan.cost, "params.py")):
        assert (Path(pkg.__file__).parent / module).resolve() in files
    assert (Path(tileplan.codegen.__file__).parent / "emulator" / "gemmini_emu.c").resolve() in files
