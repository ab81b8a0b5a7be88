"""Tileplan against timeloop-model's recorded verdicts (bench/data/timeloop_reference, 684 cases on 4 Timeloop
architecture files): the verdict on every map, and on accepted maps the Timeloop-semantics cycles and energy."""

from collections import defaultdict

import pytest
import yaml
from tests.conftest import BENCH_DATA

from tileplan.check import check
from tileplan.cost.timeloop import timeloop_counts
from tileplan.hardware.catalog import load_descriptor
from tileplan.interop.timeloop_map import from_timeloop_mapping, timeloop_verdict, to_timeloop_bundle
from tileplan.interop.timeloop_reference import Judged, case_problem, judge, load_cases
from tileplan.problem import Problem

DATA = BENCH_DATA / "timeloop_reference"
ARCHS = ("simba_arch_legacy", "gemmini_arch_v03", "gemmini_arch_legacy", "diannao_arch_v02")
# Share of accepted cases whose Timeloop-semantics cycles are within 5% of timeloop-model's, as measured (the issue
# asks for >= 95% per architecture): all of them, and all but a handful within 1 cycle in 1000.
CYCLES_WITHIN_5PCT = dict.fromkeys(("simba_arch_legacy", "gemmini_arch_v03", "gemmini_arch_legacy", "diannao_arch_v02"), 1.0)


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
    # timeloop-model rounds its slowdown in floating point: a cycle off here and there, nothing more
    assert sum(abs(r - 1) <= 1e-3 for r in ratios) >= len(ratios) - 2


@pytest.mark.parametrize("arch", ARCHS)
def test_energy_agrees_with_timeloop(judged, arch):
    """Timeloop's built-in energy table on each level's geometry (cost/timeloop_energy.py) times exact counts: every
    accepted case's energy to within 1e-4 (the issue asks for 15% on 95%)."""
    off = [(j.case["id"], j.energy_ratio) for j in judged[arch]
           if j.case["timeloop"]["accepted"] and not abs(j.energy_ratio - 1) <= 1e-4]
    assert off == []


@pytest.mark.parametrize("arch", ARCHS)
def test_access_counts_agree_with_timeloop(judged, arch):
    """Per level and tensor, the reads, fills, updates (per instance), utilized instances and tile sizes are
    timeloop-model's, including the legacy Gemmini file's one accumulator and inputs shared by an unrolled P and R."""
    hw = load_descriptor((DATA / "archs" / f"{arch}.yaml").read_text(), name=arch)
    wrong = []
    for j in judged[arch]:
        tl = j.case["timeloop"]
        if not tl["accepted"]:
            continue
        problem = case_problem(j.case)
        mapping = from_timeloop_mapping(j.case["map_yaml"], hw, problem)
        counts = timeloop_counts(problem.for_hardware("bounding_box"), hw.resolve(mapping.dataflow), mapping)
        for lc in counts.levels:
            ours = {t: [c.reads, c.fills, c.updates, c.instances, c.capacity] for t, c in lc.tensors.items()}
            theirs = {t: [v[k] for k in ("reads", "fills", "updates", "instances", "capacity")]
                      for t, v in tl["levels"][lc.name].items() if t in "WIO"}
            if ours != theirs:
                wrong.append((j.case["id"], lc.name, ours, theirs))
    assert wrong == []


def _bundle_verdict(text: str, hw, name: str):
    """timeloop_verdict of a bundle's mapping on its own problem (the padded one for a padded plan), against the
    source architecture file `hw`; and the bundle's architecture read back."""
    doc = yaml.safe_load(text)
    inst = doc["problem"]["instance"]
    dims = {d: inst[d] for d in ("N", "K", "C", "P", "Q", "R", "S")} | {"G": 1}
    problem = Problem(dims=dims, stride=(inst["Wstride"], inst["Hstride"]),
                      dilation=(inst["Wdilation"], inst["Hdilation"]))
    back = load_descriptor({"architecture": doc["architecture"]}, name=name)
    return timeloop_verdict({"mapping": doc["mapping"]}, hw, problem)[1], back


@pytest.mark.parametrize("arch", ARCHS)
def test_reexported_plans_are_accepted(judged, arch):
    """Tileplan's recorded plans (cosa and random), read back and exported again as bundles: every one the checker
    still calls legal (the recorded capacity rejections came from exact strided tiles, which Timeloop imports no
    longer use) is accepted, padded plans with their padded problem, 2-D meshes with a split, the legacy Gemmini
    file with its one accumulator."""
    hw = load_descriptor((DATA / "archs" / f"{arch}.yaml").read_text(), name=arch)
    exported = 0
    for j in judged[arch]:
        case = j.case
        if case["source"] == "timeloop-mapper" or case.get("padded_problem"):
            continue
        problem = case_problem(case)
        mapping = from_timeloop_mapping(case["map_yaml"], hw, problem)
        violations = check(problem, hw, mapping)
        if violations:
            # bounding-box strided tiles over capacity (Timeloop's first error may name another problem of the
            # same map), or a spatial dimension the Gemmini array cannot unroll: plans Tileplan no longer makes
            assert all(" holds " in v or "cannot unroll" in v for v in violations), (case["id"], violations)
            continue
        text = to_timeloop_bundle(problem, hw, mapping)
        if mapping.padded_dims:
            assert text.startswith("# padded problem: ")
        verdict, back = _bundle_verdict(text, hw, arch)
        assert verdict == [], (case["id"], verdict)
        assert [(lv.name, lv.capacity, lv.instances, lv.mesh_x) for lv in back.memory_levels] == [
            (lv.name, lv.capacity, lv.instances, lv.mesh_x) for lv in hw.memory_levels]
        exported += 1
    assert exported >= 60
