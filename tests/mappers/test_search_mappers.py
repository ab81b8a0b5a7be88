"""random and exhaustive mappers: legality, determinism, optimality against brute force."""

import itertools
import math

import pytest

from tileplan.check import check, check_arch
from tileplan.cost import evaluate_mapping
from tileplan.errors import InputError
from tileplan.hardware.catalog import get_hardware
from tileplan.hardware.model import HardwareDescriptor
from tileplan.mappers.base import MapperOptions, Objective, get_mapper
from tileplan.mappers.exhaustive import ExhaustiveMapper, enumerate_space
from tileplan.mappers.gemmini_auto import gemmini_auto
from tileplan.mappers.random_search import RandomMapper
from tileplan.mappers.score import score_mapping
from tileplan.mappers.space import MappingSpace, count_factorizations, level_orders, ordered_factorizations
from tileplan.problem import Problem
from tileplan.workload import parse_layer

TINY = HardwareDescriptor.model_validate({
    "name": "gemmini-4x4-tiny",
    "pe_array": {"rows": 4, "cols": 4, "dataflows": [{"name": "weight_stationary", "levels": {
        "Registers": {"keeps": ["W"]}, "Accumulator": {"spatial_dims": ["C"]}, "Scratchpad": {"spatial_dims": ["K"]}}}]},
    "memory_levels": [
        {"name": "Registers", "capacity": 64, "word_bits": 32, "instances": 16, "keeps": ["W"]},
        {"name": "Accumulator", "capacity": 512, "word_bits": 32, "instances": 4, "keeps": ["O"], "bandwidth": 8,
         "buffer_count": 2},
        {"name": "Scratchpad", "capacity": 512, "word_bits": 8, "instances": 1, "keeps": ["I", "W"], "bandwidth": 8,
         "buffer_count": 2},
        {"name": "DRAM", "keeps": ["W", "I", "O"], "bandwidth": 4}],
})
# Two levels, no spatial fan-out to speak of: small enough to brute-force every order and buffering.
TWO = HardwareDescriptor.model_validate({
    "name": "two-level", "pe_array": {"rows": 1, "cols": 2, "dataflows": [{"name": "ws"}]},
    "memory_levels": [
        {"name": "Buf", "capacity": 96, "word_bits": 8, "instances": 1, "keeps": ["I", "W", "O"], "bandwidth": 4,
         "buffer_count": 2, "spatial_dims": ["K", "C"]},
        {"name": "DRAM", "keeps": ["W", "I", "O"], "bandwidth": 1}],
})


def _problem(**layer) -> Problem:
    return Problem.from_layer(parse_layer(layer))


def test_factorizations_complete_and_counted():
    fs = ordered_factorizations(12, 3)
    assert len(fs) == len(set(fs)) == count_factorizations(12, 3) == 18
    assert all(math.prod(f) == 12 for f in fs)
    assert ordered_factorizations(1, 4) == [(1, 1, 1, 1)]


def test_level_orders_put_each_reuse_group_first():
    orders = level_orders(["K", "C", "P"])
    assert {o[0] for o in orders} == {"K", "C", "P"} and len(orders) == 3
    assert level_orders(["P", "Q"]) == [("P", "Q")]  # one group: one order
    assert len(level_orders(["K", "C", "P"], all_orders=True)) == 6


@pytest.mark.parametrize("hw,layer", [
    (TINY, dict(op="matmul", M=4, K=8, N=8)),
    (get_hardware("simba"), dict(op="matmul", M=2, K=4, N=4)),
    (get_hardware("eyeriss-os"), dict(op="matmul", M=2, K=2, N=8)),
])
def test_random_is_legal_deterministic_and_seeded(hw, layer):
    p = _problem(**layer)
    a = RandomMapper().map(p, hw, MapperOptions(samples=60, seed=3))
    b = RandomMapper().map(p, hw, MapperOptions(samples=60, seed=3))
    assert a.mapping == b.mapping and a.solver.objective == b.solver.objective
    assert check(p, hw, a.mapping) == []
    c = RandomMapper().map(p, hw, MapperOptions(samples=60, seed=4))
    assert check(p, hw, c.mapping) == []


