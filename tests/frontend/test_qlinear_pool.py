"""A quantized AveragePool (dequantize -> AveragePool -> quantize) as onnxruntime computes it: both judges run it
as the integer operator QLinearAveragePool (the QDQ file through `ort-int8`'s QDQ fusion, a QOperator file
directly), whose kernel dequantizes each code (s_x * (x - z_x), float32), sums the window in order, divides by
the count and rounds `y / s_y + z_y` with the zero point added before the rounding, not after it as
QuantizeLinear does. With an odd output zero point every exact tie rounds the other way (and adding z_y in float32
moves a few more values across a tie): on DenseNet-121's transition AveragePools 3% of the elements were 1 LSB
apart, the first differing tensor of the model (bench/zoo_trace.py)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import assert_offloaded_and_matching, compile_bytes, ort_quantize

from tileplan.frontend.reference import reference_outputs
from tileplan.frontend.runner import run_artifact

SHAPE = [1, 8, 32, 32]


def _model(xs: float, xz: int, ys: float, yz: int, qoperator: bool = False, **pool: object) -> bytes:
    """x -> Q -> [DQ -> AveragePool -> Q | QLinearAveragePool] -> DQ -> y."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper, shape_inference

    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (
        ("xs", np.float32(xs)), ("xz", np.int8(xz)), ("ys", np.float32(ys)), ("yz", np.int8(yz)))]
    if qoperator:
        pooled = [helper.make_node("QLinearAveragePool", ["xq", "xs", "xz", "ys", "yz"], ["pq"],
                                   domain="com.microsoft", **pool)]
    else:
        pooled = [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
                  helper.make_node("AveragePool", ["xd"], ["p"], **pool),
                  helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["pq"])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), *pooled,
             helper.make_node("DequantizeLinear", ["pq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "avgpool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    # the output's shape: onnx's shape inference of the QDQ form (it does not know com.microsoft operators)
    qdq = model if not qoperator else onnx.load_model_from_string(_model(xs, xz, ys, yz, **pool))
    inferred = {v.name: v for v in shape_inference.infer_shapes(qdq).graph.value_info}
    model.graph.output[0].type.CopyFrom(inferred["pq"].type)
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    return model.SerializeToString()


@pytest.mark.parametrize("scales, pool", [
    ((0.05, 3, 0.05, 3), {"kernel_shape": [2, 2], "strides": [2, 2]}),          # DenseNet's transitions
    ((0.031, 0, 0.031, -128), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((0.05, -7, 0.04, 5), {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1],
                           "count_include_pad": 1}),                             # Inception's branch pools
    ((0.05, -7, 0.04, 5), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((0.02, 1, 0.03, -3), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
])
@pytest.mark.parametrize("qoperator", [False, True], ids=["qdq", "qoperator"])
def test_quantized_average_pool_equals_onnxruntimes_qlinearaveragepool(scales, pool, qoperator):
    """The QDQ form against its judge `ort-int8` (onnxruntime's default session on x86 leaves this unit in
    float), the QOperator form against the default session."""
    data = _model(*scales, qoperator=qoperator, **pool)
    xs, xz = scales[0], scales[1]
    codes = np.random.default_rng(0).integers(-128, 128, SHAPE)
    x = ((codes - xz) * np.float32(xs)).astype(np.float32)
    result = compile_bytes(data)
    assert any("QLinearAveragePool" in n for n in result.summary["notes"]), result.summary["notes"]
    got = run_artifact(result.artifact, {"x": x}).outputs["y"]
    ref = "ort" if qoperator else "ort-int8"
    np.testing.assert_array_equal(got, reference_outputs(data, {"x": x}, ref)["y"], err_msg=ref)


@pytest.mark.parametrize("qoperator", [False, True])
def test_quantized_global_average_pool_equals_onnxruntimes_qlinearglobalaveragepool(qoperator):
    """MaxViT-T's /blocks.0/layers.1/layers/MBconv/layers/squeeze_excitation/avgpool/GlobalAveragePool (its scales,
    a 56 x 56 image): both judges run it as QLinearGlobalAveragePool (`ort-int8`'s QDQ fusion; a QOperator file
    directly), whose kernel sums the codes in int32 and requantizes once, round_half_even(float(sum - z_x * N) *
    (s_x / (s_y * N))) + z_y; a float mean of the dequantized values rounds a few channels 1 code apart (MaxViT's
    first differing activation after the broadcast-Add fix, bench/zoo_trace.py: 1 of 256 channels)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    xs, xz, ys, yz = 0.02463179, -121, 0.00101412, -128
    shape = [1, 4096, 56, 56]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (
        ("xs", np.float32(xs)), ("xz", np.int8(xz)), ("ys", np.float32(ys)), ("yz", np.int8(yz)))]
    pooled = ([helper.make_node("QLinearGlobalAveragePool", ["xq", "xs", "xz", "ys", "yz"], ["pq"],
                                domain="com.microsoft", channels_last=0)] if qoperator else
              [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
               helper.make_node("GlobalAveragePool", ["xd"], ["p"]),
               helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["pq"])])
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), *pooled,
             helper.make_node("DequantizeLinear", ["pq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "gap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, shape[1], 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data = model.SerializeToString()
    # channel means near MaxViT's (a few codes above z_x), spread so that many output codes occur
    rng = np.random.default_rng(0)
    codes = np.clip(rng.integers(-121, -110, (1, shape[1], 1, 1)) + rng.integers(-3, 4, shape), -128, 127)
    x = ((codes - xz) * np.float32(xs)).astype(np.float32)
    got = run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"]
    np.testing.assert_array_equal(got, reference_outputs(data, {"x": x}, "ort-int8" if not qoperator else "ort")["y"])


def test_a_global_average_pool_onnxruntime_makes_channels_last_compiles_and_matches():
    """DaViT's head (held-out set 10's timm_davit_tiny): tokens (N, L, C) -> Transpose(0, 2, 1) -> Reshape to
    (N, C, H, W) -> GlobalAveragePool, in QOperator form. onnxruntime's basic graph optimisation, which the import
    runs to fold shapes, pushes the Transpose through as a channels_last=1 QLinearGlobalAveragePool (its judge's
    session does the same): the import refused that ("channels_last=1 is not supported"). Now the codes are
    transposed to channels-first around the same pool: the same integer arithmetic per channel. The tokens come
    from a residual QLinearAdd, as DaViT's, whose output's rank onnx's inference of the file does not give (the
    pool's rank is then inferred over the nodes already rewritten: it was refused as unknown)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32) * 0.3, "w2"),
             numpy_helper.from_array(np.array([0], np.int64), "start"),
             numpy_helper.from_array(np.array([2], np.int64), "end"),
             numpy_helper.from_array(np.array([4, 4], np.int64), "hw"),
             numpy_helper.from_array(rng.standard_normal((16, 5)).astype(np.float32) * 0.3, "wh")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("MatMul", ["x", "w2"], ["m2"]),
             helper.make_node("Add", ["m", "m2"], ["t"]),  # QLinearAdd (com.microsoft): no shape inference
             helper.make_node("Transpose", ["t"], ["tt"], perm=[0, 2, 1]),
             # the image's shape from the tokens' (timm: x.reshape(B, C, H, W) with B, C read from x.shape)
             helper.make_node("Shape", ["tt"], ["s"]),
             helper.make_node("Slice", ["s", "start", "end"], ["nc"]),
             helper.make_node("Concat", ["nc", "hw"], ["shape"], axis=0),
             helper.make_node("Reshape", ["tt", "shape"], ["img"]),
             helper.make_node("GlobalAveragePool", ["img"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "wh"], ["y"])]
    g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = ort_quantize(model, "qoperator")
    assert_offloaded_and_matching(data, compile_bytes(data))
