"""loop_conv_ws's two call slots: a library convolution call's computes overlap the next call's DMA, not its own
(LoopConv.scala, `concurrent_loops = 2`: a call's slot is freed only when it has issued everything, so call i + 1's
loads wait for call i - 1's computes). Where the innermost DRAM loop is a channel loop whose last tile is small (256
channels in tiles of 240: 240 + 16), the large call's DMA runs beside the small call's short compute and is exposed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tileplan.cost.gemmini import (
    DMA_COLUMNS,
    FEATURE_COLUMNS,
    Execution,
    _slot_loop,
    call_features,
    conv_calls,
    cycles_from_calls,
    matmul_calls,
)
from tileplan.cost.params import DEFAULT_PARAMS

SLOTS = DEFAULT_PARAMS.model_copy(update={"call_slots": 1.0})


def _conv(order: tuple[str, ...], t_c: int = 240, reuse: bool = False) -> Execution:
    """A 3x3 convolution of 256 -> 256 channels on 14x14 (a ResNet-50 layer), one output tile of 32 channels per
    call group, the library's tiles of `t_c` input channels."""
    return Execution(kind="conv", dim=16, batch=1, groups=1, out_h=14, out_w=14, k=256, c=256, r=3, s=3,
                     stride=(1, 1), pad=(1, 1), in_h=14, in_w=14, t_n=1, t_h=14, t_w=14, t_k=32, t_c=t_c, t_r=3,
                     t_s=3, k_step=32, c_step=t_c, order=order, reuse=reuse, bias=False)


def _col(x: np.ndarray, name: str) -> np.ndarray:
    return x[:, FEATURE_COLUMNS.index(name)]


def _paired_with_itself(x: np.ndarray) -> np.ndarray:
    y = x.copy()
    for c in DMA_COLUMNS:
        y[:, FEATURE_COLUMNS.index("nx_" + c)] = y[:, FEATURE_COLUMNS.index(c)]
    return y


def test_the_next_calls_dma_is_the_next_channel_tiles():
    """Channels innermost (the library's order): the 240-channel call is followed by the 16-channel one and that by
    the next output tile's 240-channel one; over the loop the successors are the calls themselves, reordered."""
    e = _conv(("K", "C"))
    assert _slot_loop(e) == "C"
    x = conv_calls(e, 16.0)
    count, cc = _col(x, "count"), _col(x, "ld_bytes")
    for c in DMA_COLUMNS:
        assert float((_col(x, "nx_" + c) * count).sum()) == pytest.approx(float((_col(x, c) * count).sum()))
    big, small = cc.max(), cc.min()
    assert small < big / 5  # 16 channels against 240
    assert set(zip(cc.tolist(), _col(x, "nx_ld_bytes").tolist())) == {(big, small), (small, big)}


def test_a_small_last_channel_tile_exposes_the_large_calls_dma():
    """A compute-bound large call followed by a small one: the small call's short compute hides little of the next
    large call's loads, so the layer takes longer than each call overlapped with its own DMA; the same calls with
    equal channel tiles (two of 128) are paired with calls like themselves and lose nothing."""
    x = conv_calls(_conv(("K", "C")), 16.0)
    assert cycles_from_calls(x, SLOTS).cycles > 1.02 * cycles_from_calls(_paired_with_itself(x), SLOTS).cycles
    even = conv_calls(_conv(("K", "C"), t_c=128), 16.0)
    assert cycles_from_calls(even, SLOTS).cycles == pytest.approx(
        cycles_from_calls(_paired_with_itself(even), SLOTS).cycles, rel=1e-12)


def test_the_defaults_model_the_slots_and_zero_turns_them_off():
    """CostParams.call_slots is 1 in the shipped defaults (the hardware's two slots; held out, every MAPE improves
    with them): the large call's DMA beside the small call's compute is exposed. With call_slots 0 each call
    overlaps its own DMA, whatever its successor."""
    x = conv_calls(_conv(("K", "C")), 16.0)
    assert DEFAULT_PARAMS.call_slots == 1
    assert cycles_from_calls(x, DEFAULT_PARAMS).cycles > 1.02 * cycles_from_calls(_paired_with_itself(x),
                                                                                   DEFAULT_PARAMS).cycles
    off = DEFAULT_PARAMS.model_copy(update={"call_slots": 0.0})
    assert cycles_from_calls(x, off).cycles == cycles_from_calls(_paired_with_itself(x), off).cycles


@pytest.mark.parametrize("case", ["tileplan", "not overlapped", "pixels innermost"])
def test_calls_outside_the_fsm_or_alike_pair_with_themselves(case):
    """Tileplan's code issues its own instructions (no loop_conv_ws), calls that do not overlap have nothing to pair,
    and where the innermost loop is not a channel loop the calls next to each other are alike: each call's DMA is
    its own."""
    e = {"tileplan": _conv(("K", "C"), reuse=True),
         "not overlapped": dataclasses.replace(_conv(("K", "C")), overlapped=False),
         "pixels innermost": dataclasses.replace(_conv(("K", "C", "P")), t_h=7)}[case]
    assert _slot_loop(e) is None
    x = conv_calls(e, 16.0)
    assert (x == _paired_with_itself(x)).all()


def test_matmul_calls_pair_with_themselves():
    """tiled_matmul's loop_ws is another FSM: its calls keep their own DMA."""
    e = Execution(kind="matmul", dim=16, batch=1, groups=1, out_h=64, out_w=1, k=1000, c=2048, r=1, s=1,
                  stride=(1, 1), pad=(0, 0), in_h=64, in_w=1, t_n=1, t_h=4, t_w=1, t_k=8, t_c=15, t_r=1, t_s=1,
                  k_step=0, c_step=0, order=("K", "P", "C"))
    x = matmul_calls(e, 16.0)
    assert len(x) > 1 and (x == _paired_with_itself(x)).all()
    assert (call_features(e, 16.0) == x).all()
