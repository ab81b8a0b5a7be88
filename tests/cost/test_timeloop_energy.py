"""Timeloop's built-in energy table (timeloop-model without Accelergy) on a level's geometry."""

import math

import pytest

from tileplan.cost.model import evaluate_mapping
from tileplan.cost.timeloop_energy import block_access_pj, dram_access_pj, mac_pj, sram_access_pj, storage_pj
from tileplan.hardware import HardwareDescriptor
from tileplan.hardware.catalog import get_hardware, load_descriptor


def test_table_points():
    # the two Eyeriss points the line goes through, for a 16-bit access: 0.5 KiB -> 1.0 pJ, 100 KiB -> 6.0 pJ
    assert sram_access_pj(256, 16) == pytest.approx(1.0)
    assert sram_access_pj(51200, 16) == pytest.approx(6.0)
    # twice as wide an access of the same array costs twice (and the array is twice as big)
    assert sram_access_pj(256, 32) == pytest.approx(2 * (1.0 + 5 / 99.5 * 0.5))
    assert dram_access_pj(8) == 100.0 and dram_access_pj(512) == 6400.0
    assert mac_pj(8, 8) == 0.25 and mac_pj(16, 16) == 1.0


def test_simba_levels():
    """Simba's registers: one 8-bit entry in each of 1024 PEs, 64 PEs to a 512-bit-wide array; one access costs a
    64th of that array's; its DRAM moves 64-word blocks at 100 pJ a word."""
    levels = {lv.name: lv for lv in get_hardware("simba").resolve().levels}
    assert block_access_pj(levels["Registers"])[0] == pytest.approx(sram_access_pj(1, 512) / 64)
    assert block_access_pj(levels["DRAM"]) == (6400.0, 6400.0)
    assert block_access_pj(levels["GlobalBuffer"])[1] == pytest.approx(sram_access_pj(8192, 64))


def test_storage_counts_blocks_per_action_and_clusters_not_instances():
    levels = {lv.name: lv for lv in get_hardware("simba").resolve().levels}
    gb = levels["GlobalBuffer"]  # 8-word blocks: 9 words read is 2 accesses, 8 filled is 1, no updates
    assert storage_pj(gb, 9, 8, 0, 1) == pytest.approx(3 * block_access_pj(gb)[0])
    reg = levels["Registers"]  # 1024 instances in 16 clusters of 64: 896 used are charged as 16 clusters
    assert storage_pj(reg, 10, 1, 0, 896) == pytest.approx(11 * block_access_pj(reg)[0] * 16)
    assert storage_pj(reg, 10, 1, 0, 4) == pytest.approx(11 * block_access_pj(reg)[0] * 4)
    assert math.isclose(storage_pj(reg, 0, 0, 0, 896), 0.0)


def test_stated_energy_is_counted_per_block_like_the_table():
    """A level's own energy (per byte) prices its block accesses the same way: 9 words read in 8-word blocks of
    8-bit words at 2 pJ a byte are 2 accesses of 16 pJ."""
    hw = get_hardware("simba")
    doc = hw.model_dump()
    next(lv for lv in doc["memory_levels"] if lv["name"] == "GlobalBuffer")["energy"] = {
        "read_pj_per_byte": 2.0, "write_pj_per_byte": 3.0}
    gb = next(lv for lv in HardwareDescriptor.model_validate(doc).resolve().levels if lv.name == "GlobalBuffer")
    assert block_access_pj(gb) == (16.0, 24.0)
    assert storage_pj(gb, 9, 8, 0, 1) == pytest.approx(2 * 16.0 + 1 * 24.0)


def test_a_backing_store_with_a_size_is_checked_and_priced_as_its_class():
    """An outermost SRAM with a size (Timeloop's exercises: a 'MainMemory' of class SRAM): timeloop-model refuses a
    problem that does not fit it and prices its accesses from its array, not as DRAM. Its numbers: 400.51 pJ for
    C8 K4 P4 below; K16 refused ('mapped tile size 224 exceeds buffer capacity 128')."""
    from tileplan.interop.timeloop_map import timeloop_verdict
    from tileplan.problem import Problem

    arch = """
architecture:
  version: 0.3
  subtree:
  - name: System
    local:
    - {name: MainMemory, class: SRAM, attributes: {depth: 16, width: 64, block-size: 8, word-bits: 8}}
    subtree:
    - name: PE
      local:
      - {name: Buffer, class: regfile, attributes: {depth: 64, word-bits: 8, width: 8, block-size: 1}}
      - {name: MACC, class: intmac, attributes: {datawidth: 8}}
architecture_constraints: {targets: [{target: Buffer, type: datatype, keep: [Weights], bypass: [Inputs, Outputs]}]}
"""
    hw = load_descriptor(arch, name="sram-backed")
    assert hw.memory_levels[1].source_entries == 128 and hw.memory_levels[1].technology == "SRAM"
    for k, energy in ((4, 400.51), (16, None)):
        problem = Problem(dims={"N": 1, "G": 1, "C": 8, "K": k, "P": 4, "Q": 1, "R": 1, "S": 1}, stride=(1, 1),
                          dilation=(1, 1))
        mapping = {"mapping": [
            {"target": "Buffer", "type": "temporal", "factors": "C=8", "permutation": "CRSPQKN"},
            {"target": "MainMemory", "type": "temporal", "factors": f"P=4 K={k}", "permutation": "KPRSQCN"},
            {"target": "Buffer", "type": "bypass", "keep": ["Weights"], "bypass": ["Inputs", "Outputs"]},
            {"target": "MainMemory", "type": "bypass", "keep": ["Weights", "Inputs", "Outputs"], "bypass": []}]}
        m, violations = timeloop_verdict(mapping, hw, problem)
        if energy is None:
            assert any("MainMemory: mapped tile size 224 exceeds buffer capacity 128" in v for v in violations)
            continue
        assert violations == []
        got = evaluate_mapping(problem, hw.resolve(m.dataflow), m, model="timeloop")
        assert got.cycles == 128 and got.energy_pj == pytest.approx(energy, abs=0.01)
