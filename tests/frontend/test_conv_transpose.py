"""Transposed convolutions (a UNet's decoder: ConvTranspose 2x2 stride 2) and Einsum products: their MACs count in
the summary's totals, whether or not the accelerator runs them."""

from __future__ import annotations

from frontend_helpers import OPTIONS, compile_bytes
from onnx import helper

from tileplan.frontend import zoo
from tileplan.frontend.compile import _node_macs

FAST = OPTIONS.model_copy(update={"emulate": False})


def _unet_up(seed: int = 0, size: int = 8) -> object:
    """conv 3x3 (8 -> 16) + ReLU, ConvTranspose 2x2 stride 2 (16 -> 8), conv 3x3 (8 -> 4): a UNet decoder step."""
    g = zoo._Graph(seed)
    y = g.conv("input", 8, 16, name="conv1")
    w = g.weight((16, 8, 2, 2), fan_in=16 * 4)
    y = g.op("ConvTranspose", [y, w, g.bias(8)], "up", kernel_shape=[2, 2], strides=[2, 2])
    y = g.conv(y, 8, 4, relu="", name="conv2")
    return g.model("unet_up", {"input": [1, 8, size, size]}, y, [1, 4, 2 * size, 2 * size])


def test_conv_transpose_macs_are_counted():
    """Each input element of a ConvTranspose multiplies C_out / group x kH x kW weights: 8 * 8 * 16 inputs x 8 x 2 x 2
    here; before, the summary counted 0 for it and called a model whose ConvTranspose stays on the host 100%
    offloaded (a UNet's decoder)."""
    data = zoo.quantize(_unet_up(), "qdq")
    res = compile_bytes(data, options=FAST)
    ops = {o["name"]: o for o in res.summary["ops"]}
    up = 8 * 8 * 16 * 8 * 2 * 2
    convs = 8 * 8 * 16 * 8 * 9 + 16 * 16 * 4 * 8 * 9
    assert ops["up"]["macs"] == up
    t = res.summary["total"]
    assert t["macs"] == up + convs
    on_accel = sum(o["macs"] for o in res.summary["ops"] if o["where"] == "accelerator" and o.get("kernel"))
    assert t["accelerator_macs"] == on_accel
    assert t["accelerator_mac_share"] == round(on_accel / (up + convs), 6)


def test_einsum_macs_are_counted():
    """An Einsum of two operands multiplies once per point of its index space: b h i j d here (attention's
    scores, as MaxViT and Swin V2 export them)."""
    node = helper.make_node("Einsum", ["q", "k"], ["s"], equation="bhid,bhjd->bhij")
    shapes = {"q": (1, 2, 5, 8), "k": (1, 2, 7, 8), "s": (1, 2, 5, 7)}
    assert _node_macs(node, shapes) == 1 * 2 * 5 * 7 * 8
    one = helper.make_node("Einsum", ["q"], ["t"], equation="bhid->bhdi")  # a transpose: no product
    assert _node_macs(one, {"q": (1, 2, 5, 8), "t": (1, 2, 8, 5)}) == 0
    ell = helper.make_node("Einsum", ["q", "k"], ["s"], equation="...id,...jd->...ij")
    assert _node_macs(ell, shapes) == 1 * 2 * 5 * 7 * 8
