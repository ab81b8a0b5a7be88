"""A layer reduced to what a mapper needs: loop bounds, strides, tensor footprints, prime factors.

Input tiles are halo-exact: a tile of p output rows under a tile of r filter rows reads
(p - 1) * stride + (r - 1) * dilation + 1 input rows when its windows overlap, and only the rows
its taps touch when the stride skips some (see `touched`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

from tileplan.dims import DIMS, RELEVANT
from tileplan.workload import Conv2dLayer, MatmulLayer


def prime_factors(n: int) -> list[int]:
    """Prime factors of n, largest first (1 has none)."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return sorted(out, reverse=True)


@lru_cache(maxsize=65536)
def touched(p: int, r: int, stride: int, dilation: int) -> int:
    """Distinct input positions read by p outputs of an r-tap filter: the span
    (p-1)*stride + (r-1)*dilation + 1 when windows overlap or abut, fewer when the stride skips
    positions no tap reads (a 1x1 stride-2 conv reads every other row)."""
    span = (p - 1) * stride + (r - 1) * dilation + 1
    if dilation == 1 and stride <= r:
        return span
    if (r - 1) * dilation < stride and dilation == 1:
        return p * r
    return len({i * stride + j * dilation for i in range(p) for j in range(r)})


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class Problem:
    dims: dict[str, int]
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    name: str = ""
    bias: bool = False  # the layer adds a bias (loaded into the accumulator before the reduction)
    # Zero padding of the input (rows, cols): Gemmini's library makes it on chip instead of reading it from DRAM.
    padding: tuple[int, int] = (0, 0)
    in_hw: tuple[int, int] | None = None  # the input's own height and width, when a conv layer states them
    # "exact": a strided tile holds only the rows its taps touch; "bounding_box": the whole span, as Timeloop
    # sizes it (the hardware descriptor's `input_tiles`; see `for_hardware`).
    input_tiles: str = "exact"
    # Groups packed into one (`packed`): the dims are then those of the packed problem, whose weight tiles are
    # block-diagonal; its loop nest runs `group_pack` times the layer's MACs, the rest multiplies zeros.
    group_pack: int = 1

    @classmethod
    def from_layer(cls, layer: Conv2dLayer | MatmulLayer) -> Problem:
        padding = (layer.padding[0], layer.padding[1]) if isinstance(layer, Conv2dLayer) else (0, 0)
        return cls(
            dims=layer.dims(), stride=layer.strides, dilation=layer.dilations, name=layer.name, bias=layer.bias,
            padding=padding, in_hw=(layer.in_h, layer.in_w) if isinstance(layer, Conv2dLayer) else None,
        )

    @cached_property
    def macs(self) -> int:
        """MACs of the loop nest (a packed problem's include its block-diagonal zeros)."""
        return math.prod(self.dims.values())

    @cached_property
    def useful_macs(self) -> int:
        """The layer's own MACs (a packed problem's loop nest runs `group_pack` times as many)."""
        return self.macs // self.group_pack

    def packed(self, pack: int) -> Problem:
        """`pack` groups run as one: G / pack groups of pack x C input and pack x K output channels, each weight
        tile block-diagonal (group i's C x K block on the diagonal, zeros elsewhere). A grouped or depthwise layer
        then fills the array's rows and columns with several groups at once; the zeros are multiplied like any
        weight, so the packed problem's loop nest, traffic and cycles charge them. Channels keep their order
        (group g' of the packed layer holds groups g' * pack ... g' * pack + pack - 1), so the layer's input,
        output and bias layouts are unchanged."""
        if pack == self.group_pack:
            return self
        if self.group_pack != 1 or pack < 1:
            raise ValueError(f"cannot pack {pack} groups of a problem packed {self.group_pack} ways")
        g = self.dims["G"]
        if g % pack:
            raise ValueError(f"group_pack={pack} does not divide the {g} groups")
        if pack not in self._packs:  # (asked by the checker and the cost model for every packed plan)
            dims = {**self.dims, "G": g // pack, "C": self.dims["C"] * pack, "K": self.dims["K"] * pack}
            self._packs[pack] = replace(self, dims=dims, group_pack=pack)
        return self._packs[pack]

    @cached_property
    def _packs(self) -> dict[int, Problem]:
        return {}

    def mapped_by(self, group_pack: int | None) -> Problem:
        """The problem a mapping's factors describe (`Mapping.group_pack`: unset or 1, the layer's own)."""
        if not group_pack or group_pack == self.group_pack:
            return self
        return self.packed(group_pack)

    @cached_property
    def factors(self) -> dict[str, list[int]]:
        return {d: prime_factors(self.dims[d]) for d in DIMS}

    @cached_property
    def _sized(self) -> dict[str, Problem]:
        return {self.input_tiles: self}

    def for_hardware(self, input_tiles: str) -> Problem:
        """This problem with input tiles sized the way the hardware's descriptor says (`input_tiles`); one copy per
        way, kept (the checker and the cost models ask for it on every candidate a mapper scores: 57k times for
        Simba's 30 bench layers)."""
        if input_tiles not in self._sized:
            self._sized[input_tiles] = replace(self, input_tiles=input_tiles)
        return self._sized[input_tiles]

    def input_extent(self, p: int, r: int, axis: int) -> int:
        """Input rows (axis 0) or cols (axis 1) a tile of p outputs under r filter taps holds."""
        if self.input_tiles == "bounding_box":
            return (p - 1) * self.stride[axis] + (r - 1) * self.dilation[axis] + 1
        return touched(p, r, self.stride[axis], self.dilation[axis])

    def tile_elements(self, tensor: str, tile: dict[str, int]) -> int:
        """Elements of `tensor` touched by a tile with the given extent per dimension."""
        if tensor == "I":
            h = self.input_extent(tile["P"], tile["R"], 0)
            w = self.input_extent(tile["Q"], tile["S"], 1)
            return tile["N"] * tile["G"] * tile["C"] * h * w
        if tensor == "W":  # (RELEVANT["W"], as plain products: asked for every candidate of every search)
            return tile["G"] * tile["K"] * tile["C"] * tile["R"] * tile["S"]
        if tensor == "O":
            return tile["N"] * tile["G"] * tile["K"] * tile["P"] * tile["Q"]
        return math.prod(tile[d] for d in RELEVANT[tensor])

    def tensor_elements(self, tensor: str) -> int:
        return self.tile_elements(tensor, self.dims)

    def key(self) -> dict[str, object]:
        """Canonical identity: two layers with equal keys are the same scheduling problem."""
        key: dict[str, object] = {
            "dims": dict(sorted(self.dims.items())), "stride": list(self.stride), "dilation": list(self.dilation)
        }
        if self.bias:  # (only when set, so layers without a bias or padding keep their keys)
            key["bias"] = True
        if any(self.padding):
            key["padding"] = list(self.padding)
        if self.group_pack != 1:
            key["group_pack"] = self.group_pack
        return key
