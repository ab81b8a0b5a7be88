"""Grouped and depthwise layers with several groups on the array at once (Problem.packed, Mapping.group_pack,
tileplan.mappers.packing): the packed problem, the checker and the cost model read a packed plan as the packed
layer, and the planner packs where the cost model says it pays."""

from __future__ import annotations

import pytest

from tileplan.check import check
from tileplan.hardware.catalog import get_hardware
from tileplan.mappers.packing import group_packs
from tileplan.plan import ScheduleOptions, evaluate, make_plan
from tileplan.problem import Problem
from tileplan.workload import parse_layer

HW = get_hardware("gemmini-16x16")


def _dw(channels: int = 48, size: int = 14, stride: int = 1) -> object:
    return parse_layer(dict(op="conv2d", in_channels=channels, out_channels=channels, in_h=size, in_w=size,
                            kernel=3, padding=1, stride=stride, groups=channels, bias=True))


def test_packed_problem_keeps_the_layer_and_counts_its_zeros():
    p = Problem.from_layer(_dw(48))
    q = p.packed(16)
    assert (q.dims["G"], q.dims["C"], q.dims["K"]) == (3, 16, 16) and q.group_pack == 16
    assert q.macs == 16 * p.macs and q.useful_macs == p.macs == p.useful_macs
    assert q.key() == {**p.key(), "dims": dict(sorted(q.dims.items())), "group_pack": 16}
    assert p.packed(16) is q and p.packed(1) is p and q.mapped_by(16) is q and p.mapped_by(None) is p
    with pytest.raises(ValueError, match="does not divide"):
        p.packed(5)
    with pytest.raises(ValueError, match="packed 16 ways"):
        q.packed(2)


def test_candidates_fill_the_array_on_library_hardware_only():
    assert group_packs(Problem.from_layer(_dw(48)), HW, "cosa") == [16]
    assert group_packs(Problem.from_layer(_dw(40)), HW, "cosa") == [10]  # the largest divisor the array holds
    grouped = Problem.from_layer(parse_layer(dict(op="conv2d", in_channels=16, out_channels=24, in_h=8, in_w=8,
                                                  kernel=3, groups=8)))  # C = 2, K = 3 per group
    assert group_packs(grouped, HW, "cosa") == [4]  # 5 x 3 <= 16 but 5 does not divide 8
    assert group_packs(Problem.from_layer(_dw(48)), HW, "gemmini-auto") == []  # the library runs group by group
    assert group_packs(Problem.from_layer(_dw(48)), get_hardware("simba"), "cosa") == []  # no code runs it there
    dense = Problem.from_layer(parse_layer(dict(op="conv2d", in_channels=16, out_channels=16, in_h=8, in_w=8,
                                                kernel=3)))
    assert group_packs(dense, HW, "cosa") == []


def test_planner_packs_a_depthwise_layer_and_the_plan_reads_back():
    layer = _dw(64, 28)
    plan = make_plan(layer, HW, ScheduleOptions(time_limit_s=5))
    assert plan.mapping.group_pack == 16
    assert any("16 groups packed per block" in n for n in plan.notes)
    assert "(16 groups packed per block)" in plan.mapping.describe()
    # the metrics count the layer's own MACs; the array runs the block-diagonal zeros too
    problem = Problem.from_layer(layer)
    assert plan.metrics.macs == problem.macs and plan.metrics.padded_macs >= 16 * problem.macs
    assert plan.speedup is not None and plan.speedup > 3  # vs Gemmini's library, one channel at a time
    # every door reads the plan as the packed layer: the checker, /evaluate, the same cycles
    assert check(problem, HW, plan.mapping) == []
    ev = evaluate(layer, HW, plan.mapping)
    assert ev.valid and ev.metrics.cycles == pytest.approx(plan.metrics.cycles)
    # the same factors read as the unpacked layer do not multiply to its bounds
    assert check(problem, HW, plan.mapping.model_copy(update={"group_pack": None}))
    bad = evaluate(layer, HW, plan.mapping.model_copy(update={"group_pack": 5}))
    assert not bad.valid and "group_pack" in bad.violations[0]


def test_packing_competes_with_the_layer_as_it_is():
    """The planner keeps whichever of the layer as it is and the packed layer scores better under the objective
    (here the packed one: 16 channels per preload instead of one), and plans a layer with one group as before."""
    from tileplan.mappers.score import score_mapping
    from tileplan.plan import _run_one_mapper

    plain = make_plan(parse_layer(dict(op="conv2d", in_channels=16, out_channels=16, in_h=8, in_w=8, kernel=3)),
                      HW, ScheduleOptions(time_limit_s=5, baseline=False))
    assert plain.mapping.group_pack is None
    layer = _dw(32, 8)
    opts = ScheduleOptions(time_limit_s=5, baseline=False)
    plan = make_plan(layer, HW, opts)
    problem = Problem.from_layer(layer)
    as_is, _, metrics, _ = _run_one_mapper("cosa", problem, HW, opts.mapper_options())
    arch = HW.resolve(plan.mapping.dataflow)
    assert plan.mapping.group_pack == 16 and plan.metrics.cycles < metrics.cycles / 3
    assert (score_mapping(problem, arch, plan.mapping, plan.metrics, opts.objective)
            < score_mapping(problem, arch, as_is, metrics, opts.objective))
