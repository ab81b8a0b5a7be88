"""Timeloop mapping YAML <-> contract Mappings."""

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tileplan.check import check
from tileplan.errors import InputError
from tileplan.hardware.catalog import get_hardware, load_descriptor
from tileplan.interop.timeloop_map import (
    dump_mapping_yaml,
    from_timeloop_mapping,
    to_timeloop_bundle,
    to_timeloop_mapping,
    to_timeloop_problem,
)
from tileplan.mappers.gemmini_auto import gemmini_auto
from tileplan.mapping import LevelMapping, Mapping
from tileplan.problem import Problem
from tileplan.workload import parse_layer

CONV1 = dict(op="conv2d", in_channels=3, out_channels=64, in_h=224, in_w=224, kernel=7, stride=2, padding=3)


def _problem(**layer) -> Problem:
    return Problem.from_layer(parse_layer(layer))


def test_simba_conv1_imports_legal_and_round_trips_to_the_same_text(examples):
    text = (examples / "timeloop" / "simba_conv1_map.yaml").read_text()
    hw, p = get_hardware("simba"), _problem(**CONV1)
    m = from_timeloop_mapping(text, hw, p)
    assert check(p, hw, m) == []
    assert m.padded_dims == {}
    lv = {x.name: x for x in m.levels}
    assert lv["Registers"].temporal == [("Q", 7)]
    assert lv["GlobalBuffer"].spatial == [("P", 2), ("K", 8)]
    assert lv["DRAM"].temporal == [("R", 7), ("S", 7), ("P", 7), ("Q", 16)]  # innermost first
    out = dump_mapping_yaml(to_timeloop_mapping(m, hw))
    assert out.strip() == text.strip()


def test_round_trip_gemmini_auto_mappings(examples):
    hw = get_hardware("gemmini-16x16")
    for layer in (CONV1, dict(op="conv2d", in_channels=256, out_channels=64, in_h=56, in_w=56, kernel=1),
                  dict(op="matmul", M=128, K=768, N=768)):
        p = _problem(**layer)
        m = gemmini_auto(p, hw).mapping
        doc = yaml.safe_load(dump_mapping_yaml(to_timeloop_mapping(m, hw)))
        back = from_timeloop_mapping(doc, hw, p)
        want = m.model_copy(update={"double_buffered": {}})  # Timeloop has no double-buffering field
        assert back.canonical() == want.canonical()
        # every level has a temporal entry, levels with a fan-out a spatial one, then one bypass per level
        kinds = [(e["target"], e["type"]) for e in doc["mapping"]]
        assert kinds[:5] == [("Registers", "temporal"), ("Accumulator", "spatial"), ("Accumulator", "temporal"),
                             ("Scratchpad", "spatial"), ("Scratchpad", "temporal")]
        assert [e["type"] for e in doc["mapping"][-4:]] == ["bypass"] * 4
        for e in doc["mapping"][:-4]:
            assert [t.split("=")[0] for t in e["factors"].split()] == list("RSPQCKN")
            assert sorted(e["permutation"]) == sorted("RSPQCKN")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_round_trip_random_orders(data):
    """Any loop order survives export and import."""
    hw = get_hardware("simba")
    p = _problem(op="conv2d", in_channels=8, out_channels=16, in_h=12, in_w=12, kernel=3, padding=1, batch=2)
    dims = [(d, v) for d, v in p.dims.items() if v > 1 and d != "G"]
    names = [lv.name for lv in hw.memory_levels]
    placed = {n: [] for n in names}
    for d, v in dims:
        placed[data.draw(st.sampled_from(names))].append((d, v))
    levels = [LevelMapping(name=n, temporal=data.draw(st.permutations(placed[n]))) for n in names]
    m = Mapping(levels=levels, dataflow="weight_stationary")
    back = from_timeloop_mapping(dump_mapping_yaml(to_timeloop_mapping(m, hw)), hw, p)
    assert back.canonical() == m.canonical()


