"""Timeloop architecture YAML -> descriptors (both forms) and back."""

import copy

import pytest
import yaml

from tileplan.errors import InputError
from tileplan.hardware.catalog import catalog, get_hardware, load_descriptor
from tileplan.hardware.timeloop import dump_yaml, from_timeloop, infer_keeps, to_timeloop_arch
from tileplan.mappers.gemmini_auto import applicable, find_shape
from tileplan.plan import hardware_fingerprint

EXAMPLES = "timeloop"


def _load(examples, fname):
    return load_descriptor((examples / EXAMPLES / fname).read_text(), name=fname.removesuffix(".yaml"))


def _levels(hw, dataflow=None):
    return [
        (lv.name, lv.capacity, lv.instances, lv.fanout, lv.keeps, lv.spatial_dims, lv.buffer_count, lv.word_bytes)
        for lv in hw.resolve(dataflow).levels
    ]


@pytest.mark.parametrize("fname", ["gemmini_arch_legacy.yaml", "gemmini_arch_v03.yaml", "simba_arch_legacy.yaml"])
def test_examples_load(examples, fname):
    hw = _load(examples, fname)
    assert hw.memory_levels[-1].capacity is None
    assert hw.pe_array.macs in (256, 1024)


def test_gemmini_legacy_equals_catalog_apart_from_bandwidth(examples):
    tl = _load(examples, "gemmini_arch_legacy.yaml")
    cat = get_hardware("gemmini-16x16")
    a, b = tl.resolve("weight_stationary"), cat.resolve("weight_stationary")
    assert (tl.pe_array.rows, tl.pe_array.cols) == (16, 16)
    for x, y in zip(a.levels, b.levels, strict=True):
        assert (x.name, x.instances, x.fanout, x.keeps, x.spatial_dims, x.buffer_count) == (
            y.name, y.instances, y.fanout, y.keeps, y.spatial_dims, y.buffer_count)
        if x.capacity is not None:
            # same entries per instance; the catalog's registers are 32-bit (for OS), Timeloop's 8-bit
            assert x.capacity / x.word_bytes == y.capacity / y.word_bytes
            if x.name != "Registers":
                assert x.capacity == y.capacity
    # Timeloop reads the legacy `bandwidth: 5.75` as 5.75/2 words per cycle each way
    dram = tl.memory_levels[-1]
    assert dram.bandwidth is None and dram.read_bandwidth == dram.write_bandwidth == 5.75 / 2
    # the one-instance 64 KiB accumulator of DOSA's legacy file becomes 16 column slices of 4 KiB
    assert tl.memory_levels[1].capacity == 64 * 1024 and tl.memory_levels[1].instances == 16
    assert applicable(tl)
    assert find_shape(tl).spad_rows == find_shape(cat).spad_rows and find_shape(tl).acc_rows == find_shape(cat).acc_rows


def test_gemmini_v03(examples):
    hw = _load(examples, "gemmini_arch_v03.yaml")
    spad, acc, dram = hw.memory_levels[2], hw.memory_levels[1], hw.memory_levels[3]
    assert spad.capacity == 131072 and acc.capacity == 512 * 4 * 16 and acc.instances == 16
    assert spad.bandwidth == 32 and acc.bandwidth == 8 and dram.bandwidth == 8  # words -> bytes
    assert [lv.fanout for lv in hw.resolve().levels] == [1, 16, 16, 1]
    assert applicable(hw)
    s = find_shape(hw)
    assert (s.dim, s.spad_rows, s.acc_rows) == (16, 8192, 512)


