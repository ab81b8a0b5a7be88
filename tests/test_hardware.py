from pathlib import Path

import pytest
import yaml

from tileplan.errors import InputError
from tileplan.hardware.catalog import REPO_CATALOG_NAMES, catalog, get_hardware, load_descriptor, resolve_hardware

GEMMINI = (Path(__file__).resolve().parents[1] / "hw_catalog" / "gemmini-16x16.yaml").read_text()


def test_catalog_has_the_required_entries():
    assert set(REPO_CATALOG_NAMES) <= set(catalog())


@pytest.mark.parametrize("name", ["gemmini-16x16", "gemmini-8x8", "gemmini-32x32", "gemmini-chip", "simba", "eyeriss-os"])
def test_fanouts_multiply_to_the_array(name):
    hw = get_hardware(name)
    for df in hw.dataflow_names:
        arch = hw.resolve(df)
        assert arch.total_fanout == hw.pe_array.macs


def test_gemmini_hierarchy_matches_gemmini_md():
    arch = get_hardware("gemmini-16x16").resolve("weight_stationary")
    regs, acc, spad, dram = arch.levels
    assert (regs.keeps, acc.keeps, spad.keeps, dram.keeps) == ({"W"}, {"O"}, {"I", "W"}, {"W", "I", "O"})
    assert acc.fanout == 16 and spad.fanout == 16 and regs.fanout == 1
    assert acc.spatial_dims == {"C"} and spad.spatial_dims == {"K"}
    assert spad.capacity == 256 * 1024 and acc.capacity * acc.instances == 64 * 1024
    assert arch.element_bytes("O", acc) == 4 and arch.element_bytes("I", spad) == 1
    os_arch = get_hardware("gemmini-16x16").resolve("output_stationary")
    assert os_arch.levels[0].keeps == {"O"} and os_arch.levels[1].spatial_dims == {"N", "P", "Q"}


def test_simba_fanouts_match_cosa_md():
    arch = get_hardware("simba").resolve()
    assert [lv.fanout for lv in arch.levels] == [1, 8, 1, 8, 16, 1]


def test_chip_is_weight_stationary_only():
    assert get_hardware("gemmini-chip").dataflow_names == ["weight_stationary"]


def _err(text):
    with pytest.raises(InputError) as exc:
        load_descriptor(text)
    return str(exc.value)


def test_bad_size_names_field_and_reason():
    assert _err(GEMMINI.replace("capacity: 64KiB", "capacity: 64 KX")) == "memory_levels[1].capacity: '64 KX' is not a size"


def test_unknown_tensor_in_keeps():
    assert "memory_levels[2].keeps[0]" in _err(GEMMINI.replace("keeps: [I, W]", "keeps: [X, W]"))


def test_unknown_field_is_rejected():
    assert "memory_levels[0].capcity" in _err(GEMMINI.replace("capacity: 1KiB", "capcity: 1KiB"))


def test_instances_must_divide():
    msg = _err(GEMMINI.replace("instances: 16\n", "instances: 512\n"))
    assert "memory_levels[1].instances: 512 does not divide the 256 instances below it" in msg
    assert "capacity 65536 B does not divide into 15 instances" in _err(GEMMINI.replace("instances: 16\n", "instances: 15\n"))


def test_last_level_must_be_backing_store():
    data = yaml.safe_load(GEMMINI)
    data["memory_levels"][-1]["capacity"] = "1GiB"
    assert "last (outermost) level is the backing store" in _err(yaml.safe_dump(data))


def test_dataflow_override_of_unknown_level():
    assert "overrides unknown level 'Regs'" in _err(GEMMINI.replace("Registers: {keeps: [W]}", "Regs: {keeps: [W]}"))


def test_malformed_yaml_names_the_line():
    assert "not valid YAML (line" in _err("name: x\n  pe_array: [\n")


def test_partition_must_cover_keeps():
    data = yaml.safe_load(GEMMINI)
    data["memory_levels"][2]["partition"] = {"I": 0.5}
    assert "partition must give a share to every kept tensor" in _err(yaml.safe_dump(data))


def test_unknown_catalog_name():
    with pytest.raises(InputError) as exc:
        resolve_hardware("gemmini-17x17")
    assert exc.value.loc == ("hardware",) and "unknown hardware 'gemmini-17x17'" in exc.value.msg


def test_reordered_keys_give_equal_descriptors():
    data = yaml.safe_load(GEMMINI)
    shuffled = dict(reversed(list(data.items())))
    assert load_descriptor(yaml.safe_dump(shuffled, sort_keys=True)) == load_descriptor(GEMMINI)
