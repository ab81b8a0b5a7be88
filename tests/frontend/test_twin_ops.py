"""Two layers with equal weights on the same input (nn.TransformerDecoder / Encoder deep-copy one layer, so an
untrained export's cross-attention key / value projections of the memory are equal in every layer: held-out set
7's tfm_decoder). TVM's FuseOpsByPattern makes one composite function of structurally equal matches and calls it
at each site; the summary listed the second op on the host ("not matched as dequantize -> MatMul ...") with its
MACs not offloaded, and modelled one call of the kernel where the program makes two."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact


def _twins(fmt: str) -> bytes:
    g = zoo._Graph(seed=4)
    w = (g.rng.standard_normal((32, 64)) / 6).astype(np.float32)
    b = (g.rng.standard_normal(64) / 10).astype(np.float32)
    t = g.op("Transpose", ["x"], "tr", perm=[1, 0, 2])
    ys = [g.op("Add", [g.op("MatMul", [t, g.const(w.copy(), "w")], f"mm{i}"), g.const(b.copy(), "b")])
          for i in range(2)]
    y = g.op("Mul", ys, "prod")
    model = g.model("twins", {"x": [1, 16, 32]}, y, [16, 1, 64])
    rng = np.random.default_rng(0)
    return zoo.quantize(model, fmt, [{"x": rng.standard_normal((1, 16, 32)).astype(np.float32)} for _ in range(8)])


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_equal_layers_on_one_input_are_both_offloaded(fmt):
    data = _twins(fmt)
    res = compile_bytes(data)
    mms = [o for o in res.summary["ops"] if o["onnx_op"] == "MatMul"]
    assert len(mms) == 2 and all(o["where"] == "accelerator" for o in mms), [(o["name"], o["reason"]) for o in mms]
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    kernel = next(o for o in mms if o.get("kernel"))
    twin = next(o for o in mms if o is not kernel)
    assert kernel["name"] in twin["reason"]
    # the kernel runs twice: its modelled cycles are both calls' (the emulated run counts both)
    assert abs(kernel["cycles_emulated"] / kernel["cycles_model"] - 1) < 0.15, kernel
    feeds = zoo.sample_inputs(data, seed=3)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def _two_forms_of_one_conv() -> bytes:
    """Three depthwise convs with equal weights, bias and scales in a chain (timm's EfficientViT-M0: its residual
    depthwise convs are zero-initialised, all alike). The first's weight DequantizeLinear comes before its bias's
    in the graph, the others' after: TVM's structural equality tells the first composite from the second (their
    bindings are in another order) and calls the second's for the third, which `_same_op` finds equal to both."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(9)
    c = 16
    w = rng.integers(-90, 90, (c, 1, 3, 3)).astype(np.int8)
    b = rng.integers(-500, 500, c).astype(np.int32)
    consts = {"s": np.float32(0.05), "z": np.int8(-2), "sw": np.float32(0.02), "zw": np.int8(0),
              "sb": np.float32(0.001), "zb": np.int32(0)}
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"]),
             helper.make_node("DequantizeLinear", ["q0", "s", "z"], ["d0"])]
    for i in range(3):
        inits += [numpy_helper.from_array(w.copy(), f"w{i}"), numpy_helper.from_array(b.copy(), f"b{i}")]
        dqw = helper.make_node("DequantizeLinear", [f"w{i}", "sw", "zw"], [f"wd{i}"], name=f"dqw{i}")
        dqb = helper.make_node("DequantizeLinear", [f"b{i}", "sb", "zb"], [f"bd{i}"], name=f"dqb{i}")
        nodes += [dqw, dqb] if i == 0 else [dqb, dqw]
        nodes += [helper.make_node("Conv", [f"d{i}", f"wd{i}", f"bd{i}"], [f"h{i}"], name=f"dw{i}", group=c,
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("QuantizeLinear", [f"h{i}", "s", "z"], [f"q{i + 1}"]),
                  helper.make_node("DequantizeLinear", [f"q{i + 1}", "s", "z"], [f"d{i + 1}"])]
    graph = helper.make_graph(nodes, "two_forms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 6])],
                              [helper.make_tensor_value_info("d3", TensorProto.FLOAT, [1, c, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_twin_is_counted_on_the_composite_it_calls():
    """EfficientViT-M0 (held-out set 8): the twins were attached to the first equal op, not to the one whose
    composite the program calls for them, so that op's modelled cycles counted 3 calls and its emulated 1 (5.0x
    apart on stage 2), the other op's the other way round."""
    data = _two_forms_of_one_conv()
    res = compile_bytes(data)
    convs = [o for o in res.summary["ops"] if o["onnx_op"] == "Conv"]
    assert all(o["where"] == "accelerator" for o in convs), [(o["name"], o["reason"]) for o in convs]
    kernels = [o for o in convs if o.get("kernel")]
    assert len(kernels) == 2, [(o["name"], o["reason"]) for o in convs]
    for o in kernels:
        assert 0.85 <= o["cycles_emulated"] / o["cycles_model"] <= 1.15, (o["name"], o["cycles_emulated"],
                                                                          o["cycles_model"])
    feeds = zoo.sample_inputs(data, seed=1)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)