def test_simba_legacy_equals_catalog(examples):
    """The catalog's simba is CoSA's Simba as Timeloop reads the file: same levels, and what Timeloop says about
    them (the legacy `bandwidth: 20` is 10 words each way, no on-chip bandwidth, bounding-box tiles, one word per
    element, Timeloop's semantics score the plans), so it behaves exactly as the imported file does."""
    tl, cat = _load(examples, "simba_arch_legacy.yaml"), get_hardware("simba")
    assert _levels(tl) == _levels(cat)
    assert hardware_fingerprint(tl) == hardware_fingerprint(cat)
    dram = cat.memory_levels[-1]
    assert dram.bandwidth is None and dram.read_bandwidth == dram.write_bandwidth == 10
    assert (cat.input_tiles, cat.word_elements, cat.cost_model) == ("bounding_box", True, "timeloop")
    assert not applicable(tl)


@pytest.mark.parametrize("name", sorted(catalog()))
def test_export_round_trip_is_exact(name):
    hw = get_hardware(name)
    doc = yaml.safe_load(dump_yaml(to_timeloop_arch(hw)))
    assert load_descriptor(doc) == hw


@pytest.mark.parametrize("name", ["gemmini-16x16", "gemmini-chip", "simba"])
def test_export_without_hint_keeps_the_hierarchy(name):
    hw = get_hardware(name)
    back = load_descriptor(to_timeloop_arch(hw, hint=False), name=name)
    df = hw.dataflow_names[0]
    assert [(n, c, i, f, k) for n, c, i, f, k, *_ in _levels(back, df)] == [
        (n, c, i, f, k) for n, c, i, f, k, *_ in _levels(hw, df)
    ]


def test_v03_nesting_gives_instances_when_not_stated(examples):
    doc = yaml.safe_load((examples / EXAMPLES / "gemmini_arch_v03.yaml").read_text())
    acc = doc["architecture"]["subtree"][0]["subtree"][0]["subtree"][0]["local"][0]
    del acc["attributes"]["instances"]  # PECols[0..15] alone says 16
    hw = load_descriptor(doc)
    assert hw.memory_levels[1].instances == 16


def test_keep_inference_and_hints(examples):
    assert infer_keeps("AccumulationBuffer") == ["O"]
    assert infer_keeps("Scratchpad ") == ["I", "W"]
    assert infer_keeps("GlobalBuffer") == ["I", "O"]
    assert infer_keeps("PESpad") is None
    doc = yaml.safe_load((examples / EXAMPLES / "simba_arch_legacy.yaml").read_text())
    doc["arch"]["storage"][4]["name"] = "SharedSRAM"  # nothing says what it keeps: all, as timeloop-model would
    assert load_descriptor(copy.deepcopy(doc)).memory_levels[4].keeps == ["W", "I", "O"]
    doc["tileplan"] = {"levels": {"SharedSRAM": {"keeps": ["I", "O"], "bandwidth": 64}}}
    hw = load_descriptor(doc)
    assert hw.memory_levels[4].keeps == ["I", "O"] and hw.memory_levels[4].bandwidth == 64


def test_errors_name_the_field(examples):
    doc = yaml.safe_load((examples / EXAMPLES / "gemmini_arch_legacy.yaml").read_text())
    del doc["arch"]["storage"][2]["entries"]
    del doc["arch"]["storage"][2]["depth"]
    with pytest.raises(InputError) as err:
        from_timeloop(doc, "x")
    assert err.value.loc == ("arch", "storage", 2, "entries")
    doc = yaml.safe_load((examples / EXAMPLES / "gemmini_arch_v03.yaml").read_text())
    doc["architecture"]["subtree"][0]["subtree"][0]["subtree"][0]["name"] = "PECols[0..x]"
    with pytest.raises(InputError) as err:
        from_timeloop(doc, "x")
    assert err.value.loc[-1] == "name"
    with pytest.raises(InputError):
        from_timeloop({"arch": {"storage": []}}, "x")
    with pytest.raises(InputError):
        from_timeloop({"tileplan": {"levels": {"Nope": {}}}, **yaml.safe_load(
            (examples / EXAMPLES / "simba_arch_legacy.yaml").read_text())}, "x")


