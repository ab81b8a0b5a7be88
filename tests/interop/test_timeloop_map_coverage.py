"""Mapping directives as timeloop-model (NVlabs/timeloop@019f107, mapping/parser.cpp) reads them: a partial
permutation is completed in the problem shape's dimension order, factors not stated are 1, a factor 0 is the whole
dimension, `D=a,b` is a residual (an imperfect factorization, refused by name: Tileplan does not model it), a level
stated twice takes its last entry; directives Tileplan does not model (skew, no_link_transfer,
no_multicast_no_reduction, no_temporal_reuse) are refused by name rather than read past."""

import pytest

from tileplan.errors import InputError
from tileplan.hardware.catalog import load_descriptor
from tileplan.interop.timeloop_map import read_timeloop_mapping, timeloop_verdict
from tileplan.problem import Problem


def _hw():
    doc = {"architecture": {"version": 0.3, "subtree": [{"name": "sys", "local": [
        {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 8}},
        {"name": "GLB", "class": "SRAM", "attributes": {"entries": 65536, "word-bits": 8}}],
        "subtree": [{"name": "PE[0..3]", "local": [
            {"name": "Reg", "class": "regfile", "attributes": {"entries": 64, "word-bits": 8}},
            {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8}}]}]}]}}
    return load_descriptor(doc, name="cov")


def _problem():
    dims = {**dict.fromkeys(("N", "G", "K", "C", "P", "Q", "R", "S"), 1), "K": 8, "C": 4, "P": 6, "Q": 2}
    return Problem(dims=dims, stride=(1, 1), dilation=(1, 1))


def _map(reg_t="", glb_s="K=4", glb_t="", dram_t="", extra=()):
    return {"mapping": [
        {"target": "Reg", "type": "temporal", "factors": reg_t, "permutation": ""},
        {"target": "GLB", "type": "spatial", "factors": glb_s, "permutation": "KCPQRSN"},
        {"target": "GLB", "type": "temporal", "factors": glb_t, "permutation": "CPQ"},
        {"target": "DRAM", "type": "temporal", "factors": dram_t, "permutation": "KCPQRSN"},
        *extra]}


def test_a_partial_permutation_is_completed_in_the_shape_s_order():
    """Timeloop appends the dimensions a permutation leaves out, in the problem shape's order (Tileplan writes the
    CNN layer as C K R S N P Q); the importer refused such a file."""
    doc = _map(reg_t="K=2 P=3", glb_t="C=4 P=2 Q=2")
    doc["mapping"][0]["permutation"] = "P"  # K (factor 2) left out: it goes outside P
    tm = read_timeloop_mapping(doc, _hw(), _problem())
    reg = tm.mapping.levels[0]
    assert reg.temporal == [("P", 3), ("K", 2)]
    doc["mapping"][0]["permutation"] = ""  # nothing stated: the shape's order, K before P
    assert read_timeloop_mapping(doc, _hw(), _problem()).mapping.levels[0].temporal == [("K", 2), ("P", 3)]


def test_factors_are_read_as_timeloop_model_reads_them():
    # unstated dimensions are 1, `0` is the whole dimension, separators are free ("R=1, S=1")
    doc = _map(reg_t="K=2, P=0", glb_t="C=4,Q=2")
    tm = read_timeloop_mapping(doc, _hw(), _problem())
    assert dict(tm.mapping.levels[0].temporal) == {"K": 2, "P": 6}
    assert dict(tm.mapping.levels[1].temporal) == {"C": 4, "Q": 2}
    # a residual equal to the factor is no residual
    doc = _map(reg_t="K=2,2 P=6", glb_t="C=4 Q=2")
    assert dict(read_timeloop_mapping(doc, _hw(), _problem()).mapping.levels[0].temporal) == {"K": 2, "P": 6}
    with pytest.raises(InputError) as err:
        read_timeloop_mapping(_map(reg_t="K=3,2 P=6", glb_t="C=4 Q=2"), _hw(), _problem())
    assert "residual" in err.value.msg and err.value.loc[-1] == "factors"


