"""cosa on a 2-D fan-out of one-entry per-PE register files directly below the shared buffer (no row or column level
between): every dimension unrolls along one axis of the mesh, so the MIP must fit X and Y separately."""

import pytest

from tileplan.check import check
from tileplan.cost.timeloop import timeloop_violations
from tileplan.hardware.catalog import load_descriptor
from tileplan.interop.timeloop_map import to_timeloop_mapping
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.problem import Problem
from tileplan.workload import parse_layer

MESH_8X8 = """
architecture:
  version: 0.3
  subtree:
  - name: system
    local:
    - name: DRAM
      class: DRAM
      attributes: {word-bits: 16, read_bandwidth: 16, write_bandwidth: 16}
    subtree:
    - name: chip
      local:
      - name: GlobalBuffer
        class: SRAM
        attributes: {word-bits: 16, entries: 65536, read_bandwidth: 16, write_bandwidth: 16}
      subtree:
      - name: PE[0..63]
        local:
        - name: RegFile
          class: regfile
          attributes: {word-bits: 16, entries: 1, meshX: 8}
        - name: MAC
          class: intmac
          attributes: {word-bits: 16, meshX: 8}
architecture_constraints:
  targets:
  - {target: RegFile, type: bypass, keep: [Weights], bypass: [Inputs, Outputs]}
  - {target: GlobalBuffer, type: bypass, keep: [Inputs, Outputs], bypass: [Weights]}
"""


@pytest.mark.parametrize(("layer", "unrolled"), [
    # 64 = K16 x C4 fits the fan-out's total but neither axis takes K16: the MIP's one-axis bound let it pick that
    # and every answer was then refused ("no solution within the time limit" in under 2 s of a 5 s limit)
    ({"op": "conv2d", "in_channels": 4, "out_channels": 16, "in_h": 28, "in_w": 28, "kernel": 3, "padding": 1}, 32),
    # DRAM's writes of the 32k outputs set the pace (4,096 cycles): 16 of the 64 MACs keep up with them
    ({"op": "matmul", "M": 128, "K": 2, "N": 256}, 16),
])
def test_cosa_fits_each_axis_of_a_2d_mesh(layer, unrolled):
    hw = load_descriptor(MESH_8X8, name="mesh8x8")
    arch = hw.resolve(hw.dataflow_names[0])
    assert arch.fanout_xy(arch.levels.index(arch.level("GlobalBuffer"))) == (8, 8)
    lay = parse_layer(layer)
    plan = make_plan(lay, hw, ScheduleOptions(baseline=False, time_limit_s=5))
    problem = Problem.from_layer(lay)
    assert check(problem, hw, plan.mapping) == []
    assert next(m for m in plan.mapping.levels if m.name == "GlobalBuffer").spatial_total >= unrolled
    assert to_timeloop_mapping(plan.mapping, hw)  # exportable: a split onto the mesh exists
    if not plan.mapping.padded_dims:
        assert timeloop_violations(problem, arch, plan.mapping) == []