def test_diannao_mesh_and_timeloop_semantics_from_the_file():
    from tests.conftest import BENCH_DATA

    text = (BENCH_DATA / "timeloop_reference" / "archs" / "diannao_arch_v02.yaml").read_text()
    hw = load_descriptor(text, name="diannao")
    arch = hw.resolve()
    names = [lv.name for lv in arch.levels]
    assert names == ["WeightBuffer", "PsumRegFile", "InputBuffer", "OutputBuffer", "DRAM"]
    assert hw.pe_array.mesh_x == 16 and hw.memory_levels[0].mesh_x == 16 and hw.memory_levels[1].mesh_x is None
    # PsumRegFile's 16 children lie along Y (its own 16 instances already span X); InputBuffer's along X
    assert [arch.fanout_xy(i) for i in range(5)] == [(1, 1), (1, 16), (16, 1), (1, 1), (1, 1)]
    assert (hw.input_tiles, hw.word_elements, hw.cost_model) == ("bounding_box", True, "timeloop")
    # 1 word/cycle each way, 16-bit words
    assert (hw.memory_levels[1].read_bandwidth, hw.memory_levels[1].write_bandwidth) == (2, 2)


def test_mesh_x_must_divide_instances():
    bad = {"arch": {"arithmetic": {"instances": 256, "meshX": 16, "word-bits": 8},
                    "storage": [{"name": "Registers", "entries": 1, "instances": 256, "meshX": 12, "word-bits": 8},
                                {"name": "DRAM", "word-bits": 8}]}}
    with pytest.raises(InputError, match="meshX 12 does not divide the 256 instances"):
        load_descriptor(bad, name="bad")


def test_gemmini_legacy_keeps_its_one_accumulator_for_timeloop(examples):
    hw = _load(examples, "gemmini_arch_legacy.yaml")
    acc = hw.memory_levels[1]
    assert (acc.instances, acc.source_instances) == (16, 1)
    assert hw.cost_model is None  # Gemmini-like: the calibrated model stays the default
    doc = to_timeloop_arch(hw, hint=False)
    chip = doc["architecture"]["subtree"][0]["subtree"][0]
    assert [(c["name"], c["attributes"]["instances"]) for c in chip["local"]] == [("Scratchpad", 1), ("Accumulator", 1)]


def test_block_and_cluster_sizes_follow_timeloops_rules(examples):
    """block-size / cluster-size as timeloop-model derives them: stated (Simba), or from the array's width in bits
    (Gemmini: a 128-bit scratchpad row of 8-bit words is a 16-word block); exported and read back unchanged."""
    simba = {lv.name: (lv.block_size, lv.cluster_size) for lv in _load(examples, "simba_arch_legacy.yaml").memory_levels}
    assert simba == {"Registers": (None, 64), "AccumulationBuffer": (None, 8), "WeightBuffer": (8, None),
                     "InputBuffer": (8, None), "GlobalBuffer": (8, None), "DRAM": (64, None)}
    gem = _load(examples, "gemmini_arch_legacy.yaml")
    assert [(lv.block_size, lv.cluster_size) for lv in gem.memory_levels] == [
        (None, None), (16, None), (16, None), (64, None)]  # Accumulator: width 512 / 32-bit words
    back = load_descriptor(dump_yaml(to_timeloop_arch(gem, hint=False)), name="back")
    assert [(lv.block_size, lv.cluster_size) for lv in back.memory_levels] == [
        (lv.block_size, lv.cluster_size) for lv in gem.memory_levels]


def test_width_that_contradicts_block_and_cluster_is_an_error():
    doc = {"arch": {"arithmetic": {"instances": 16, "word-bits": 8}, "storage": [
        {"name": "Registers", "entries": 64, "instances": 16, "word-bits": 8, "block-size": 2, "cluster-size": 2,
         "width": 64},
        {"name": "DRAM", "technology": "DRAM", "instances": 1, "word-bits": 8}]}}
    with pytest.raises(InputError, match="block-size x word-bits x cluster-size is 32"):
        load_descriptor(yaml.safe_dump(doc), name="bad")


