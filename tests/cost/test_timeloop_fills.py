"""How often timeloop-model refetches a tile, against its own counts (NVlabs/timeloop@019f107 without Accelergy).

Its nest analysis keeps, per tile, the vector it last moved by: a move by the same vector fetches only the new part,
a move by another one (after a loop that left the tile in place, or a jump back when an inner loop wraps) the whole
tile; and it extrapolates each loop from two iterations. Input tiles of overlapping windows fed by a fan-out are
fetched once each (equal windows are multicast, overlapping ones are not). Each case below failed before."""

from tileplan.cost.timeloop import timeloop_counts
from tileplan.hardware.catalog import load_descriptor
from tileplan.mapping import LevelMapping, Mapping
from tileplan.problem import Problem

ONE = """
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
  - {target: Buf, type: datatype, keep: [Inputs], bypass: [Weights, Outputs]}
"""
TWO = """
architecture:
  version: 0.3
  subtree:
  - name: system
    local:
    - {name: DRAM, class: DRAM, attributes: {word-bits: 16}}
    - {name: Buf, class: SRAM, attributes: {word-bits: 16, entries: 4096}}
    subtree:
    - name: PE[0..2]
      local:
      - {name: PEBuf, class: regfile, attributes: {word-bits: 16, entries: 256}}
      - {name: MAC, class: intmac, attributes: {word-bits: 16}}
architecture_constraints:
  targets:
  - {target: PEBuf, type: datatype, keep: [Inputs], bypass: [Weights, Outputs]}
  - {target: Buf, type: datatype, keep: [Weights, Outputs], bypass: [Inputs]}
"""


def _counts(arch, dims, levels):
    hw = load_descriptor(arch, name="fills")
    full = {"N": 1, "G": 1, "C": 1, "K": 1, "P": 1, "Q": 1, "R": 1, "S": 1, **dims}
    mapping = Mapping(levels=[LevelMapping(name=n, **kw) for n, kw in levels], dataflow=hw.dataflow_names[0])
    tc = timeloop_counts(Problem(dims=full, stride=(1, 1), dilation=(1, 1)), hw.resolve(), mapping)
    return {lc.name: {t: (c.reads, c.fills, c.updates) for t, c in lc.tensors.items()} for lc in tc.levels}


def test_a_tile_refetches_whole_after_a_loop_that_left_it_in_place():
    dims = {"K": 2, "Q": 4, "S": 3}
    for dram, fills in (([("K", 2), ("S", 3), ("Q", 2)], 12),   # K inner: every S step refetches the window
                        ([("S", 3), ("K", 2), ("Q", 2)], 15),   # S inner: slides, K wraps it back whole
                        ([("S", 3), ("Q", 2), ("K", 2)], 14)):
        got = _counts(ONE, dims, [("Buf", {"temporal": [("Q", 2)]}), ("DRAM", {"temporal": dram})])
        assert got["Buf"]["I"] == (24, fills, 0)


def test_a_slide_after_an_inner_wrap_is_measured_from_the_inner_loops_second_iteration():
    """fuzz200_002/L0/random2: an S loop inside a Q loop; Timeloop 4,992 input words where counting every Q step
    as a whole refetch gives 6,144 (its cycles 1.8% high on a bandwidth-bound buffer)."""
    dims = {"N": 2, "K": 8, "P": 16, "Q": 8, "R": 3, "S": 3}
    got = _counts(ONE.replace("keep: [Inputs], bypass: [Weights, Outputs]", "keep: [Inputs, Outputs], bypass: [Weights]"),
                  dims, [("Buf", {"spatial": [("N", 2)], "temporal": [("K", 2), ("P", 8), ("Q", 2)]}),
                         ("DRAM", {"temporal": [("S", 3), ("Q", 4), ("P", 2), ("R", 3), ("K", 4)]})])
    assert got["Buf"]["I"] == (18432, 4992, 0)


def test_overlapping_windows_over_a_fan_out_are_fetched_each():
    """Two PEs' input windows (P 2 x R 3: rows 0-3 and 2-5) overlap by two rows; Timeloop reads 8, not 6."""
    got = _counts(TWO, {"P": 4, "R": 3}, [("PEBuf", {"temporal": [("P", 2), ("R", 3)]}),
                                          ("Buf", {"spatial": [("P", 2)]}), ("DRAM", {})])
    assert got["DRAM"]["I"] == (8, 0, 0) and got["PEBuf"]["I"] == (6, 4, 0)


def test_windows_passed_along_a_fan_out_over_links():
    """Three PEs under one buffer with R unrolled and P temporal above them: a PE's next input row is the row its
    neighbour held a step before, so it comes over the link. timeloop-model: DRAM reads 6 (not 12), each PE 2 link
    reads on top of its 4, its 4 fills half from the parent and half from the link."""
    for keep_buf, buf_i in (("[Weights, Outputs], bypass: [Inputs]", None), ("[Weights, Inputs, Outputs], bypass: []",
                                                                            (6, 6, 0))):
        arch = TWO.replace("keep: [Weights, Outputs], bypass: [Inputs]", "keep: " + keep_buf)
        got = _counts(arch, {"P": 4, "R": 3}, [("PEBuf", {}), ("Buf", {"spatial": [("R", 3)], "temporal": [("P", 4)]}),
                                               ("DRAM", {})])
        assert got["PEBuf"]["I"] == (6, 4, 0)
        assert got["DRAM"]["I"] == (6, 0, 0)
        assert got["Buf"].get("I") == buf_i


def test_a_factor_beyond_a_levels_fan_out_passes_where_the_levels_above_use_less():
    """fuzz1_013/L2/wild1: R 3 unrolled at a level whose own fan-out is 2 (a 3 x 3 mesh of Spad1 over a 6 x 3 mesh of
    MACs): timeloop-model only checks the expansions against each mesh (X 3 <= 6) and accepted the map."""
    from tileplan.cost.timeloop import timeloop_violations

    arch = """
architecture:
  version: 0.3
  subtree:
  - name: system
    local:
    - {name: DRAM, class: DRAM, attributes: {}}
    subtree:
    - name: Row[0..2]
      local:
      - {name: RowBuf, class: smartbuffer, attributes: {entries: 128, meshY: 3}}
      - {name: 'Spad[0..2]', class: regfile, attributes: {entries: 16, meshX: 3}}
      subtree:
      - name: PE[0..5]
        local:
        - {name: MAC, class: compute, attributes: {datawidth: 8, meshX: 6}}
architecture_constraints:
  targets:
  - {target: RowBuf, type: bypass, keep: [Weights, Outputs], bypass: [Inputs]}
  - {target: Spad, type: bypass, keep: [Inputs], bypass: [Weights, Outputs]}
"""
    hw = load_descriptor(arch, name="wide")
    full = {"N": 1, "G": 1, "C": 9, "K": 32, "P": 3, "Q": 5, "R": 3, "S": 3}
    mapping = Mapping(levels=[LevelMapping(name="Spad", spatial=[("R", 3)], temporal=[("S", 3), ("K", 2)]),
                              LevelMapping(name="RowBuf", temporal=[("K", 2)]),
                              LevelMapping(name="DRAM", temporal=[("C", 9), ("P", 3), ("K", 8), ("Q", 5)])],
                      dataflow=hw.dataflow_names[0])
    assert hw.resolve().levels[0].fanout == 2
    assert timeloop_violations(Problem(dims=full, stride=(1, 1), dilation=(1, 1)), hw.resolve(), mapping) == []
