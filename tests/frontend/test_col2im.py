"""Col2Im as onnxruntime computes it (timm's VOLO folds its outlook attention's patches back into an image with
F.fold, which torch's dynamo exporter writes as Col2Im at opset 18, between DequantizeLinear and QuantizeLinear;
held-out set 9's timm_volo_d1@dynamo). TVM's ONNX importer has no converter: the compile refused the model
("operator Col2Im ... is not supported"). onnxruntime's kernel (math::Col2im, NCHW) sets the image to 0 and adds
each column element at its pixel, kernel position after kernel position (kh, then kw): every pixel the float sum
of its patches' values in that order, which the host reproduces bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes

from tileplan.errors import InputError
from tileplan.frontend.reference import reference_outputs
from tileplan.frontend.runner import run_artifact


def _blocks(image: list[int], block: list[int], dil: list[int], pads: list[int], strides: list[int]) -> int:
    n = len(image)
    out = 1
    for d in range(n):
        out *= (image[d] + pads[d] + pads[n + d] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1
    return out


def _model(c: int, image: list[int], block: list[int], dil: list[int], pads: list[int], strides: list[int],
           batch: int = 1) -> tuple[bytes, list[int]]:
    """x [batch, c * prod(block), L] -> Q -> DQ -> Col2Im(image, block) -> y (float): the host's float sums
    themselves, compared with onnxruntime's bit for bit."""
    from onnx import TensorProto, helper, numpy_helper

    k = int(np.prod(block))
    shape = [batch, c * k, _blocks(image, block, dil, pads, strides)]
    consts = {"s": np.float32(0.037), "z": np.int8(-3), "image": np.asarray(image, np.int64),
              "block": np.asarray(block, np.int64)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Mul", ["xd", "xd"], ["sq"]),  # values whose float sums round: not all multiples of s
             helper.make_node("Col2Im", ["sq", "image", "block"], ["y"], dilations=dil, pads=pads, strides=strides,
                              name="fold")]
    graph = helper.make_graph(nodes, "col2im", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, c, *image])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model.SerializeToString(), shape


@pytest.mark.parametrize("c,image,block,dil,pads,strides,batch", [
    (6, [14, 14], [3, 3], [1, 1], [1, 1, 1, 1], [2, 2], 1),   # VOLO-D1's outlooker fold at a 64 x 64 image
    (4, [9, 11], [3, 2], [1, 1], [0, 0, 0, 0], [1, 1], 2),    # onnxruntime's fast path (no padding, no dilation)
    (3, [10, 9], [2, 3], [2, 1], [1, 0, 2, 1], [1, 2], 1),    # dilation, uneven padding and strides
    (2, [12], [4], [1], [0, 0], [1], 1),                      # 1-D (onnxruntime's N-d path)
    (2, [5, 6, 4], [2, 3, 2], [1, 1, 1], [0] * 6, [1, 1, 1], 1),  # 3-D
])
def test_col2im_is_onnxruntimes_bit_for_bit(c, image, block, dil, pads, strides, batch) -> None:
    data, shape = _model(c, image, block, dil, pads, strides, batch)
    res = compile_bytes(data)
    rng = np.random.default_rng(5)
    for _ in range(2):
        feeds = {"x": rng.standard_normal(shape).astype(np.float32) * 3}
        got = run_artifact(res.artifact, feeds).outputs["y"]
        want = reference_outputs(data, feeds, "ort")["y"]
        differ = got.view(np.int32) != want.view(np.int32)
        assert not differ.any(), (f"{int(differ.sum())} of {differ.size} differ, largest "
                                  f"{float(np.abs(got - want).max()):.3g}")


def test_an_n_d_col2im_with_strides_is_refused_naming_the_node() -> None:
    """onnxruntime's N-d Col2Im (not 2-D) takes the number of blocks per axis as image - kernel + 1, whatever the
    strides and pads: with those it computes something else than ONNX's definition; refused, said why."""
    data, _ = _model(2, [12], [3], [1], [0, 0], [2])
    with pytest.raises(InputError, match="fold"):
        compile_bytes(data)