def test_stated_energies_replace_timeloops_table(examples):
    """A file's `vector-access-energy` (pJ per block access) and arithmetic `energy` (pJ per MAC) are what Timeloop
    charges instead of its table: the descriptor keeps them, per byte and per MAC."""
    doc = yaml.safe_load((examples / EXAMPLES / "simba_arch_legacy.yaml").read_text())
    doc["arch"]["arithmetic"]["energy"] = 3  # (a whole number: timeloop-model reads no other, see below)
    gb = next(s for s in doc["arch"]["storage"] if s["name"] == "GlobalBuffer")
    gb["vector-access-energy"] = 16.0  # 8-word blocks of 8-bit words: 2 pJ per byte
    hw = load_descriptor(yaml.safe_dump(doc), name="simba-stated")
    assert hw.pe_array.mac_energy_pj == 3
    level = next(lv for lv in hw.memory_levels if lv.name == "GlobalBuffer")
    assert (level.energy.read_pj_per_byte, level.energy.write_pj_per_byte) == (2.0, 2.0)


def test_depth_alone_counts_rows_of_blocks():
    doc = {"arch": {"arithmetic": {"instances": 16, "word-bits": 8}, "storage": [
        {"name": "Registers", "depth": 32, "block-size": 4, "instances": 16, "word-bits": 8},
        {"name": "DRAM", "technology": "DRAM", "instances": 1, "word-bits": 8}]}}
    hw = load_descriptor(yaml.safe_dump(doc), name="depth")
    assert hw.memory_levels[0].capacity == 32 * 4 * 16 and hw.memory_levels[0].block_size == 4


def test_word_bits_default_to_timeloops_16():
    """timeloop-model takes 16 bits for any component that states no word-bits (arithmetic and each storage level on
    its own); `word_width` is its other spelling."""
    doc = {"arch": {"arithmetic": {"instances": 16}, "storage": [
        {"name": "Registers", "entries": 64, "instances": 16},
        {"name": "GlobalBuffer", "entries": 1024, "instances": 1, "word_width": 8},
        {"name": "DRAM", "technology": "DRAM", "instances": 1}]}}
    hw = load_descriptor(yaml.safe_dump(doc), name="defaults")
    assert hw.pe_array.input_dtype == "int16"
    assert [lv.word_bits for lv in hw.memory_levels] == [16, 8, 16]
    assert hw.memory_levels[0].capacity == 64 * 2 * 16


def test_keeps_come_from_the_files_own_constraints():
    """A Timeloop file says which tensors a level keeps only in its mapspace constraints (`datatype` / `bypass`
    entries, under architecture_constraints, mapspace_constraints or the legacy mapspace); the importer reads them
    before guessing from names. A tensor neither kept nor bypassed stays (Timeloop keeps what a map does not
    bypass)."""
    arch = {"version": 0.3, "subtree": [{"name": "sys", "local": [
        {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 8}},
        {"name": "Shared", "class": "SRAM", "attributes": {"entries": 1024, "word-bits": 8}}],
        "subtree": [{"name": "PE[0..3]", "local": [
            {"name": "Pad", "class": "regfile", "attributes": {"entries": 4, "word-bits": 8}},
            {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8}}]}]}]}
    targets = [{"target": "Shared", "type": "datatype", "keep": ["Weights", "Inputs"], "bypass": ["Outputs"]},
               {"target": "Pad", "type": "bypass", "bypass": ["Weights", "Inputs"]},
               {"target": "Shared", "type": "spatial", "factors": "R=1 S=1"}]
    for doc in ({"architecture": arch, "architecture_constraints": {"targets": targets}},
                {"architecture": arch, "mapspace_constraints": targets},
                {"architecture": arch, "mapspace": {"constraints": targets}}):
        hw = load_descriptor(copy.deepcopy(doc), name="c")
        assert [lv.keeps for lv in hw.memory_levels] == [["O"], ["W", "I"], ["W", "I", "O"]]
    # without them, "Pad" and "Shared" say nothing: they keep all three, as in a map without bypass entries
    assert [lv.keeps for lv in load_descriptor({"architecture": arch}, name="c").memory_levels] == [["W", "I", "O"]] * 3
    bad = {"architecture": arch, "architecture_constraints": {"targets": [dict(targets[0], target="Nope")]}}
    with pytest.raises(InputError) as err:
        load_descriptor(bad, name="c")
    assert err.value.loc == ("architecture_constraints", "targets", 0, "target")
    bad = {"architecture": arch, "architecture_constraints": {"targets": [dict(targets[0], keep=["Psums"])]}}
    with pytest.raises(InputError) as err:
        load_descriptor(bad, name="c")
    assert err.value.loc == ("architecture_constraints", "targets", 0, "keep") and "Psums" in err.value.msg


