"""Reading the inferred networks' energies a Timeloop file states on a storage level (`energy-per-hop`,
`router-energy`, `wire-energy` with `tile-width` or the floorplan's tile width, `network-word-bits`) and pricing them
as timeloop-model does (cost/timeloop_network.py)."""

import pytest
import yaml

from tileplan.errors import InputError
from tileplan.hardware.catalog import load_descriptor
from tileplan.hardware.timeloop import dump_yaml, to_timeloop_arch


def _doc(glb=None, reg=None, mac=None, legacy=False):
    reg_attrs = {"entries": 4, "word-bits": 8, **(reg or {})}
    glb_attrs = {"entries": 1000, "word-bits": 8, **(glb or {})}
    if legacy:
        return {"arch": {"arithmetic": {"name": "MAC", "instances": 4, "word-bits": 8, **(mac or {})},
                         "storage": [{"name": "Reg", "instances": 4, **reg_attrs},
                                     {"name": "GLB", "instances": 1, **glb_attrs},
                                     {"name": "DRAM", "technology": "DRAM", "instances": 1, "word-bits": 8}]}}
    return yaml.safe_load(yaml.safe_dump({"architecture": {"version": 0.3, "subtree": [{"name": "sys", "local": [
        {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 8}},
        {"name": "GLB", "class": "SRAM", "attributes": glb_attrs}],
        "subtree": [{"name": "PE[0..3]", "local": [
            {"name": "Reg", "class": "regfile", "attributes": reg_attrs},
            {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8, **(mac or {})}}]}]}]}}))


def _net(doc, name):
    hw = load_descriptor(doc, name="net")
    return next(lv for lv in hw.memory_levels if lv.name == name).network


@pytest.mark.parametrize("legacy", [False, True])
def test_network_figures_are_read(legacy):
    net = _net(_doc(glb={"energy-per-hop": 2, "router-energy": 0.5}, legacy=legacy), "GLB")
    assert (net.hop_pj, net.router_pj) == (2, 0.5)
    assert _net(_doc(legacy=legacy), "GLB") is None


def test_wire_energy_per_hop_from_the_tile_width():
    # 8-bit words x 50 um x 0.3 pJ/b/mm; network-word-bits, where stated, is the network's word
    assert _net(_doc(glb={"wire-energy": 0.3, "tile-width": 50}), "GLB").hop_pj == pytest.approx(8 * 0.05 * 0.3)
    assert _net(_doc(glb={"wire-energy": 0.3, "tile-width": 50, "network-word-bits": 32}), "GLB").hop_pj \
        == pytest.approx(32 * 0.05 * 0.3)
    # energy-per-hop, where stated, wins
    assert _net(_doc(glb={"wire-energy": 0.3, "tile-width": 50, "energy-per-hop": 1}), "GLB").hop_pj == 1


def test_wire_energy_without_a_tile_width_follows_the_floorplan():
    # Timeloop's table gives arrays and MACs no area: the wires are 0 mm long, and cost nothing
    assert _net(_doc(glb={"wire-energy": 0.3}), "GLB") is None
    # a MAC of 400 um^2: the register's hop is one MAC wide (20 um); the GLB's one PE (4 MACs' under one register)
    doc = _doc(glb={"wire-energy": 0.3}, reg={"wire-energy": 1}, mac={"area": 400})
    assert _net(doc, "Reg").hop_pj == pytest.approx(8 * 0.020 * 1)
    assert _net(doc, "GLB").hop_pj == pytest.approx(8 * 0.020 * 0.3)
    # a register of cluster-area 300 um^2 adds to its PE's tile: sqrt(400 + 300) um
    doc = _doc(glb={"wire-energy": 0.3}, reg={"cluster-area": 300}, mac={"area": 400})
    assert _net(doc, "GLB").hop_pj == pytest.approx(8 * 700 ** 0.5 / 1000 * 0.3)


@pytest.mark.parametrize(("attrs", "field"), [
    ({"router-energy": -1}, "router-energy"),
    ({"energy-per-hop": "lots"}, "energy-per-hop"),
    ({"wire-energy": -0.1, "tile-width": 10}, "wire-energy"),
    ({"wire-energy": 0.1, "tile-width": -10}, "tile-width"),
    ({"wire-energy": 0.1, "tile-width": "wide"}, "tile-width"),
])
def test_bad_network_figures_are_refused_naming_the_field(attrs, field):
    with pytest.raises(InputError) as exc:
        load_descriptor(_doc(glb=attrs), name="net")
    assert field in str(exc.value)


def test_network_figures_survive_the_export():
    hw = load_descriptor(_doc(glb={"energy-per-hop": 2, "router-energy": 0.5},
                              reg={"wire-energy": 0.3, "tile-width": 50}), name="net")
    again = load_descriptor(dump_yaml(to_timeloop_arch(hw, hint=True)), name="net")
    assert [lv.network for lv in again.memory_levels] == [lv.network for lv in hw.memory_levels]


def test_reduction_supported_is_read():
    net = _net(_doc(glb={"router-energy": 1, "reduction_supported": False}), "GLB")
    assert net.reduces is False
    assert _net(_doc(glb={"reduction_supported": False}), "GLB") is None  # (no energy: it changes nothing)
    with pytest.raises(InputError) as exc:
        load_descriptor(_doc(glb={"router-energy": 1, "reduction_supported": "sometimes"}), name="net")
    assert "reduction_supported" in str(exc.value)
