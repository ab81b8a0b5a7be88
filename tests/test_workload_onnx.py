"""ONNX models -> contract layers (shapes only), through the library, the CLI and POST /schedule."""

from __future__ import annotations

import base64

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tileplan.errors import InputError
from tileplan.workload import Conv2dLayer, MatmulLayer
from tileplan.workload_onnx import load_onnx


def _init(name: str, shape: list[int], dtype=np.int8) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(shape, dtype=dtype), name)


def _scalar(name: str, value, dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def quantized_cnn() -> bytes:
    """QOperator form: QLinearConv 3->16 3x3/2 pad 1, depthwise QLinearConv 16 3x3 (SAME_UPPER), then
    dequantise, global pool, flatten, quantise, QLinearMatMul 16->10. Input has a symbolic batch."""
    q = [_scalar("s", 0.02, np.float32), _scalar("z", 0, np.uint8), _scalar("ws", 0.01, np.float32), _scalar("wz", 0, np.int8)]
    inits = q + [_init("w1", [16, 3, 3, 3]), _init("w2", [16, 1, 3, 3]), _init("w3", [16, 10])]
    nodes = [
        helper.make_node("QLinearConv", ["x", "s", "z", "w1", "ws", "wz", "s", "z"], ["c1"], name="stem",
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("QLinearConv", ["c1", "s", "z", "w2", "ws", "wz", "s", "z"], ["c2"], name="dw",
                         group=16, auto_pad="SAME_UPPER"),
        helper.make_node("DequantizeLinear", ["c2", "s", "z"], ["f2"]),
        helper.make_node("GlobalAveragePool", ["f2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["fl"]),
        helper.make_node("QuantizeLinear", ["fl", "s", "z"], ["qfl"]),
        helper.make_node("QLinearMatMul", ["qfl", "s", "z", "w3", "ws", "wz", "s", "z"], ["y"], name="classifier"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, ["batch", 3, 32, 30])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def qdq_attention() -> bytes:
    """QDQ form: a weight DequantizeLinear feeding MatMul (2-D weight), an asymmetric-padded Conv1D, and an
    attention-style product of two activations [1, 12, 128, 64] x [1, 12, 64, 128]."""
    inits = [_scalar("s", 0.02, np.float32), _scalar("z", 0, np.int8), _init("wq", [768, 64]), _init("wc", [32, 8, 4])]
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wq_f"]),
        helper.make_node("MatMul", ["h", "wq_f"], ["proj"], name="proj"),
        helper.make_node("MatMul", ["qa", "kb"], ["scores"], name="scores"),
        helper.make_node("DequantizeLinear", ["wc", "s", "z"], ["wc_f"]),
        helper.make_node("Conv", ["seq", "wc_f"], ["conv_out"], name="conv1d", pads=[1, 2], strides=[2]),
    ]
    graph = helper.make_graph(
        nodes, "qdq",
        [
            helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 128, 768]),
            helper.make_tensor_value_info("qa", TensorProto.FLOAT, [1, 12, 128, 64]),
            helper.make_tensor_value_info("kb", TensorProto.FLOAT, [1, 12, 64, 128]),
            helper.make_tensor_value_info("seq", TensorProto.FLOAT, [1, 8, 100]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("proj", "scores", "conv_out")],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_qoperator_model_becomes_its_conv_and_matmul_layers():
    wl = load_onnx(quantized_cnn())
    assert wl.name == "tiny_cnn"
    stem, dw, fc = wl.layers
    assert stem == Conv2dLayer(name="stem", in_channels=3, out_channels=16, in_h=32, in_w=30, kernel=(3, 3),
                               stride=(2, 2), padding=(1, 1))
    assert (stem.out_h, stem.out_w) == (16, 15)
    # SAME_UPPER, stride 1, 3x3: padding 1 on each side; depthwise = groups == channels
    assert (dw.groups, dw.in_channels, dw.out_channels, dw.in_h, dw.in_w, dw.padding) == (16, 16, 16, 16, 15, (1, 1))
    assert fc == MatmulLayer(name="classifier", M=1, K=16, N=10)


def test_qdq_model_weights_matmul_attention_and_conv1d():
    proj, scores, conv = load_onnx(qdq_attention()).layers
    assert (proj.M, proj.K, proj.N, proj.count) == (128, 768, 64, 1)  # leading dims fold into M
    assert (scores.M, scores.K, scores.N, scores.count) == (128, 64, 128, 12)  # one product per head
    # Conv1D over 100 steps, kernel 4, stride 2, pads (1, 2): ONNX output (100+3-4)//2+1 = 50, kept exactly
    assert (conv.in_h, conv.in_w, conv.kernel, conv.stride) == (1, 100, (1, 4), (1, 2))
    assert conv.out_w == 50 and conv.out_h == 1


def test_not_onnx_is_a_clear_error():
    with pytest.raises(InputError) as err:
        load_onnx(b"\x00garbage not a protobuf")
    assert err.value.loc[0] == "model"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    with pytest.raises(InputError, match="no convolution or matrix product"):
        load_onnx(helper.make_model(graph).SerializeToString())


def test_cli_schedules_a_model(tmp_path, capsys):
    from tileplan.cli import main

    path = tmp_path / "tiny.onnx"
    path.write_bytes(quantized_cnn())
    assert main(["schedule", "--hw", "gemmini-16x16", "--model", str(path), "--mapper", "gemmini-auto"]) == 0
    out = capsys.readouterr().out
    assert "stem" in out and "dw" in out and "classifier" in out


@pytest.fixture()
def api(tmp_path):
    from fastapi.testclient import TestClient

    from tileplan.api.app import create_app
    from tileplan.settings import Settings

    with TestClient(create_app(Settings(data_dir=tmp_path, solver_processes=1))) as client:
        yield client


def test_post_schedule_with_a_base64_model(api):
    body = {"hardware": "gemmini-16x16", "model": base64.b64encode(qdq_attention()).decode(),
            "options": {"mapper": "gemmini-auto"}}
    r = api.post("/schedule", json=body)
    assert r.status_code == 200, r.text
    plans = r.json()["plans"]
    assert [p["layer"]["name"] for p in plans] == ["proj", "scores", "conv1d"]
    assert r.json()["summary"]["layers"] == 3
    bad = api.post("/schedule", json={"hardware": "gemmini-16x16", "model": "%%%"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == ["body", "model"]
    both = api.post("/schedule", json={**body, "layers": [{"op": "matmul", "M": 4, "K": 4, "N": 4}]})
    assert both.status_code == 422


def test_a_layer_has_a_bias_when_its_node_has_one():
    """Gemmini loads a bias into the accumulator only when the layer has one (issue 13): Conv's 3rd input,
    QLinearConv's 9th, Gemm's C."""
    inits = [_init("w", [8, 4, 3, 3]), _init("b", [8], np.int32), _init("wg", [16, 8]), _init("c", [8], np.int32)]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["y1"], name="with_bias", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w"], ["y2"], name="without", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w", ""], ["y3"], name="empty_name", pads=[1, 1, 1, 1]),
        helper.make_node("Gemm", ["v", "wg", "c"], ["y4"], name="gemm"),
    ]
    graph = helper.make_graph(
        nodes, "bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y1", "y2", "y3", "y4")],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    assert [layer.bias for layer in load_onnx(model).layers] == [True, False, False, True]
    stem = load_onnx(quantized_cnn()).layers[0]
    assert stem.bias is False  # QLinearConv with 8 inputs


def _float_conv_model(dtype: int, np_dtype) -> bytes:
    """A float16 (or float32 / bfloat16) Conv: no DequantizeLinear, float weights; and a quantized QDQ one beside."""
    nodes = [
        helper.make_node("Conv", ["x", "wf"], ["y"], name="half_conv", pads=[1, 1, 1, 1]),
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wq_f"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xq_f"]),
        helper.make_node("Conv", ["xq_f", "wq_f"], ["yq"], name="int8_conv"),
    ]
    wf = helper.make_tensor("wf", dtype, [8, 4, 3, 3], np.zeros(8 * 4 * 9, np_dtype).tobytes(), raw=True)
    inits = [wf, _init("wq", [8, 4, 1, 1]), _scalar("s", 0.02, np.float32), _scalar("z", 0, np.int8)]
    graph = helper.make_graph(
        nodes, "mixed",
        [helper.make_tensor_value_info("x", dtype, [1, 4, 16, 16]),
         helper.make_tensor_value_info("xq", TensorProto.INT8, [1, 4, 16, 16])],
        [helper.make_tensor_value_info("y", dtype, None), helper.make_tensor_value_info("yq", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize(("dtype", "np_dtype", "label"), [(TensorProto.FLOAT16, np.float16, "float16"),
                                                          (TensorProto.FLOAT, np.float32, "float32")])
def test_a_float_layer_is_planned_with_a_note_saying_so(dtype, np_dtype, label):
    """A float Conv is planned as the hardware's words (what it would cost once quantized), and the notes say so and
    that `compile` computes it in float on the host: planning it silently as int8 misled (the layer list alone did
    not tell a float16 model from a quantized one)."""
    wl = load_onnx(_float_conv_model(dtype, np_dtype))
    assert [layer.name for layer in wl.layers] == ["half_conv", "int8_conv"]
    notes = [n for n in wl.notes if "not quantized" in n]
    assert len(notes) == 1, wl.notes
    assert "1 of 2" in notes[0] and "half_conv" in notes[0] and label in notes[0] and "int8_conv" not in notes[0]
    assert "on the host" in notes[0]


def test_quantized_models_get_no_float_note():
    assert not any("not quantized" in n for n in load_onnx(quantized_cnn()).notes)