def test_components_and_attributes_are_read_as_timeloop_reads_them():
    """Only the classes and spellings timeloop-model reads: a network (XY_NoC) or unknown class is passed over,
    `word_bits` is not `word-bits` (16 then, Timeloop's default), meshY gives meshX, and a mesh that does not tile
    the one below, or two subtrees side by side, are refused as Timeloop refuses them."""
    def doc(pe_attrs=None, extra_local=(), two=False):
        pe = {"name": "PE[0..15]", "local": [
            {"name": "Reg", "class": "reg_storage", "attributes": {"entries": 1, "word_bits": 8, **(pe_attrs or {})}},
            {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8, "meshX": 4}}]}
        sys = {"name": "sys", "local": [
            {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 8}},
            {"name": "GLB", "class": "smartbuffer_SRAM", "attributes": {"entries": 4096, "word-bits": 8}},
            {"name": "NoC", "class": "XY_NoC", "attributes": {"datawidth": 8}}, *extra_local],
            "subtree": [pe] * (2 if two else 1)}
        return {"architecture": {"version": 0.3, "subtree": [sys]},
                "architecture_constraints": {"targets": [{"target": "Reg", "type": "datatype", "keep": ["Weights"],
                                                          "bypass": ["Inputs", "Outputs"]}]}}
    hw = load_descriptor(doc({"meshY": 4}, [{"name": "wire", "class": "wire", "attributes": {}}]), name="t")
    assert [lv.name for lv in hw.memory_levels] == ["Reg", "GLB", "DRAM"]
    assert hw.memory_levels[0].word_bits == 16 and hw.memory_levels[0].capacity == 2 * 16
    assert hw.memory_levels[0].mesh_x == 4 and hw.pe_array.mesh_x == 4
    with pytest.raises(InputError) as err:
        load_descriptor(doc({"meshX": 8}), name="t")  # an 8 x 2 mesh of registers over a 4 x 4 array
    assert err.value.loc[-1] == "attributes" and "does not tile" in err.value.msg
    with pytest.raises(InputError) as err:
        load_descriptor(doc(two=True), name="t")
    assert "one subtree per level" in err.value.msg


def test_a_single_storage_level_is_refused_with_the_reason():
    doc = {"architecture": {"version": 0.3, "subtree": [{"name": "sys", "local": [
        {"name": "Buffer", "class": "regfile", "attributes": {"entries": 64, "word-bits": 8}},
        {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8}}]}]}}
    with pytest.raises(InputError) as err:
        load_descriptor(doc, name="one")
    assert "single storage level ('Buffer')" in err.value.msg and err.value.loc[-1] == 0