def test_groups_export_as_a_dimension_or_fold_when_asked():
    """A grouped conv goes to Timeloop with a problem shape that has G (every data space indexed by it) and G factors
    in the map, and reads back to the same mapping; with fold_groups, G is folded into N."""
    hw = get_hardware("gemmini-16x16")
    p = _problem(op="conv2d", in_channels=32, out_channels=32, in_h=8, in_w=8, kernel=3, padding=1, groups=32)
    m = gemmini_auto(p, hw).mapping
    exact = to_timeloop_mapping(m, hw)
    assert all("G=" in e["factors"] and "G" in e["permutation"] for e in exact["mapping"] if "factors" in e)
    prob = to_timeloop_problem(p, m)["problem"]
    assert prob["instance"]["G"] == 32 and prob["instance"]["N"] == 1
    assert all(ds["projection"][:2] in ([[["G"]], [["C"]]], [[["N"]], [["G"]]]) for ds in prob["shape"]["data-spaces"])
    assert from_timeloop_mapping(dump_mapping_yaml(exact), hw, p).canonical().levels == m.canonical().levels
    notes: list[str] = []
    doc = to_timeloop_mapping(m, hw, fold_groups=True, notes=notes)
    assert any("G=32 folded into N" in n for n in notes)
    dram = [e for e in doc["mapping"] if e["target"] == "DRAM" and e["type"] == "temporal"][0]
    assert "N=32" in dram["factors"]
    assert to_timeloop_problem(p, m, fold_groups=True)["problem"]["instance"]["N"] == 32


def test_import_errors_name_the_entry(examples):
    hw, p = get_hardware("simba"), _problem(**CONV1)
    doc = yaml.safe_load((examples / "timeloop" / "simba_conv1_map.yaml").read_text())
    bad = yaml.safe_load(yaml.safe_dump(doc))
    bad["mapping"][0]["target"] = "Nowhere"
    with pytest.raises(InputError) as err:
        from_timeloop_mapping(bad, hw, p)
    assert err.value.loc == ("mapping", 0, "target")
    bad = yaml.safe_load(yaml.safe_dump(doc))
    bad["mapping"][8]["factors"] = "R=7 S=7 P=7 Q=8 C=1 K=1 N=1"  # Q now multiplies to 56 < 112
    with pytest.raises(InputError, match="factors of Q"):
        from_timeloop_mapping(bad, hw, p)
    bad = yaml.safe_load(yaml.safe_dump(doc))
    bad["mapping"][9]["keep"] = ["Inputs"]  # registers keeping inputs: no simba dataflow does that
    bad["mapping"][9]["bypass"] = ["Weights", "Outputs"]
    with pytest.raises(InputError, match="match no dataflow"):
        from_timeloop_mapping(bad, hw, p)
    # a permutation leaving out Q (factor 16) is completed as timeloop-model completes it: Q outermost
    # (tests/interop/test_timeloop_map_coverage.py)
    partial = yaml.safe_load(yaml.safe_dump(doc))
    partial["mapping"][8]["permutation"] = "RSPCKN"
    assert {x.name: x for x in from_timeloop_mapping(partial, hw, p).levels}["DRAM"].temporal[-1] == ("Q", 16)


def test_bundle_has_arch_problem_and_mapping():
    hw = get_hardware("gemmini-16x16")
    p = _problem(op="conv2d", in_channels=256, out_channels=64, in_h=56, in_w=56, kernel=1)
    m = gemmini_auto(p, hw).mapping
    doc = yaml.safe_load(to_timeloop_bundle(p, hw, m))
    assert set(doc) == {"architecture", "problem", "mapping"}
    inst = doc["problem"]["instance"]
    assert (inst["P"], inst["Q"]) == (m.padded_dims["P"], m.padded_dims["Q"])  # padded problem
    arch = load_descriptor({"architecture": doc["architecture"]}, name="back")
    assert [lv.name for lv in arch.memory_levels] == [lv.name for lv in hw.memory_levels]