def test_a_level_stated_twice_takes_its_last_entry():
    doc = _map(reg_t="K=2 P=6", glb_t="C=4 Q=2",
               extra=[{"target": "Reg", "type": "temporal", "factors": "P=6 K=2", "permutation": "PK"}])
    tm = read_timeloop_mapping(doc, _hw(), _problem())
    assert tm.mapping.levels[0].temporal == [("P", 6), ("K", 2)]


@pytest.mark.parametrize("entry, key", [
    ({"target": "GLB", "type": "skew", "modulo": 2, "terms": []}, "skew"),
    ({"target": "GLB", "type": "spatial", "factors": "K=4", "permutation": "K", "no_link_transfer": ["Weights"]},
     "no_link_transfer"),
    ({"target": "GLB", "type": "spatial", "factors": "K=4", "permutation": "K",
      "no_multicast_no_reduction": ["Inputs"]}, "no_multicast_no_reduction"),
    ({"target": "Reg", "type": "temporal", "factors": "K=2 P=6", "permutation": "KP",
      "no_temporal_reuse": ["Outputs"]}, "no_temporal_reuse"),
])
def test_directives_tileplan_does_not_model_are_refused_by_name(entry, key):
    doc = _map(reg_t="K=2 P=6", glb_t="C=4 Q=2")
    doc["mapping"] = [e for e in doc["mapping"] if (e["target"], e["type"]) != (entry["target"], entry["type"])]
    doc["mapping"].append(entry)
    with pytest.raises(InputError) as err:
        timeloop_verdict(doc, _hw(), _problem())
    assert key in f"{err.value.loc} {err.value.msg}"
    # empty lists change nothing
    if key.startswith("no_"):
        entry[key] = []
        assert timeloop_verdict(doc, _hw(), _problem())[0] is not None


def test_keep_sets_are_what_timeloop_model_keeps_a_tensor_no_entry_bypasses_is_kept():
    """timeloop-model keeps at a level every tensor its mapping does not bypass there (the architecture's own
    keep / bypass constraints do not enter its verdict): a level with no bypass entry keeps all three, and a keep
    list alone bypasses nothing. The importer took such levels' keep-sets from the architecture's dataflow."""
    doc = {"architecture": {"version": 0.3, "subtree": [{"name": "sys", "local": [
        {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 8}},
        {"name": "GLB", "class": "SRAM", "attributes": {"entries": 65536, "word-bits": 8}}],
        "subtree": [{"name": "PE[0..3]", "local": [
            {"name": "Reg", "class": "regfile", "attributes": {"entries": 64, "word-bits": 8}},
            {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8}}]}]}]},
        "architecture_constraints": {"targets": [
            {"target": "Reg", "type": "datatype", "keep": ["Weights"], "bypass": ["Inputs", "Outputs"]}]}}
    hw = load_descriptor(doc, name="regw")
    full = _map(reg_t="C=4", glb_t="P=6 Q=2 K=2", extra=[
        {"target": "Reg", "type": "bypass", "keep": ["Weights"], "bypass": ["Inputs", "Outputs"]}])
    full["mapping"][2]["permutation"] = "PQK"
    assert timeloop_verdict(full, hw, _problem())[0] is not None
    for extra in ([], [{"target": "Reg", "type": "bypass", "keep": ["Weights"]}]):
        doc2 = _map(reg_t="C=4", glb_t="P=6 Q=2 K=2", extra=extra)
        with pytest.raises(InputError) as err:
            timeloop_verdict(doc2, hw, _problem())
        assert "match no dataflow" in err.value.msg and "Reg" in err.value.msg
    # on an architecture whose levels keep all three, a file without bypass entries reads as it stands
    assert timeloop_verdict(_map(reg_t="C=4", glb_t="P=6 Q=2 K=2"), _hw(), _problem())[0] is not None