def test_export_keeps_the_files_own_energies_and_backing_store():
    """A re-export says what timeloop-model prices by: vector-access-energy per block, the arithmetic's energy, the
    backing store's size and technology (the exercises' files scored 2.7x Timeloop's energy on a re-export that
    dropped them)."""
    doc = {"architecture": {"version": 0.2, "subtree": [{"name": "System", "local": [
        {"name": "MainMemory", "class": "SRAM", "attributes": {"entries": 65536, "word-bits": 8,
                                                                "vector-access-energy": 32}}],
        "subtree": [{"name": "PE", "local": [
            {"name": "Buffer", "class": "SRAM", "attributes": {"entries": 64, "word-bits": 8, "block-size": 2,
                                                               "vector-access-energy": 1}},
            {"name": "MACC", "class": "intmac", "attributes": {"word-bits": 8, "energy": 2}}]}]}]}}
    hw = load_descriptor(doc, name="vae")
    back = load_descriptor(yaml.safe_load(dump_yaml(to_timeloop_arch(hw, hint=False))), name="vae")
    assert back.memory_levels == hw.memory_levels and back.pe_array.mac_energy_pj == 2
    assert hw.memory_levels[1].source_entries == 65536 and hw.memory_levels[1].technology == "SRAM"


def test_a_level_of_no_entries_that_keeps_nothing_is_imported():
    """Eyeriss' DummyBuffer: 0 entries, bypassing everything, there for its fan-out (the column of PEs under it);
    timeloop-model runs such files. Keeping something in it is refused (Timeloop refuses every such tile)."""
    def doc(bypass):
        return {"architecture": {"version": 0.3, "subtree": [{"name": "sys", "local": [
            {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 16}},
            {"name": "GLB", "class": "SRAM", "attributes": {"entries": 4096, "word-bits": 16}},
            {"name": "DummyBuffer[0..3]", "class": "storage", "attributes": {"entries": 0, "depth": 0, "meshX": 4}}],
            "subtree": [{"name": "PE[0..11]", "local": [
                {"name": "spad", "class": "regfile", "attributes": {"entries": 16, "meshX": 4}},
                {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 16, "meshX": 4}}]}]}]},
            "architecture_constraints": {"targets": [
                {"target": "DummyBuffer", "type": "bypass", "bypass": bypass}]}}
    hw = load_descriptor(doc(["Weights", "Inputs", "Outputs"]), name="dummy")
    assert [(lv.name, lv.keeps, lv.instances) for lv in hw.memory_levels] == [
        ("spad", ["W", "I", "O"], 12), ("DummyBuffer", [], 4), ("GLB", ["W", "I", "O"], 1), ("DRAM", ["W", "I", "O"], 1)]
    with pytest.raises(InputError) as err:
        load_descriptor(doc(["Weights"]), name="dummy")
    assert "holds no word but keeps ['I', 'O']" in err.value.msg


def _buffered(glb_attrs):
    return {"architecture": {"version": 0.3, "subtree": [{"name": "sys", "local": [
        {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 8, "type": "LPDDR4"}},
        {"name": "GLB", "class": "SRAM", "attributes": {"entries": 1000, "word-bits": 8, **glb_attrs}}],
        "subtree": [{"name": "PE[0..3]", "local": [
            {"name": "Reg", "class": "regfile", "attributes": {"depth": 1, "width": 8, "word-bits": 8}},
            {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8}}]}]}]},
            "architecture_constraints": {"targets": [{"target": "Reg", "type": "bypass", "keep": ["Weights"],
                                                      "bypass": ["Inputs", "Outputs"]}]}}


