"""Fused-layer groups: which consecutive offloaded ops could run as one kernel with their intermediates on chip,
the tile and halos that would take, whether the intermediates can be requantized on chip bit-exactly, and what it
would save (`POST /compile` option `fusion: auto | off`).

Data flows one way: `chains` (graph links between offloaded ops -> candidate groups) -> `tiling` (the last op's
output tile, each earlier op's halo, recompute vs keep, the shared scratchpad / accumulator budget) -> `numerics`
(can each intermediate be requantized on chip exactly with the instructions the kernels use) -> `cost` (bytes and
modelled cycles, fused vs per-layer) -> `planner` (one decision per group, with its reason).
"""
