"""Polish's compound moves: what single prime-factor moves cannot reach from a local optimum of theirs."""

from tests.conftest import BENCH_DATA

from tileplan.check import check_arch
from tileplan.cost.model import evaluate_mapping
from tileplan.hardware.catalog import load_descriptor
from tileplan.mappers.base import Objective
from tileplan.mappers.build import build_mapping
from tileplan.mappers.polish import neighbours, polish, regroupings
from tileplan.problem import Problem

LATENCY = Objective(latency=1, energy=0, memory_utilization=0)


def _diannao_stuck():
    """cosa's old DianNao plan for a 7x7 conv (K 36, C 256, 2x2 outputs): an output loop (K3, Q2 at InputBuffer)
    below a reduction loop (C2 at OutputBuffer) above the one-word PsumRegFile, so every output is rewritten on each
    visit: 168 fills per register instead of 12, 9576 cycles against the 9408 of the MACs."""
    hw = load_descriptor((BENCH_DATA / "timeloop_reference" / "archs" / "diannao_arch_v02.yaml").read_text(),
                         name="diannao")
    arch = hw.resolve()
    problem = Problem(dims={"N": 1, "G": 1, "K": 36, "C": 256, "P": 2, "Q": 2, "R": 7, "S": 7})
    mapping = build_mapping(arch, [[("C", 8), ("S", 7)], [], [("K", 3), ("Q", 2)], [("C", 2), ("P", 2), ("R", 7)], []],
                            [[], [("C", 16)], [("K", 12)], [], []])
    return problem, arch, mapping


def test_single_moves_are_stuck_and_the_regroupings_are_not():
    problem, arch, mapping = _diannao_stuck()
    assert check_arch(problem, arch, mapping) == []
    start = evaluate_mapping(problem, arch, mapping, "timeloop").cycles
    assert start == 9576
    legal = [m for m in neighbours(mapping) if not check_arch(problem, arch, m)]
    assert min(evaluate_mapping(problem, arch, m, "timeloop").cycles for m in legal) >= start
    best, _, _ = polish(problem, arch, mapping, LATENCY)
    # every output visited once: 9408 MAC cycles plus one fill per output word of a register
    assert evaluate_mapping(problem, arch, best, "timeloop").cycles == 9420


def test_regroupings_are_each_a_new_plan_once():
    """Reordering for different tensors often gives the same loop order: each candidate is evaluated once, and never
    the start again (polish costs every candidate it is handed)."""
    _, _, mapping = _diannao_stuck()
    keys = [tuple(tuple(lv.temporal) for lv in m.levels) for m in regroupings(mapping)]
    assert keys and len(keys) == len(set(keys))
    assert tuple(tuple(lv.temporal) for lv in mapping.levels) not in keys


def _simba_plateau():
    """A plan cosa's MIP returns for ResNet-50's conv_256_1024_1x1 (14x14) on catalog Simba: 51,303 cycles, and every
    single move that does not make it slower leaves it at 51,303 (14 of them). One of those (a factor 2 of K from the
    WeightBuffer to DRAM) opens a saving the next move takes (C2 from DRAM into the GlobalBuffer): 50,176."""
    from tileplan.hardware.catalog import get_hardware

    arch = get_hardware("simba").resolve()
    problem = Problem(dims={"N": 1, "G": 1, "K": 1024, "C": 256, "P": 14, "Q": 14, "R": 1, "S": 1})
    mapping = build_mapping(arch, [[("P", 7), ("Q", 7)], [("C", 8)], [("K", 8)], [], [], [("K", 8), ("C", 2)]],
                            [[], [("C", 8)], [], [("K", 8)], [("C", 2), ("K", 2), ("P", 2), ("Q", 2)], []])
    return problem, arch, mapping


def test_polish_looks_one_move_past_a_plateau():
    problem, arch, mapping = _simba_plateau()
    assert check_arch(problem, arch, mapping) == []
    start = evaluate_mapping(problem, arch, mapping, "timeloop").cycles
    assert start == 51303
    legal = [m for m in neighbours(mapping) if not check_arch(problem, arch, m)]
    assert min(evaluate_mapping(problem, arch, m, "timeloop").cycles for m in legal) == start  # a plateau, no descent
    assert not any(evaluate_mapping(problem, arch, m, "timeloop").cycles < start for m in regroupings(mapping)
                   if not check_arch(problem, arch, m))
    best, _, _ = polish(problem, arch, mapping, LATENCY)
    assert evaluate_mapping(problem, arch, best, "timeloop").cycles == 50176


def test_polish_moves_a_factor_into_an_idle_fanout_under_a_latency_objective():
    """The MIP's answer on a buffer feeding two MACs left them half idle (P=2 as a DRAM loop: 126 cycles); a 3-second
    timeloop-mapper search put P2 across the MACs (76 cycles, timeloop-model). No single temporal move gets there."""
    from tileplan.mapping import LevelMapping, Mapping
    from tileplan.workload import parse_layer

    hw = load_descriptor((BENCH_DATA / "timeloop_fuzz/archs/fuzz1_010.yaml").read_text(), name="fuzz1_010")
    arch = hw.resolve(hw.dataflow_names[0])
    problem = Problem.from_layer(parse_layer({"op": "conv2d", "in_channels": 1, "out_channels": 1, "in_h": 16,
                                              "in_w": 3, "kernel": 3, "stride": [1, 2]}))
    start = Mapping(dataflow=arch.dataflow, levels=[
        LevelMapping(name="Buf1", temporal=[("P", 7), ("R", 3), ("S", 3)], spatial=[]),
        LevelMapping(name="Buf0", temporal=[], spatial=[]),
        LevelMapping(name="MainMemory", temporal=[("P", 2)], spatial=[]),
    ])
    assert evaluate_mapping(problem, arch, start, "timeloop").cycles == 126
    best, _, _ = polish(problem, arch, start, LATENCY, budget=400)
    assert best.levels[0].spatial == [("P", 2)]
    assert evaluate_mapping(problem, arch, best, "timeloop").cycles <= 76