def test_random_samples_are_all_legal():
    import random

    from tileplan.mappers.random_search import sample_mapping
    p = _problem(op="conv2d", in_channels=64, out_channels=128, in_h=28, in_w=28, kernel=3, padding=1)
    for name in ("gemmini-16x16", "simba", "eyeriss-os"):
        hw = get_hardware(name)
        for df in hw.dataflow_names:
            space = MappingSpace(p, hw.resolve(df))
            rng = random.Random(0)
            for _ in range(40):
                assert check_arch(p, space.arch, sample_mapping(space, rng)) == []


def _brute_force(problem, hw, objective):
    """Every factorisation, every permutation per level, every double-buffering subset: the optimum."""
    arch = hw.resolve()
    space = MappingSpace(problem, arch)
    best = math.inf
    per_dim = {d: ordered_factorizations(problem.dims[d], len(space.slots[d])) for d in space.dims}
    for combo in itertools.product(*per_dim.values()):
        assign = dict(zip(per_dim, combo))
        tdims = space.temporal_dims(assign)
        dbs = [dict(zip(space.db_levels, c)) for c in itertools.product(*[
            [frozenset(s) for r in range(4) for s in itertools.combinations(sorted(arch.levels[i].keeps), r)]
            for i in space.db_levels])]
        for db in dbs:
            for orders in itertools.product(*[list(itertools.permutations(t)) for t in tdims]):
                m = space.build(assign, list(orders), db)
                if check_arch(problem, arch, m):
                    continue
                best = min(best, score_mapping(problem, arch, m, evaluate_mapping(problem, arch, m), objective))
    return best


@pytest.mark.parametrize("objective", [Objective(), Objective(latency=1, energy=0, memory_utilization=0),
                                       Objective(latency=0, energy=1, memory_utilization=0)])
def test_exhaustive_matches_brute_force(objective):
    p = _problem(op="conv2d", in_channels=2, out_channels=2, in_h=4, in_w=3, kernel=[2, 1], batch=1)
    res = ExhaustiveMapper().map(p, TWO, MapperOptions(objective=objective, time_limit_s=120))
    assert res.solver.status == "optimal" and check(p, TWO, res.mapping) == []
    assert res.solver.objective == pytest.approx(_brute_force(p, TWO, objective), rel=1e-12)


def test_exhaustive_beats_or_ties_every_other_mapper_on_a_tiny_gemmini():
    p = _problem(op="matmul", M=4, K=8, N=8)
    opts = MapperOptions(time_limit_s=300, samples=100)
    ex = get_mapper("exhaustive").map(p, TINY, opts)
    assert ex.solver.status == "optimal" and check(p, TINY, ex.mapping) == []
    arch = TINY.resolve()
    for other in (RandomMapper().map(p, TINY, opts).mapping, gemmini_auto(p, TINY).mapping):
        assert not other.padded_dims
        s = score_mapping(p, arch, other, evaluate_mapping(p, arch, other), opts.objective)
        assert ex.solver.objective <= s + 1e-12


def test_exhaustive_refuses_big_spaces_before_working():
    hw = get_hardware("gemmini-16x16")
    p = _problem(op="conv2d", in_channels=64, out_channels=64, in_h=56, in_w=56, kernel=3, padding=1)
    with pytest.raises(InputError) as err:
        get_mapper("exhaustive").map(p, hw, MapperOptions())
    assert "exhaustive" in err.value.msg and "50,000" in err.value.msg
    leaves, count = enumerate_space(MappingSpace(p, hw.resolve()), cap=1000)
    assert count > 1000


def test_exhaustive_reports_time_limit():
    p = _problem(op="matmul", M=4, K=8, N=8)
    res = ExhaustiveMapper().map(p, TINY, MapperOptions(time_limit_s=0.5))
    assert res.solver.status == "time_limit" and check(p, TINY, res.mapping) == []
