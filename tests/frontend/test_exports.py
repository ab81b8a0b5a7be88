"""What PyTorch's exports hold that hand-written graphs do not (issue 24), in small onnx.helper models:
shape arithmetic (`Shape -> Gather -> Div -> Slice / Reshape`) that is constant for the compiled input shape,
1-D convolutions, and biases whose scale is not s_x * s_w (one bias shared by several convs)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import OPTIONS, assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact


def _model(g: zoo._Graph, x_shape: list[int], out: str, out_shape: list[int]) -> bytes:
    rng = np.random.default_rng(0)
    model = g.model("export", {"x": x_shape}, out, out_shape)
    calib = [{"x": rng.standard_normal(x_shape).astype(np.float32)} for _ in range(8)]
    return zoo.quantize(model, "qdq", calib)


def _channel_split(g: zoo._Graph, x: str) -> tuple[str, str]:
    """ShuffleNetV2's split as torch.onnx exports `x.chunk(2, dim=1)` with shapes it computes at run time."""
    shape = g.op("Shape", [x])
    c = g.op("Gather", [shape, g.const(np.array(1, np.int64))], axis=0)
    half = g.op("Div", [c, g.const(np.array(2, np.int64))])
    half1 = g.op("Unsqueeze", [half, g.const(np.array([0], np.int64))])
    full1 = g.op("Unsqueeze", [c, g.const(np.array([0], np.int64))])
    axis = g.const(np.array([1], np.int64))
    a = g.op("Slice", [x, g.const(np.array([0], np.int64)), half1, axis])
    b = g.op("Slice", [x, half1, full1, axis])
    return a, b


def shuffle_block() -> bytes:
    g = zoo._Graph(seed=5)
    x = g.conv("x", 4, 16, name="stem")
    a, b = _channel_split(g, x)
    b = g.conv(b, 8, 8, name="branch")
    y = g.op("Concat", [a, b], axis=1)
    shape = g.op("Shape", [y])
    n = g.op("Unsqueeze", [g.op("Gather", [shape, g.const(np.array(0, np.int64))], axis=0),
                           g.const(np.array([0], np.int64))])
    flat = g.op("Reshape", [y, g.op("Concat", [n, g.const(np.array([-1], np.int64))], axis=0)])
    out = g.dense(flat, 16 * 6 * 6, 10, name="fc")
    return _model(g, [1, 4, 6, 6], out, [1, 10])


def test_shape_subgraphs_are_folded_and_the_model_compiles():
    data = shuffle_block()
    res = compile_bytes(data)
    s = res.summary
    assert any("Shape/Size operators" in n and "folded" in n for n in s["notes"]), s["notes"]
    ops = {o["name"]: o for o in s["ops"]}
    assert ops["stem"]["where"] == ops["branch"]["where"] == ops["fc"]["where"] == "accelerator"
    assert not any(o["onnx_op"] in ("Shape", "Gather", "Div") for o in s["ops"])  # folded away
    feeds = zoo.sample_inputs(data, seed=2)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def test_quantized_weights_go_round_onnxruntimes_folding(monkeypatch):
    """fold_shapes hands onnxruntime the model without its quantized weights (graph inputs in their place,
    `_weights_aside`) and puts them back: the same folded graph, initializers and note as folding it whole."""
    import onnx

    from tileplan.frontend import onnx_import

    data = shuffle_block()
    probe = onnx.load_model_from_string(data)
    aside = onnx_import._weights_aside(probe)
    assert aside and all(onnx_import._tensor_bytes(t) > onnx_import.FOLD_ASIDE_BYTES for t in aside)
    assert {t.name for t in aside} <= {i.name for i in probe.graph.input}

    got = {}
    for how in ("aside", "whole"):
        if how == "whole":
            monkeypatch.setattr(onnx_import, "_weights_aside", lambda model: [])
        folded, note = onnx_import.fold_shapes(onnx.load_model_from_string(data))
        got[how] = (folded, note)
    (a, note_a), (b, note_b) = got["aside"], got["whole"]
    assert note_a == note_b and "folded" in (note_a or "")
    assert [n.SerializeToString() for n in a.graph.node] == [n.SerializeToString() for n in b.graph.node]
    assert sorted(t.SerializeToString() for t in a.graph.initializer) == \
        sorted(t.SerializeToString() for t in b.graph.initializer)
    assert [i.SerializeToString() for i in a.graph.input] == [i.SerializeToString() for i in b.graph.input]
    assert not any(n.op_type == "Shape" for n in a.graph.node)


def conv1d_net() -> bytes:
    """An audio front end: Conv1d (k 5, stride 2, pad 2) + ReLU, Conv1d (k 3, dilation 2), pooled, dense."""
    g = zoo._Graph(seed=7)
    w1 = g.weight((16, 4, 5), fan_in=20)
    y = g.op("Relu", [g.op("Conv", ["x", w1, g.bias(16)], "conv1d_a", kernel_shape=[5], pads=[2, 2],
                          strides=[2])])
    w2 = g.weight((24, 16, 3), fan_in=48)
    y = g.op("Relu", [g.op("Conv", [y, w2, g.bias(24)], "conv1d_b", kernel_shape=[3], pads=[2, 2],
                          dilations=[2])])
    y = g.op("ReduceMean", [y], axes=[2], keepdims=0)
    out = g.dense(y, 24, 6, name="fc")
    return _model(g, [1, 4, 40], out, [1, 6])


