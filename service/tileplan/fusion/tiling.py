"""A group's tile: the last op's output is computed in bands of `rows` output rows (full width, every output
channel); each earlier op must produce the rows its successor's band reads, its band plus a halo of rows the
previous band also needed.  Two ways to have the halo: *recompute* it in every band (bands independent, extra
MACs) or *keep* it from the previous band in the scratchpad (no extra MACs, the bands run in order and each
intermediate's buffer is a ring of `rows_needed` rows).  The budget is shared by the whole group: every member's
weights (loaded once, resident for the whole group), the first op's input band (twice: the next band loads while
this one computes) and every intermediate's band in the scratchpad; one member's output band for one DIM-block of
output channels in each accumulator half (the other half drains while it fills).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _pad(x: int, dim: int) -> int:
    return -(-x // dim) * dim


@dataclass
class Band:
    """One member's share of a band: output rows computed per band and their stride between bands."""

    name: str
    rows_needed: int  # output rows its successor's band reads (the last op: the tile)
    rows_advance: int  # output rows the band moves by (rows_needed - rows_advance = the halo)
    out_rows: int  # the member's output height (a matmul: its M rows)
    out_width: int
    out_channels: int
    macs_per_row: int  # MACs per output row (all channels, full width)

    @property
    def halo(self) -> int:
        return max(0, self.rows_needed - self.rows_advance)


@dataclass
class GroupTile:
    rows: int  # output rows of the last op per band
    bands: int
    members: list[Band]
    strategy: str  # "keep" | "recompute" | "none" (a single band, or no halo)
    spad_bytes: int  # the group's scratchpad footprint
    acc_bytes: int  # accumulator footprint (one half)
    recompute_macs: int  # extra MACs of recomputed halos (0 when kept)
    notes: list[str] = field(default_factory=list)

    def doc(self) -> dict[str, Any]:
        return {"rows": self.rows, "bands": self.bands, "strategy": self.strategy, "spad_bytes": self.spad_bytes,
                "acc_bytes": self.acc_bytes, "recompute_macs": self.recompute_macs,
                "halos": {b.name: b.halo for b in self.members if b.halo}}


def _geometry(layer: Any) -> tuple[int, int, int, int, int, int, int, int, int]:
    """(out rows, out width, out channels, in channels, kernel rows, row stride, row dilation, in width, groups)."""
    d = layer.dims()
    if getattr(layer, "op", "") in ("matmul", "dense"):
        return d["P"], 1, d["K"], d["C"], 1, 1, 1, 1, 1
    return (layer.out_h, layer.out_w, layer.out_channels, layer.in_channels, layer.kernel[0], layer.stride[0],
            layer.dilation[0], layer.in_w, layer.groups)


def bands(layers: list[Any], rows: int) -> list[Band]:
    """Walk back from the last layer's band of `rows` rows: each earlier layer's rows needed and advance."""
    out: list[Band] = []
    need = adv = rows
    for layer in reversed(layers):
        p, q, k, c, r, sh, dh, _, g = _geometry(layer)
        need, adv = min(need, p), min(adv, p)
        macs_row = q * k * (c // g) * r * (layer.kernel[1] if hasattr(layer, "kernel") else 1)
        out.append(Band(layer.name, need, adv, p, q, k, macs_row))
        need = (need - 1) * sh + dh * (r - 1) + 1  # input rows this band reads (padding rows included)
        adv = adv * sh
    return list(reversed(out))


def footprint(layers: list[Any], bs: list[Band], dim: int) -> tuple[int, int]:
    """(scratchpad bytes, accumulator bytes, both halves) of the group at this band size."""
    spad = 0
    for layer in layers:  # every member's weights stay for the whole group
        d = layer.dims()
        if d["G"] > 1:  # packed block-diagonally: each group's C rows per tap, one DIM-wide row of columns
            spad += d["G"] * d["R"] * d["S"] * d["C"] * _pad(d["K"], dim)
        else:
            spad += d["R"] * d["S"] * _pad(d["C"], dim) * _pad(d["K"], dim)
    first = layers[0]
    _, _, _, c0, r0, sh0, dh0, w0, _ = _geometry(first)
    in_rows = (bs[0].rows_needed - 1) * sh0 + dh0 * (r0 - 1) + 1
    spad += 2 * in_rows * w0 * _pad(c0, dim)  # the first input band, double-buffered
    for b in bs[:-1]:  # intermediates: a band (recompute) or a ring of as many rows (keep)
        spad += b.rows_needed * b.out_width * _pad(b.out_channels, dim)
    acc = 2 * max(b.rows_needed * b.out_width * dim * 4 for b in bs)
    return spad, acc


def choose(layers: list[Any], dim: int, spad_bytes: int, acc_bytes: int) -> GroupTile | None:
    """The largest band (fewest bands, fewest halo rows) whose footprint fits the scratchpad and the accumulator
    (the streamed input band and the accumulator double-buffered, as the per-layer kernels do), and
    keep vs recompute for the halos: keeping needs no extra MACs and the same memory, so it is chosen whenever
    there is a halo; recompute's extra MACs are reported for comparison.  None if not even one row fits."""
    last_rows = _geometry(layers[-1])[0]
    best: GroupTile | None = None
    for rows in range(last_rows, 0, -1):
        bs = bands(layers, rows)
        spad, acc = footprint(layers, bs, dim)
        if spad <= spad_bytes and acc <= acc_bytes:
            n = -(-last_rows // rows)
            extra = sum(b.halo * b.macs_per_row * (n - 1) for b in bs[:-1])
            strategy = "keep" if extra else "none"  # (no halo: nothing to keep or recompute)
            best = GroupTile(rows, n, bs, strategy, spad, acc, 0,
                             [f"recomputing the halos instead would add {extra:,} MACs"] if extra else [])
            break
    return best
