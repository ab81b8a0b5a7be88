"""Timeloop's link transfers where the innermost level fans out to the MACs, against timeloop-model's own counts.

The numbers are what timeloop-model (NVlabs/timeloop@019f107, built without Accelergy) printed for these maps on a
12-MAC array under one buffer (bench/timeloop_fuzz.py found the first; each failed before the link analysis)."""

import pytest

from tileplan.cost.timeloop import timeloop_counts
from tileplan.hardware.catalog import load_descriptor
from tileplan.mapping import LevelMapping, Mapping
from tileplan.problem import Problem

ARCH = """
architecture:
  version: 0.3
  subtree:
  - name: system
    local:
    - {name: DRAM, class: DRAM, attributes: {word-bits: 16}}
    - {name: Buf, class: SRAM, attributes: {word-bits: 16, entries: 4096}}
    subtree:
    - name: PE[0..11]
      local:
      - {name: MAC, class: intmac, attributes: {word-bits: 16}}
architecture_constraints:
  targets:
  - {target: Buf, type: datatype, keep: [%s], bypass: [%s]}
"""
NAMES = {"W": "Weights", "I": "Inputs", "O": "Outputs"}


def _counts(dims, spatial, order, keep, dram=()):
    bypass = [NAMES[t] for t in "WIO" if t != keep]
    hw = load_descriptor(ARCH % (NAMES[keep], ", ".join(bypass)), name="links")
    full = {"N": 1, "G": 1, **dims}
    left = {d: full[d] // dict(spatial).get(d, 1) // dict(dram).get(d, 1) for d in full}
    mapping = Mapping(levels=[LevelMapping(name="Buf", spatial=spatial, temporal=[(d, left[d]) for d in order if left[d] > 1]),
                              LevelMapping(name="DRAM", temporal=list(dram))], dataflow=hw.dataflow_names[0])
    tc = timeloop_counts(Problem(dims=full, stride=(1, 1), dilation=(1, 1)), hw.resolve(), mapping)
    return {lc.name: {t: (c.reads, c.fills, c.updates) for t, c in lc.tensors.items()} for lc in tc.levels}


@pytest.mark.parametrize("dims, spatial, order, keep, buf, dram_o", [
    # a partial sum reduced over an unrolled R stays in the array while the inner C loop runs
    ({"C": 9, "K": 4, "R": 3}, [("R", 3)], "CK", "O", (0, 4, 4), (0, 0, 4)),
    # ... not when K, which moves it, is the inner loop
    ({"C": 9, "K": 4, "R": 3}, [("R", 3)], "KC", "O", (32, 4, 36), (0, 0, 4)),
    # nor when each MAC has partial sums of its own (K unrolled)
    ({"C": 9, "K": 4, "R": 3}, [("K", 4)], "CR", "O", (104, 4, 108), (0, 0, 4)),
    # an input multicast over K stays while an inner K loop runs
    ({"C": 9, "K": 4, "R": 3}, [("K", 2)], "KCR", "I", (27, 27, 0), (104, 0, 108)),
    # a sliding window passes along an unrolled Q while the inner S loop runs
    ({"C": 2, "K": 2, "Q": 4, "S": 3}, [("Q", 4)], "SCK", "I", (24, 12, 0), (40, 0, 48)),
    ({"C": 2, "K": 2, "Q": 4, "S": 3}, [("Q", 4)], "CSK", "I", (48, 12, 0), (40, 0, 48)),
    ({"C": 2, "K": 4, "P": 4, "Q": 3}, [("K", 2), ("Q", 3)], "KCP", "O", (48, 48, 96), (0, 0, 48)),
])
def test_counts_are_timeloops(dims, spatial, order, keep, buf, dram_o):
    got = _counts({d: dims.get(d, 1) for d in "KCPQRS"}, spatial, order, keep)
    assert got["Buf"][keep] == buf
    assert got["DRAM"]["O"] == dram_o


def test_partial_sums_accumulate_in_the_array_where_no_level_keeps_them():
    """The issue's mechanism (fuzz100_001/L1/cosa): outputs kept only in DRAM, C innermost under an unrolled R x Q;
    Timeloop: 1,536 reads + 2,304 updates at DRAM, not one per MAC step (19,968 + 20,736)."""
    dims = {"C": 9, "K": 24, "P": 8, "Q": 4, "R": 3, "S": 3}
    got = _counts(dims, [("R", 3), ("Q", 4)], "CKP", "W", dram=[("K", 4), ("S", 3)])
    assert got["DRAM"]["O"] == (1536, 0, 2304)
    assert got["DRAM"]["I"] == (62208, 0, 0)
