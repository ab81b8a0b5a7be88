"""A quantized 3-D convolution (a video net's Conv3d: r3d_18, mc3_18, r2plus1d_18) on the accelerator. It ran on
the host in float (`a 3-D convolution: the accelerator's kernels are 1-D and 2-D`): r3d_18 at an 8-frame clip
offloaded 0.001% of its 20.3 GMAC. A kt x kh x kw conv over T frames is, per output frame, one 2-D conv of the kt
input frames it reads stacked on the channel axis (frames outside the clip: the input zero point, as the 3-D conv
pads): the int8 frames are gathered by host copies into a batch of output frames, one 2-D conv of kt x C input
channels runs on the accelerator, and its int8 result is put back in NCTHW order. Integer arithmetic is the same
sums, so the result equals onnxruntime's QLinearConv."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import OPTIONS, assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact

FAST = OPTIONS.model_copy(update={"emulate": False})


def _conv3d(cin: int, cout: int, kernel: tuple[int, int, int], stride: tuple[int, int, int],
            pads: tuple[int, ...], frames: int = 5, side: int = 12, seed: int = 0) -> object:
    """input [1, cin, frames, side, side] -> Conv (3-D) -> Relu -> Conv (3-D, 1x1x1) -> output."""
    g = zoo._Graph(seed)
    w = g.weight((cout, cin, *kernel), fan_in=cin * int(np.prod(kernel)))
    y = g.op("Conv", ["input", w, g.bias(cout)], "conv3d", kernel_shape=list(kernel), strides=list(stride),
             pads=list(pads))
    y = g.op("Relu", [y])
    y = g.op("Conv", [y, g.weight((8, cout, 1, 1, 1), fan_in=cout), g.bias(8)], "pointwise3d",
             kernel_shape=[1, 1, 1])
    return g.model("conv3d", {"input": [1, cin, frames, side, side]}, y)


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize(("cin", "cout", "kernel", "stride", "pads"), [
    (3, 16, (3, 7, 7), (1, 2, 2), (1, 3, 3, 1, 3, 3)),  # r3d_18's stem
    (16, 16, (3, 3, 3), (2, 2, 2), (1, 1, 1, 1, 1, 1)),  # a strided residual block's first conv
    (16, 24, (3, 1, 1), (1, 1, 1), (1, 0, 0, 1, 0, 0)),  # r2plus1d_18's temporal conv
    (16, 24, (1, 3, 3), (1, 1, 1), (0, 1, 1, 0, 1, 1)),  # and its spatial one
])
def test_conv3d_runs_on_the_accelerator_equal_to_onnxruntime(fmt, cin, cout, kernel, stride, pads):
    data = zoo.quantize(_conv3d(cin, cout, kernel, stride, pads), fmt)
    res = compile_bytes(data, options=FAST)
    convs = [o for o in res.summary["ops"] if o["onnx_op"] in ("Conv", "QLinearConv")]
    assert len(convs) == 2 and all(o["where"] == "accelerator" for o in convs), [
        (o["name"], o["where"], o["reason"]) for o in convs]
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    for seed in (1, 2):
        feeds = zoo.sample_inputs(data, seed=seed)
        err = assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)
        assert float(err.max()) == 0.0
