"""What a Timeloop architecture file may state that the fuzzer's earlier rounds never wrote, read the way
timeloop-model (NVlabs/timeloop@019f107) reads it, or refused by name where Tileplan does not model it (never read
past: a feature passed over would be a silently wrong number). The coverage audit is bench/results/
timeloop_coverage.md; bench/timeloop_fuzz.py --wide (seed 7) checks the supported forms against timeloop-model."""

import copy

import pytest
import yaml

from tileplan.errors import InputError
from tileplan.hardware.catalog import load_descriptor


def _tree(glb=None, reg=None, mac=None, extra_local=(), version=0.3):
    arch = {"subtree": [{"name": "sys", "local": [
        {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 8}},
        {"name": "GLB", "class": "SRAM", "attributes": {"entries": 1024, "word-bits": 8, **(glb or {})}},
        *extra_local],
        "subtree": [{"name": "PE[0..3]", "local": [
            {"name": "Reg", "class": "regfile", "attributes": {"entries": 4, "word-bits": 8, **(reg or {})}},
            {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8, **(mac or {})}}]}]}]}
    if version is not None:
        arch = {"version": version, **arch}
    return arch


def _doc(**kw):
    return {"architecture": _tree(**kw), "architecture_constraints": {"targets": [
        {"target": "Reg", "type": "bypass", "keep": ["Weights"], "bypass": ["Inputs", "Outputs"]}]}}


def _refused(doc, *words):
    with pytest.raises(InputError) as err:
        load_descriptor(doc, name="t")
    text = f"{'.'.join(map(str, err.value.loc))}: {err.value.msg}"
    for w in words:
        assert w in text, text
    return err.value


# --------------------------------------------------------------------------------------------------------------
# The form: timeloop-model reads a tree when `version` is 0.2 or 0.3, else the legacy `arithmetic` + `storage` form,
# under `arch` (first) or `architecture`


def test_the_version_picks_the_form_as_timeloop_model_does():
    base = load_descriptor(_doc(), name="t")
    # a tree under `arch:` is a tree (Tileplan read `arch:` as the legacy form and refused it)
    doc = _doc()
    doc["arch"] = doc.pop("architecture")
    assert load_descriptor(doc, name="t").memory_levels == base.memory_levels
    # the version as a string is the same version
    doc = _doc()
    doc["architecture"]["version"] = "0.3"
    assert load_descriptor(doc, name="t").memory_levels == base.memory_levels
    # a tree without a version (or another version) is read by timeloop-model as the legacy form, which it is not
    doc = _doc()
    del doc["architecture"]["version"]
    _refused(doc, "architecture.version", "0.2 or 0.3")
    doc["architecture"]["version"] = 0.4
    _refused(doc, "architecture.version", "0.4")
    # the legacy form under `architecture:` (no version) is the legacy form
    legacy = {"architecture": {"arithmetic": {"name": "MAC", "instances": 4, "word-bits": 8},
                               "storage": [{"name": "Reg", "instances": 4, "entries": 4, "word-bits": 8},
                                           {"name": "GLB", "instances": 1, "entries": 1024, "word-bits": 8},
                                           {"name": "DRAM", "instances": 1, "technology": "DRAM", "word-bits": 8}]},
              "architecture_constraints": _doc()["architecture_constraints"]}
    hw = load_descriptor(legacy, name="t")
    assert [lv.name for lv in hw.memory_levels] == ["Reg", "GLB", "DRAM"]
    # both keys: timeloop-model reads `arch`
    both = {**legacy, "arch": _tree()}
    assert [lv.capacity for lv in load_descriptor(both, name="t").memory_levels] == [
        lv.capacity for lv in base.memory_levels]


def test_a_component_without_attributes_states_them_inline_and_no_class_technology():
    """timeloop-model reads a component's own keys when it has no `attributes`, and then reads no `class` for its
    technology (a `class: DRAM` component so written is priced as an SRAM unless it states technology DRAM)."""
    doc = _doc()
    glb = doc["architecture"]["subtree"][0]["local"][1]
    glb.update(glb.pop("attributes"))
    hw = load_descriptor(doc, name="t")
    assert hw.memory_levels[1].capacity == 1024
    doc = _doc()
    dram = doc["architecture"]["subtree"][0]["local"][0]
    dram.update(dram.pop("attributes"), entries=1 << 20)
    hw = load_descriptor(doc, name="t")
    assert hw.memory_levels[-1].technology == "SRAM"
    dram["technology"] = "DRAM"
    assert load_descriptor(doc, name="t").memory_levels[-1].technology != "SRAM"  # (DRAM: the default)


