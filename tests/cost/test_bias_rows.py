"""The accumulator's bias rows as the DMA moves them: one row per output pixel and DIM output channels, the block's
channels x 4 bytes, one request per 64 B of it (a 32-wide block is two requests; a depthwise block of one channel
reads 4 bytes). The emulator counts the same (bench/codegen.py: emulated vs modelled cycles)."""

from __future__ import annotations

import dataclasses

import pytest

from tileplan.cost.gemmini import FEATURE_COLUMNS, Execution, conv_calls


def _conv(dim: int, k: int, bias: bool) -> Execution:
    return Execution(kind="conv", dim=dim, batch=1, groups=1, out_h=4, out_w=32, k=k, c=32, r=1, s=1, stride=(1, 1),
                     pad=(0, 0), in_h=4, in_w=32, t_n=1, t_h=4, t_w=32, t_k=k, t_c=32, t_r=1, t_s=1, k_step=k,
                     c_step=32, bias=bias)


def _totals(e: Execution) -> dict[str, float]:
    x = conv_calls(e, 16.0)
    count = x[:, FEATURE_COLUMNS.index("count")]
    return {name: float((x[:, i] * count).sum()) for i, name in enumerate(FEATURE_COLUMNS)}


@pytest.mark.parametrize(("dim", "k", "requests_per_pixel", "bytes_per_mvin"),
                         [(16, 16, 1, 64), (32, 32, 2, 128), (32, 48, 3, 192), (32, 1, 1, 4)])
def test_bias_rows_are_the_blocks_channels_wide(dim, k, requests_per_pixel, bytes_per_mvin):
    with_bias, without = _totals(_conv(dim, k, True)), _totals(dataclasses.replace(_conv(dim, k, True), bias=False))
    pixels = 4 * 32
    assert with_bias["ld_req"] - without["ld_req"] == pixels * requests_per_pixel
    mvins = 4 * -(-32 // dim)  # one mvin per output row and DIM columns
    assert with_bias["ld_bytes"] - without["ld_bytes"] == mvins * bytes_per_mvin
