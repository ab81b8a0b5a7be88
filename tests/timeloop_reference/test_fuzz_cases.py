"""Tileplan against timeloop-model's recorded verdicts on the differential fuzzer's cases (bench/data/timeloop_fuzz:
random v0.3 architectures, random layers, cosa's / random / wild maps, seed 1; bench/data/timeloop_fuzz_seed2 and _seed3:
seeds 2 and 3 with `--extended`, architectures written with what Timeloop files in the wild use and the seed-1
generator did not; _seed4: seed 4 with `--extended --more`, adding loop constraints timeloop-model checks maps
against and levels' network / address-generation energies; _seed5 and _seed6: seeds 5 and 6 with `--net` too, most levels
stating their network's energies; _seed7: seed 7 with `--wide` too, the rest of what timeloop-model reads from an
architecture file (bench/results/timeloop_coverage.md), plus probes.jsonl (files timeloop-model stops on, or Tileplan
refuses by design, judged by both); _seed8: seed 8 with the same flags as seed 7, generated fresh after the
fixes seed 7 found (427 cases: all agree); _seed9: seed 9, same flags, on a new machine (428 cases: all agree; one
case's per-level fills a fraction apart);
bench/timeloop_fuzz.py made them with a build of NVlabs/timeloop@019f107 and re-judges them with --rejudge)."""

from collections import Counter

import pytest
from tests.conftest import BENCH_DATA

from tileplan.interop.timeloop_reference import Judged, access_mismatches, judge, load_cases

# folder: (at least this many cases, architectures, Timeloop rejections); every set must agree on every verdict, and
# on cycles within 1% and energy within 5% for every accepted case (the issue asks for 99% and 95%), as measured
# (bench/results/timeloop_fuzz.md, timeloop_fuzz_seed2.md, _seed3.md), except where SHARES says otherwise
SETS = {"timeloop_fuzz": (1000, 50, 100), "timeloop_fuzz_seed2": (250, 20, 25), "timeloop_fuzz_seed3": (250, 15, 40),
        "timeloop_fuzz_seed4": (250, 20, 120), "timeloop_fuzz_seed5": (250, 20, 100),
        "timeloop_fuzz_seed6": (400, 30, 150), "timeloop_fuzz_seed7": (400, 30, 150),
        "timeloop_fuzz_seed8": (400, 30, 150), "timeloop_fuzz_seed9": (400, 30, 150)}
CYCLES_WITHIN_1PCT = 1.0
ENERGY_WITHIN_5PCT = 1.0
# seed 4 (--extended --more, bench/results/timeloop_fuzz_seed4.md): every cycle count (fuzz4_011/L2's random2 and wild2
# were 39 where timeloop-model counts 40: its bandwidth demand is a sum of per-datatype quotients 60/9 + 18/9, which
# rounds above 78/9, and ceil(9 / slowdown) then gives 40) and every energy (119 of 130 while the inferred networks'
# router-energy / energy-per-hop were not read; tests/timeloop_reference/test_network_energy.py)
SHARES: dict[str, tuple[float, float]] = {}


@pytest.fixture(scope="module", params=sorted(SETS))
def judged(request) -> tuple[str, list[tuple[Judged, bool]]]:
    data = BENCH_DATA / request.param
    out = []
    for case in load_cases(data):
        j = judge(data, case)
        exact = j.agrees and case["timeloop"]["accepted"] and not access_mismatches(data, case)
        out.append((j, exact))
    return request.param, out


def test_the_set_is_the_issues_size(judged):
    name, judged = judged
    n_cases, n_archs, n_rejected = SETS[name]
    archs = {j.case["arch"] for j, _ in judged}
    assert len(judged) >= n_cases and len(archs) >= n_archs
    sources = Counter(j.case["source"].rstrip("0123456789") for j, _ in judged)
    assert set(sources) == {"cosa", "random", "wild"}
    assert sum(not j.case["timeloop"]["accepted"] for j, _ in judged) >= n_rejected  # rejections are judged too


def test_verdicts_agree_with_timeloop(judged):
    _, judged = judged
    wrong = [(j.case["id"], j.case["timeloop"]["error"], j.violations) for j, _ in judged if not j.agrees]
    assert wrong == []


def test_cycles_and_energy_agree_with_timeloop(judged):
    name, judged = judged
    acc = [j for j, _ in judged if j.case["timeloop"]["accepted"]]
    cycles = sum(abs(j.cycle_ratio - 1) <= 0.01 for j in acc) / len(acc)
    energy = sum(abs(j.energy_ratio - 1) <= 0.05 for j in acc) / len(acc)
    want_cycles, want_energy = SHARES.get(name, (CYCLES_WITHIN_1PCT, ENERGY_WITHIN_5PCT))
    assert cycles >= want_cycles - 1e-9, f"{cycles:.3f} of {len(acc)} within 1%"
    assert energy >= want_energy - 1e-9, f"{energy:.3f} of {len(acc)} within 5%"


def test_per_level_counts_are_timeloops(judged):
    """Reads, fills and updates per instance, utilized instances and tile words at every level, per tensor."""
    _, judged = judged
    acc = [exact for j, exact in judged if j.case["timeloop"]["accepted"]]
    # seed 1: 1,374 of 1,380: a few link words and fills off by fractions; seed 3: 242 of 243 (fuzz3_000/L0/random2:
    # a one-word input register's reads and fills, and the buffer above's reads, differ; cycles and energy agree)
    assert sum(acc) / len(acc) >= 0.995


def _probes():
    import json

    out = []
    for name in sorted(SETS):
        path = BENCH_DATA / name / "probes.jsonl"
        if path.exists():
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def test_probes_are_refused_where_timeloop_refuses_them():
    """The `--wide` probes (bench/timeloop_fuzz.py, seed 7 on): files with one change timeloop-model stops on, which
    Tileplan must refuse too, and files with a feature Tileplan refuses by design ('unmodelled': timeloop-model runs
    them), which it must refuse naming the field; and no file timeloop-model refuses may Tileplan import."""
    from tileplan.errors import InputError
    from tileplan.hardware.catalog import load_descriptor

    probes = _probes()
    assert len(probes) >= 40 and {p["expect"] for p in probes} == {"refuse", "unmodelled"}
    wrong = []
    for p in probes:
        try:
            load_descriptor(p["arch_yaml"], name="probe")
            refused = False
        except InputError:
            refused = True
        tl_refuses = p["timeloop_error"] is not None
        if refused != tl_refuses and not (p["expect"] == "unmodelled" and refused):
            wrong.append((p["probe"], p["timeloop_error"], refused))
    assert wrong == []