# --------------------------------------------------------------------------------------------------------------
# `variables`: timeloop-model's config reader replaces a value that names one of the document's `variables`


def test_a_value_naming_a_variable_is_that_variable():
    doc = _doc(glb={"entries": "glb_depth", "word-bits": "bits"})
    doc["variables"] = {"glb_depth": 2048, "bits": 8}
    hw = load_descriptor(doc, name="t")
    assert hw.memory_levels[1].capacity == 2048
    doc["variables"] = {"bits": 8}
    _refused(doc, "entries", "glb_depth")


# --------------------------------------------------------------------------------------------------------------
# Values timeloop-model cannot convert ("bad conversion") or asserts on


@pytest.mark.parametrize("attrs, key", [
    ({"entries": 1024.0}, "entries"),        # a float where Timeloop reads an unsigned integer
    ({"entries": "1e3"}, "entries"),
    ({"entries": 1 << 33}, "entries"),        # past 32 bits
    ({"n_banks": 2.5}, "n_banks"),            # read (for its energy table) even though nothing else uses it
    ({"num-ports": "two"}, "num-ports"),
    ({"meshX": 2.0, "instances": 1}, "meshX"),
    ({"reduction_supported": "maybe"}, "reduction_supported"),
])
def test_a_value_timeloop_model_cannot_convert_is_refused(attrs, key):
    _refused(_doc(glb=attrs), key)


def test_entries_with_sizeKB_is_refused_as_timeloop_model_asserts():
    _refused(_doc(glb={"sizeKB": 1}), "sizeKB", "entries")
    _refused(_doc(glb={"entries": None, "depth": 64, "sizeKB": 1}), "sizeKB")


def test_a_hex_or_octal_count_is_read_as_timeloop_model_reads_it():
    hw = load_descriptor(_doc(glb={"entries": "0x400"}), name="t")
    assert hw.memory_levels[1].capacity == 1024


@pytest.mark.parametrize("attrs, key", [
    ({"allow_overbooking": True}, "allow_overbooking"),
    ({"tile_partition_supported": True}, "tile_partition_supported"),
    ({"network_read": "NoC"}, "network_read"),
    ({"network_update": "NoC"}, "network_update"),
])
def test_storage_features_tileplan_does_not_model_are_refused_by_name(attrs, key):
    _refused(_doc(glb=attrs), key)


def test_explicit_networks_are_refused_and_unconnected_ones_passed_over():
    noc = {"name": "NoC", "class": "XY_NoC", "attributes": {"datawidth": 8}}
    base = load_descriptor(_doc(), name="t")
    assert load_descriptor(_doc(extra_local=[noc]), name="t").memory_levels == base.memory_levels
    # connected: the level's traffic would be priced by the named network
    _refused(_doc(glb={"network_read": "NoC"}, reg={"network_fill": "NoC"}, extra_local=[noc]), "network_read")
    _refused(_doc(mac={"network_operand": "NoC"}, extra_local=[noc]), "network_operand")
    # a class naming a network that is none of Timeloop's four: timeloop-model stops ("unrecognized network class")
    _refused(_doc(extra_local=[dict(noc, **{"class": "XY_NoC_v2"})]), "XY_NoC_v2")


@pytest.mark.parametrize("key", ["ERT", "sparse_optimizations"])
def test_documents_that_replace_the_energy_model_are_refused(key):
    doc = _doc()
    doc[key] = {"version": 0.3, "tables": []} if key == "ERT" else {"targets": []}
    _refused(doc, key)


# --------------------------------------------------------------------------------------------------------------
# Constraints as timeloop-model parses them


def _with(*entries, where="architecture_constraints"):
    doc = _doc()
    doc[where] = {"targets": doc["architecture_constraints"]["targets"] + list(entries)}
    return doc


def test_a_target_with_its_own_list_of_constraints_is_read():
    doc = _doc()
    doc["architecture_constraints"] = {"targets": [{"target": "Reg", "constraints": [
        {"type": "bypass", "keep": ["Weights"], "bypass": ["Inputs", "Outputs"]},
        {"type": "temporal", "factors": "R=1 S=1"}]}]}
    hw = load_descriptor(doc, name="t")
    assert list(hw.memory_levels[0].keeps) == ["W"]
    assert hw.constraints.loops["Reg"]["temporal"].factors == {"R": 1, "S": 1}


def test_name_for_target_and_bypassing_for_bypass_are_read():
    doc = _doc()
    doc["architecture_constraints"] = {"targets": [
        {"name": "Reg", "type": "bypassing", "keep": ["Weights"], "bypass": ["Inputs", "Outputs"]}]}
    assert list(load_descriptor(doc, name="t").memory_levels[0].keeps) == ["W"]


