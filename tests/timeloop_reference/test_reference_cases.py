"""Tileplan against timeloop-model's recorded verdicts (bench/data/timeloop_reference, 684 cases on 4 Timeloop
architecture files): the verdict on every map, and on accepted maps the Timeloop-semantics cycles and energy."""

from collections import defaultdict

import pytest

from tests.conftest import BENCH_DATA
from tileplan.interop.timeloop_reference import Judged, judge, load_cases

DATA = BENCH_DATA / "timeloop_reference"
ARCHS = ("simba_arch_legacy", "gemmini_arch_v03", "gemmini_arch_legacy", "diannao_arch_v02")
# Accepted cases whose Timeloop-semantics cycles are within 5% of timeloop-model's, as measured (the issue asks
# for >= 95% per architecture). The one legacy-Gemmini miss: DRAM-bound, a sliding input window Timeloop credits
# more finely than the model does.
CYCLES_WITHIN_5PCT = {"simba_arch_legacy": 1.0, "gemmini_arch_v03": 1.0, "gemmini_arch_legacy": 0.975,
                      "diannao_arch_v02": 1.0}


@pytest.fixture(scope="module")
def judged() -> dict[str, list[Judged]]:
    out: dict[str, list[Judged]] = defaultdict(list)
    for case in load_cases(DATA):
        j = judge(DATA, case)
        out[j.arch].append(j)
    return out


def test_every_architecture_has_its_cases(judged):
    assert {a: len(v) for a, v in judged.items()} == {
        "simba_arch_legacy": 168, "gemmini_arch_v03": 176, "gemmini_arch_legacy": 176, "diannao_arch_v02": 164}


@pytest.mark.parametrize("arch", ARCHS)
def test_verdicts_agree_with_timeloop(judged, arch):
    """Tileplan calls a map invalid exactly when timeloop-model rejects it (padded factors on the real problem,
    bounding-box tiles over capacity, X expansion past a 2-D mesh, a spatial entry where the source has no fan-out)."""
    wrong = [(j.case["id"], j.case["timeloop"]["error"], j.violations) for j in judged[arch] if not j.agrees]
    assert wrong == []


@pytest.mark.parametrize("arch", ARCHS)
def test_rejection_reasons_name_timeloops_reason(judged, arch):
    kinds = {"not equal to the dimension size": "multiply to", "exceeds buffer capacity": "exceeds buffer capacity",
             "X expansion": "X expansion", "cannot find spatial tiling level": "no spatial tiling level"}
    for j in judged[arch]:
        err = j.case["timeloop"]["error"]
        if err is None:
            continue
        ours = [want for theirs, want in kinds.items() if theirs in err]
        assert ours, f"unknown Timeloop error kind: {err}"
        assert any(ours[0] in v for v in j.violations), (j.case["id"], err, j.violations)


@pytest.mark.parametrize("arch", ARCHS)
def test_cycles_agree_with_timeloop(judged, arch):
    ratios = [j.cycle_ratio for j in judged[arch] if j.case["timeloop"]["accepted"]]
    assert all(r is not None for r in ratios)
    within = sum(abs(r - 1) <= 0.05 for r in ratios) / len(ratios)
    assert within >= CYCLES_WITHIN_5PCT[arch], f"{arch}: {within:.3f} of {len(ratios)} within 5%"
    # and nothing is far off: the worst case is still within 25%
    assert max(abs(r - 1) for r in ratios) < 0.25