def test_conv1d_runs_on_the_accelerator_as_a_2d_conv_with_h_1():
    data = conv1d_net()
    res = compile_bytes(data)
    ops = {o["name"]: o for o in res.summary["ops"]}
    for name, (c, w, k, s) in {"conv1d_a": (4, 40, 5, 2), "conv1d_b": (16, 20, 3, 1)}.items():
        o = ops[name]
        assert o["where"] == "accelerator", o["reason"]
        assert "1-D convolution run as a 2-D one with H = 1" in o["reason"]
        assert (o["layer"]["in_h"], o["layer"]["in_w"], o["layer"]["in_channels"]) == (1, w, c)
        assert o["layer"]["kernel"] == [1, k] and o["layer"]["stride"] == [1, s]
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    feeds = zoo.sample_inputs(data, seed=3)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def _with_bias_scale_of(data: bytes, conv: str, source: str) -> bytes:
    """The model with `conv`'s bias re-expressed (same real values, rounded) at `source`'s bias scale, as
    onnxruntime's quantizer leaves a bias shared by several convs."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load_model_from_string(data)
    inits = {t.name: t for t in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    by_name = {n.name: n for n in m.graph.node}
    dq, src = prod[by_name[conv].input[2]], prod[by_name[source].input[2]]
    b = numpy_helper.to_array(inits[dq.input[0]]).astype(np.float64)
    s_old = float(numpy_helper.to_array(inits[dq.input[1]]).reshape(-1)[0])
    s_new = float(numpy_helper.to_array(inits[src.input[1]]).reshape(-1)[0])
    inits[dq.input[0]].CopyFrom(numpy_helper.from_array(np.rint(b * s_old / s_new).astype(np.int32),
                                                        dq.input[0]))
    dq.input[1] = src.input[1]
    return m.SerializeToString()


def test_a_bias_at_another_scale_is_rescaled_not_left_on_the_host():
    g = zoo._Graph(seed=9)
    y = g.conv("x", 4, 8, name="c1")
    y = g.conv(y, 8, 8, name="c2")
    out = g.op("GlobalAveragePool", [y])
    data = _with_bias_scale_of(_model(g, [1, 4, 8, 8], out, [1, 8, 1, 1]), "c2", "c1")
    res = compile_bytes(data)
    ops = {o["name"]: o for o in res.summary["ops"]}
    assert ops["c2"]["where"] == "accelerator", ops["c2"]["reason"]
    assert "bias rescaled to accumulator units" in ops["c2"]["reason"]
    assert "rescaled" not in ops["c1"]["reason"]
    feeds = zoo.sample_inputs(data, seed=4)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


@pytest.mark.parametrize("kind", ["float", "broken"])
def test_a_bad_model_is_refused_before_tvm_or_the_plan_store_loads(tmp_path, kind):
    """`tileplan compile` refuses a float or broken model from its bytes alone (the issue measured 11-17 s when
    TVM's import came first); run in a fresh interpreter so nothing else has imported TVM."""
    import subprocess
    import sys

    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(zoo.build("cnn_small", "float") if kind == "float" else b"\x08\x07not a model")
    code = ("import sys\nfrom tileplan.cli import main\n"
            f"rc = main(['compile', {str(path)!r}, '--hw', 'gemmini-16x16', '--out', {str(tmp_path)!r}])\n"
            "print(rc, 'tvm' in sys.modules, 'sqlalchemy' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["2", "False", "False"], run.stdout + run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("tileplan: error: model")
    assert "float model" in run.stderr if kind == "float" else "not" in run.stderr


def test_every_host_op_has_a_specific_reason():
    data = zoo.build("attention", "qdq")
    res = compile_bytes(data, options=OPTIONS.model_copy(update={"emulate": False}))
    host = [o for o in res.summary["ops"] if o["where"] == "host"]
    assert host
    for o in host:
        assert not o["reason"].startswith("no accelerator op for"), (o["name"], o["reason"])
    by_op = {o["onnx_op"]: o["reason"] for o in host}
    assert "MatMul" not in by_op  # both of its activation x activation products run on the accelerator
    acts = [o for o in res.summary["ops"] if o["onnx_op"] == "MatMul" and o["op"] == "matmul_act"]
    assert sorted(o["name"] for o in acts) == ["attn_context", "attn_scores"]
    assert by_op["Softmax"].startswith("Softmax needs per-row statistics")
    assert by_op["Transpose"].startswith("Transpose moves or selects values")
    assert by_op["Add"].startswith("elementwise Add")
    assert "residual add" not in by_op["Div"]


def test_host_lowering_is_cached_and_the_cached_program_is_the_same(tmp_path, monkeypatch):
    import tempfile

    from tileplan.frontend import host_ops

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a cold cache of kernels, builds and host parts
    data = zoo.build("attention", "qdq")
    opts = OPTIONS.model_copy(update={"emulate": False})
    first = compile_bytes(data, options=opts)
    entries = list(tmp_path.glob("tileplan-codegen-*/host/*.json"))
    assert len(entries) == 1

    def no_lowering(mod):
        raise AssertionError("lowered again")

    monkeypatch.setattr(host_ops, "lower_host", no_lowering)
    second = compile_bytes(data, options=opts)
    assert second.artifact == first.artifact