def test_constraints_timeloop_model_cannot_parse_are_refused():
    _refused(_with({"target": "GLB", "type": "temporal_ish", "factors": "R=1"}), "type", "temporal_ish")
    _refused(_with({"target": "GLB", "factors": "R=1"}), "type")
    # utilization / parallelism: only at the innermost level, with a `min`, once
    assert load_descriptor(_with({"target": "Reg", "type": "utilization", "min": 0.5}), name="t")
    _refused(_with({"target": "GLB", "type": "utilization", "min": 0.5}), "innermost")
    _refused(_with({"target": "Reg", "type": "parallelism"}), "min")
    # a tensor's keep / bypass stated twice at one level (not the outermost)
    _refused(_with({"target": "Reg", "type": "datatype", "keep": ["Weights"]}), "Weights", "twice")
    # max_overbooked_proportion needs its proportion
    assert load_descriptor(_with({"target": "GLB", "type": "max_overbooked_proportion", "proportion": 0.1}),
                           name="t")
    _refused(_with({"target": "GLB", "type": "max_overbooked_proportion"}), "proportion")


def test_mapspace_constraints_are_not_held_to_the_model_s_rules():
    """timeloop-model does not read `mapspace_constraints`: a type it would refuse there changes nothing."""
    doc = _with({"target": "GLB", "type": "temporal_ish"}, where="mapspace_constraints")
    assert load_descriptor(doc, name="t")


def test_the_document_is_not_changed_by_reading_it():
    doc = _doc(glb={"entries": "d"})
    doc["variables"] = {"d": 64}
    before = copy.deepcopy(doc)
    load_descriptor(doc, name="t")
    assert doc == before
    assert yaml.safe_dump(doc) == yaml.safe_dump(before)


def test_a_variable_or_word_where_timeloop_model_reads_a_fractional_number_is_refused():
    """timeloop-model reads a fractional attribute (bandwidths, energies, multiple-buffering, ...) with a fallback of
    0 and no look-up of `variables` (as<double, int>(0)): a name there is 0 to it, not the variable (checked against
    its build). Tileplan refuses such a value rather than read either."""
    doc = _doc(glb={"read_bandwidth": "bw"})
    doc["variables"] = {"bw": 4}
    err = _refused(doc, "read_bandwidth", "0")
    assert "variables" in err.msg
    _refused(_doc(glb={"read_bandwidth": "fast"}), "read_bandwidth")


def test_what_timeloop_model_crashes_on_is_refused():
    """Checked against its build: a level priced as an SRAM (no DRAM class or technology) without a size (it asserts
    on the size), a legacy storage level without `instances` (0 instances: it dies of a division by zero), two compute
    components (it runs out of memory)."""
    doc = _doc()
    dram = doc["architecture"]["subtree"][0]["local"][0]
    dram.update(dram.pop("attributes"))  # inline: no class technology, and no size
    _refused(doc, "DRAM", "size")
    doc = _doc()
    doc["architecture"]["subtree"][0]["local"][0]["class"] = "SRAM"
    _refused(doc, "DRAM", "size")
    legacy = {"arch": {"arithmetic": {"name": "MAC", "instances": 4, "word-bits": 8},
                       "storage": [{"name": "Reg", "instances": 4, "entries": 4, "word-bits": 8},
                                   {"name": "GLB", "entries": 1024, "word-bits": 8},
                                   {"name": "DRAM", "instances": 1, "technology": "DRAM", "word-bits": 8}]}}
    _refused(legacy, "arch.storage.1.instances")
    two = _doc()
    two["architecture"]["subtree"][0]["subtree"][0]["local"].append(
        {"name": "MAC2", "class": "intmac", "attributes": {"datawidth": 8}})
    _refused(two, "MAC2", "compute")


def test_m_in_constraints_is_the_cnn_layers_output_channels():
    """Timeloop's exercises (simple_weight_stationary, eyeriss_like, simba_like, ...) write the CNN layer's output
    channels as M (their problems: C M R S N P Q) in the constraints they ship; Tileplan's layer calls them K. Read
    as K: once those files' per-target constraint lists were read (this round), an M refused all ten of them."""
    doc = _with({"target": "GLB", "type": "temporal", "factors": "M=1 C<=4", "permutation": "MCPQ"})
    loops = load_descriptor(doc, name="t").constraints.loops["GLB"]["temporal"]
    assert loops.factors == {"K": 1} and loops.max_factors == {"C": 4} and loops.permutation == ["K", "C", "P", "Q"]