def test_multiple_buffering_and_min_utilization_are_timeloops():
    """`multiple-buffering: 3` leaves a tile floor(1000 / 3) = 333 of GLB's 1000 words (timeloop-model's effective
    size), while the access energy stays the 1000-word array's; `min-utilization` refuses maps whose kept tiles fill
    less than that share of the usable words; bank and port counts, technology strings and DRAM types change nothing
    (Timeloop's table ignores them), 3 ports is refused (timeloop-model asserts 1 or 2)."""
    from tileplan.cost.timeloop import timeloop_violations
    from tileplan.cost.timeloop_energy import block_access_pj
    from tileplan.mapping import LevelMapping, Mapping
    from tileplan.problem import Problem

    plain = load_descriptor(_buffered({}), name="b")
    hw = load_descriptor(_buffered({"multiple-buffering": 3, "min-utilization": 0.1, "n_banks": 8, "num-ports": 1,
                                    "technology": "45nm"}), name="b")
    glb = hw.memory_levels[1]
    assert glb.capacity == 1000 and glb.multiple_buffering == 3 and glb.min_utilization == 0.1
    arch = hw.resolve()
    assert arch.levels[1].capacity == 333 and plain.resolve().levels[1].capacity == 1000
    assert block_access_pj(arch.levels[1]) == block_access_pj(plain.resolve().levels[1])

    problem = Problem(dims={"N": 1, "G": 1, "K": 4, "C": 16, "P": 8, "Q": 1, "R": 1, "S": 1}, stride=(1, 1),
                      dilation=(1, 1))

    def mapping(glb_c, glb_p):
        return Mapping(levels=[
            LevelMapping(name="Reg", temporal=[], spatial=[]),
            LevelMapping(name="GLB", temporal=[("C", glb_c), ("P", glb_p)], spatial=[("K", 4)]),
            LevelMapping(name="DRAM", temporal=[("C", 16 // glb_c), ("P", 8 // glb_p)], spatial=[])],
            dataflow=arch.dataflow)

    # C16 P8 at GLB: W 64 + I 128 + O 32 = 224 words (fits the 333)
    assert timeloop_violations(problem, arch, mapping(16, 8)) == []
    # C1 P1: 4 + 1 + 4 = 9 words, less than 10% of 333: refused
    bad = timeloop_violations(problem, arch, mapping(1, 1))
    assert len(bad) == 1 and "minimum utilization" in bad[0]
    assert timeloop_violations(problem, plain.resolve(), mapping(1, 1)) == []
    # C16 P16: 64 + 256 + 64 = 384 words fit 1000 but not 333
    big = Problem(dims={**problem.dims, "P": 16}, stride=(1, 1), dilation=(1, 1))
    over = timeloop_violations(big, arch, Mapping(levels=[
        LevelMapping(name="Reg", temporal=[], spatial=[]),
        LevelMapping(name="GLB", temporal=[("C", 16), ("P", 16)], spatial=[("K", 4)]),
        LevelMapping(name="DRAM", temporal=[], spatial=[])], dataflow=arch.dataflow))
    assert len(over) == 1 and "384 exceeds buffer capacity 333" in over[0]
    # the re-export says both, so timeloop-model scores it as it scores the file
    back = load_descriptor(yaml.safe_load(dump_yaml(to_timeloop_arch(hw, hint=False))), name="b")
    assert back.memory_levels[1].multiple_buffering == 3 and back.memory_levels[1].min_utilization == 0.1

    for attrs, word in (({"n_ports": 3}, "1 or 2 ports"), ({"network-type": "M:N"}, "M:N"),
                        ({"network-type": "2:2"}, "1:1, 1:N and M:N"), ({"multiple-buffering": 2000}, "no word")):
        with pytest.raises(InputError) as err:
            load_descriptor(_buffered(attrs), name="b")
        assert word in err.value.msg
    assert load_descriptor(_buffered({"network-type": "1:N"}), name="b").memory_levels == plain.memory_levels


def test_constraints_named_by_a_string_are_read_as_timeloop_reads_them():
    """Timeloop's own configs/mapper/eyeriss-256.yaml says `mapspace: {constraints_rowstationary: [...], constraints:
    rowstationary}`: a string names the list `constraints_<name>` beside it (timeloop's Constraints::Parse), and any of
    the three blocks may hold `constraints` or `targets`; it was refused ('must be a list of constraints')."""
    arch = {"arithmetic": {"instances": 4, "word-bits": 8}, "storage": [
        {"name": "PsumRegFile", "entries": 16, "instances": 4, "word-bits": 8},
        {"name": "Pad", "entries": 64, "instances": 1, "word-bits": 8},
        {"name": "DRAM", "technology": "DRAM", "instances": 1, "word-bits": 8}]}
    named = [{"type": "datatype", "target": "Pad", "keep": ["Inputs"], "bypass": ["Weights", "Outputs"]},
             {"type": "temporal", "target": "Pad", "factors": "N1", "permutation": "NKCPQRS"}]
    for block in ({"mapspace": {"constraints_rs": named, "constraints": "rs"}},
                  {"mapspace_constraints": {"constraints_rs": named, "constraints": "rs"}},
                  {"architecture_constraints": {"constraints": named}},
                  {"mapspace": {"targets": named}}):
        hw = load_descriptor(yaml.safe_dump({"arch": arch, **block}), name="named")
        assert [lv.keeps for lv in hw.memory_levels] == [["O"], ["I"], ["W", "I", "O"]], block
    with pytest.raises(InputError) as err:
        load_descriptor(yaml.safe_dump({"arch": arch, "mapspace": {"constraints": "ws"}}), name="named")
    assert err.value.loc == ("mapspace", "constraints_ws") and "no list" in err.value.msg


def test_a_level_of_no_entries_that_no_constraint_speaks_for_keeps_nothing():
    """Timeloop's own configs/mapper/eyeriss-256-split-arg.yaml: a DummyBuffer of 0 entries and no constraint in the
    file. timeloop-model runs every map that bypasses everything there and refuses every other, so that is what the
    level keeps (it was refused: 'holds no word but keeps ['W', 'I', 'O']'); a name that suggests a keep-set does not
    override it either."""
    doc = {"arch": {"arithmetic": {"instances": 4, "word-bits": 16}, "storage": [
        {"name": "Pad", "entries": 16, "instances": 4, "meshX": 4},
        {"name": "DummyBuffer", "entries": 0, "instances": 4, "meshX": 4},
        {"name": "Registers", "entries": 0, "instances": 1},
        {"name": "GlobalBuffer", "sizeKB": 8, "instances": 1},
        {"name": "DRAM", "technology": "DRAM", "instances": 1}]}}
    hw = load_descriptor(yaml.safe_dump(doc), name="split")
    assert [lv.keeps for lv in hw.memory_levels] == [["W", "I", "O"], [], [], ["I", "O"], ["W", "I", "O"]]


@pytest.mark.parametrize("value", [2.2, 2.0, 0.5, "1.5"])
def test_an_arithmetic_energy_or_area_timeloop_cannot_read_is_refused(value):
    """timeloop-model (@019f107) reads the arithmetic's `energy` and `area` as whole numbers first and fails on any
    other ('ERROR: bad conversion, at line N', even for 2.0): the seed-2 fuzz's fuzz2_016 (energy: 2.2) was imported
    and its maps scored where Timeloop refused the file. A whole number is read; the export writes one."""
    def doc(attrs):
        return {"architecture": {"version": 0.3, "subtree": [{"name": "sys", "local": [
            {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 8}}],
            "subtree": [{"name": "PE[0..3]", "local": [
                {"name": "Reg", "class": "regfile", "attributes": {"entries": 4, "word-bits": 8}},
                {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8, **attrs}}]}]}]}}
    for key in ("energy", "area"):
        with pytest.raises(InputError) as err:
            load_descriptor(doc({key: value}), name="e")
        assert err.value.loc[-1] == key and "whole number" in err.value.msg
    hw = load_descriptor(doc({"energy": 2, "area": 300}), name="e")
    assert hw.pe_array.mac_energy_pj == 2
    exported = to_timeloop_arch(hw, hint=False)["architecture"]["subtree"][0]["subtree"][0]["local"][-1]
    assert type(exported["attributes"]["energy"]) is int
