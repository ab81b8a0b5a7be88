"""Models that cannot be compiled fail with an error naming the node (or the input) and the reason; symbolic input
shapes take overrides; float models are refused unless Tileplan is asked to quantize them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from frontend_helpers import assert_matches_onnxruntime, compile_bytes

from tileplan.errors import InputError
from tileplan.frontend import zoo
from tileplan.frontend.compile import CompileOptions
from tileplan.frontend.onnx_import import load_model, to_relax
from tileplan.frontend.runner import run_artifact


def _model(nodes, inputs, outputs, inits=(), opset=17):
    from onnx import helper

    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, shape, elem=None):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, elem or TensorProto.FLOAT, shape)


def _quantized(model) -> bytes:
    rng = np.random.default_rng(0)
    shapes = {i.name: [d.dim_value or 1 for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    calib = [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()} for _ in range(4)]
    return zoo.quantize(model, "qdq", calib)


def test_not_onnx():
    with pytest.raises(InputError) as e:
        load_model(b"\x00\x01 definitely not a protobuf model")
    assert e.value.loc == ("model",) and "not an ONNX model" in e.value.msg
    with pytest.raises(InputError) as e:
        load_model(b"")
    assert e.value.loc == ("model",)


def test_checker_failure_names_the_node():
    from onnx import helper

    m = _model([helper.make_node("Conv", ["x"], ["y"], name="lonely_conv")], [_vi("x", [1, 3, 8, 8])],
               [_vi("y", [1, 3, 8, 8])])
    with pytest.raises(InputError) as e:
        load_model(m.SerializeToString())
    assert e.value.loc == ("model", "lonely_conv"), e.value
    assert "checker" in e.value.msg


def test_the_checker_reads_the_models_own_bytes_when_every_node_is_named(monkeypatch):
    """decode hands ONNX's checker the model's own bytes when naming the nodes changed nothing (no serialization of
    an 87 MB model again), the renamed model otherwise; an unnamed node the checker rejects is named as the import
    names it either way."""
    import onnx
    from onnx import helper

    from tileplan.frontend.onnx_import import decode

    seen = []
    real = onnx.checker.check_model
    monkeypatch.setattr(onnx.checker, "check_model", lambda m, *a, **k: (seen.append(m), real(m, *a, **k))[1])
    named = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", [1, 1, 4, 4])],
                   [_vi("y", [1, 1, 4, 4])]).SerializeToString()
    decode(named)
    assert seen[-1] is not None and isinstance(seen[-1], bytes) and seen[-1] == named
    unnamed = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 1, 4, 4])],
                     [_vi("y", [1, 1, 4, 4])]).SerializeToString()
    assert decode(unnamed).graph.node[0].name == "Relu_0"
    assert isinstance(seen[-1], onnx.ModelProto)
    bad = _model([helper.make_node("Conv", ["x"], ["y"])], [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 3, 8, 8])])
    with pytest.raises(InputError) as e:
        decode(bad.SerializeToString())
    assert e.value.loc == ("model", "Conv_0"), e.value


def test_an_opset_newer_than_onnx_defines_is_refused_naming_the_import():
    """ONNX's checker lets an unknown future opset through (a Relu at opset 999 compiled): its operators' meaning is
    not defined yet, so the model is refused at its opset_import rather than run with older semantics."""
    import onnx.defs
    from onnx import helper

    newest = onnx.defs.onnx_opset_version()
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 1, 8, 8])], [_vi("y", [1, 1, 8, 8])],
               opset=999)
    with pytest.raises(InputError) as e:
        load_model(m.SerializeToString())
    assert e.value.loc == ("model", "opset_import"), e.value
    assert "999" in e.value.msg and str(newest) in e.value.msg
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1, 1, 8, 8])], [_vi("y", [1, 1, 8, 8])],
               opset=newest)
    load_model(m.SerializeToString())  # the newest defined opset is accepted


def test_unsupported_op_on_the_only_path_names_the_node():
    from onnx import helper

    g = zoo._Graph(0)
    y = g.conv("x", 3, 4, name="conv")
    # (a Bernoulli: random, no converter in TVM's importer or Tileplan; ReverseSequence and Det, used here
    # before, now have one)
    g.nodes.append(helper.make_node("Bernoulli", [y], ["det"], name="coin"))
    m = _model(g.nodes, [_vi("x", [1, 3, 8, 8])], [_vi("det", [1, 4, 8, 8])], g.inits)
    data = _quantized(m)
    with pytest.raises(InputError) as e:
        to_relax(load_model(data))
    assert e.value.loc == ("model", "coin")
    assert "Bernoulli" in e.value.msg and "not supported" in e.value.msg


def test_shape_that_cannot_be_inferred_names_the_node():
    from onnx import TensorProto, helper

    # a Reshape whose target shape is computed from the data: no static shape
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], name="peak", keepdims=0),
             helper.make_node("Cast", ["m"], ["mi"], name="to_int", to=TensorProto.INT64),
             helper.make_node("Reshape", ["mi", "one"], ["shape"], name="as_shape"),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="data_dependent_reshape")]
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    m = _model(nodes, [_vi("x", [2, 8])], [_vi("y", ["n"])], [one])
    with pytest.raises(InputError) as e:
        load_model(m.SerializeToString(), quantize=True)
    assert e.value.loc[0] == "model" and "data_dependent_reshape" in str(e.value), e.value
    assert "cannot be inferred" in e.value.msg or "shape inference" in e.value.msg


def test_symbolic_input_needs_a_shape_and_takes_one():
    data = zoo.build("mlp", "qdq", batch=4)
    import onnx

    m = onnx.load_model_from_string(data)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    sym = m.SerializeToString()
    with pytest.raises(InputError) as e:
        load_model(sym)
    assert e.value.loc == ("input_shapes", "input") and "--input-shape input=" in e.value.msg
    with pytest.raises(InputError) as e:
        load_model(sym, input_shapes={"nope": [1, 64]})
    assert e.value.loc == ("input_shapes", "nope")
    with pytest.raises(InputError) as e:
        load_model(sym, input_shapes={"input": [3, 65]})
    assert e.value.loc == ("input_shapes", "input") and "fixed to 64" in e.value.msg
    res = compile_bytes(sym, input_shapes={"input": [3, 64]})
    assert res.summary["inputs"] == [{"name": "input", "shape": [3, 64], "dtype": "float32"}]
    feeds = {"input": np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)}
    assert_matches_onnxruntime(sym, run_artifact(res.artifact, feeds).outputs, feeds)


def test_float_model_refused_unless_asked_to_quantize():
    data = zoo.build("cnn_small", "float")
    with pytest.raises(InputError) as e:
        load_model(data)
    assert e.value.loc == ("model",)
    assert "float model" in e.value.msg and "quantize_static" in e.value.msg and "--quantize" in e.value.msg
    res = compile_bytes(data, options=CompileOptions(time_limit_s=2.0, quantize=True, calibration_samples=4))
    assert any("quantized by Tileplan" in n and "random" in n for n in res.summary["notes"])
    assert res.summary["total"]["accelerator_ops"] == 3
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    out = run_artifact(res.artifact, x).outputs["fc_out"]
    import onnxruntime as ort

    ref = ort.InferenceSession(data).run(None, x)[0]  # the float model: quantisation error only
    assert out.shape == ref.shape and np.all(np.isfinite(out))
    assert np.abs(out - ref).max() < 0.25 * np.abs(ref).max() + 0.05


def test_cli_errors_are_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    out = tmp_path / "build"
    proc = subprocess.run([sys.executable, "-m", "tileplan.cli", "compile", str(bad), "--hw", "gemmini-16x16",
                           "--out", str(out), "--no-cache"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tileplan: error: model") and "not an ONNX model" in lines[0]
    assert not out.exists() or not any(out.iterdir())  # nothing half-written
    flt = tmp_path / "float.onnx"
    flt.write_bytes(zoo.build("mlp", "float"))
    proc = subprocess.run([sys.executable, "-m", "tileplan.cli", "compile", str(flt), "--hw", "gemmini-16x16",
                           "--out", str(out), "--no-cache"], capture_output=True, text=True)
    assert proc.returncode == 2 and "float model" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run([sys.executable, "-m", "tileplan.run", str(bad), "--input", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("tileplan: error:"), proc.stderr


def _causal_mask_model():
    """Scores + a causal mask of -inf (PyTorch's own mask), softmax, a product: onnxruntime's static quantizer
    gives the mask, and the masked scores, an infinite scale."""
    from onnx import numpy_helper

    w = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    mask = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    nodes = [_node("MatMul", ["x", "w"], ["s"], "scores"), _node("Add", ["s", "mask"], ["sm"], "masked"),
             _node("Softmax", ["sm"], ["p"], "softmax", axis=-1), _node("MatMul", ["p", "w"], ["y"], "out")]
    return _model(nodes, [_vi("x", [1, 4, 4])], [_vi("y", [1, 4, 4])],
                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(mask, "mask")])


def _node(op, ins, outs, name, **attrs):
    from onnx import helper

    return helper.make_node(op, ins, outs, name=name, **attrs)


def test_an_infinite_scale_is_computed_as_onnx_defines_it_and_other_bad_scales_are_refused():
    """onnxruntime's quantizer gives a causal mask of -inf (PyTorch's own) and the masked scores a scale of inf.
    onnxruntime runs such a model as ONNX defines it (0 x inf = NaN, NaN quantized to -128 on x86), so the program
    does the same: the model compiles, with a warning naming the nodes and the fix, and its output equals
    onnxruntime's on the file's own semantics (no graph optimisation). A scale of 0, a negative or a NaN one is
    refused naming the node: every value of the tensor is undefined."""
    from onnx import numpy_helper

    from tileplan.frontend.reference import agreement, output_steps, reference_outputs

    with pytest.warns(RuntimeWarning):  # onnxruntime's quantizer divides -inf by its infinite scale
        data = _quantized(_causal_mask_model())
    res = compile_bytes(data)
    warning = [n for n in res.summary["notes"] if "scale inf" in n]
    assert len(warning) == 1 and "mask" in warning[0] and "finite" in warning[0], res.summary["notes"]
    x = {"x": np.random.default_rng(1).standard_normal((1, 4, 4)).astype(np.float32)}
    got = run_artifact(res.artifact, x).outputs
    want = reference_outputs(data, x, "ort-noopt")
    assert agreement(got, want, output_steps(data))["equal"] == 1.0, (got, want)

    import onnx

    for bad in (0.0, -0.5, float("nan")):
        m = onnx.load_model_from_string(data)
        dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and "mask" in n.input[0])
        init = next(i for i in m.graph.initializer if i.name == dq.input[1])
        init.CopyFrom(numpy_helper.from_array(np.array(bad, np.float32), init.name))
        with pytest.raises(InputError) as e:
            load_model(m.SerializeToString())
        assert e.value.loc == ("model", dq.name) and "scale" in e.value.msg and "positive" in e.value.msg


def _per_channel_conv(scale_len: int, zero_len: int | None = None, axis: int = 0) -> bytes:
    """x -> Q -> DQ -> Conv(DQ(int8 weights of 8 output channels, per-channel scales)) -> Q -> DQ -> y."""
    from onnx import numpy_helper

    w = np.random.default_rng(0).integers(-5, 5, (8, 4, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.full(scale_len, 0.01, np.float32), "ws"),
             numpy_helper.from_array(np.zeros(scale_len if zero_len is None else zero_len, np.int8), "wz"),
             numpy_helper.from_array(np.float32(0.05), "xs"), numpy_helper.from_array(np.int8(0), "xz"),
             numpy_helper.from_array(np.float32(0.1), "ys"), numpy_helper.from_array(np.int8(0), "yz")]
    nodes = [_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], "qx"),
             _node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], "dqx"),
             _node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], "dqw", axis=axis),
             _node("Conv", ["xd", "wd"], ["c"], "conv", pads=[1, 1, 1, 1]),
             _node("QuantizeLinear", ["c", "ys", "yz"], ["cq"], "qc"),
             _node("DequantizeLinear", ["cq", "ys", "yz"], ["y"], "dqc")]
    return _model(nodes, [_vi("x", [1, 4, 8, 8])], [_vi("y", [1, 8, 8, 8])], inits).SerializeToString()


@pytest.mark.parametrize("scale_len, zero_len, axis, says", [
    (5, None, 0, "5 scales"),            # not the 8 output channels along axis 0
    (4, None, 0, "4 scales"),
    (8, 5, 0, "5 zero points"),          # the zero point's length is not its scale's
    (8, None, 1, "8 scales"),            # axis 1 has the 4 input channels
    (8, None, 4, "axis 4"),              # beyond the weight's rank
])
def test_per_axis_scales_that_do_not_fit_their_tensor_are_refused_naming_the_node(tmp_path, scale_len, zero_len,
                                                                                   axis, says):
    """A per-axis scale (or zero point) whose length is not the tensor's size along the axis: one clear error
    naming the node, its tensor, the axis and both sizes, from the API and as one line from the CLI (it came from
    TVM's importer with its op's description, after TVM had printed to stdout)."""
    data = _per_channel_conv(scale_len, zero_len, axis)
    with pytest.raises(InputError) as e:
        load_model(data)
    assert e.value.loc == ("model", "dqw"), e.value.loc
    assert "'wq'" in e.value.msg and says in e.value.msg and "ir.Op" not in e.value.msg, e.value.msg
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data)
    proc = subprocess.run([sys.executable, "-m", "tileplan.cli", "compile", str(bad), "--hw", "gemmini-16x16",
                           "--out", str(tmp_path / "build"), "--no-cache"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr


def test_per_axis_scales_that_fit_still_compile():
    res = compile_bytes(_per_channel_conv(8))
    assert res.summary["ops"], res.summary


def test_a_converter_failure_prints_nothing_to_stdout(capfd, monkeypatch):
    """TVM's ONNX importer prints "Error converting operator ..." (the node's inputs, several lines) to stdout before
    re-raising a converter's error; Tileplan's own error names the node, so that print is noise in front of the CLI's
    one line (and in a service's output). A converter made to fail (TVM's Relu) shows it."""
    from tvm.relax.frontend.onnx import onnx_frontend

    def broken(*args, **kwargs):
        raise ValueError("converter failed on purpose")

    monkeypatch.setattr(onnx_frontend.Relu, "_impl_v14", classmethod(broken), raising=False)
    monkeypatch.setattr(onnx_frontend.Relu, "_impl_v13", classmethod(broken), raising=False)
    monkeypatch.setattr(onnx_frontend.Relu, "_impl_v1", classmethod(broken), raising=False)
    nodes = [_node("Relu", ["x"], ["y"], "relu")]
    data = _model(nodes, [_vi("x", [1, 4])], [_vi("y", [1, 4])]).SerializeToString()
    imported = load_model(data, quantize=True)
    capfd.readouterr()
    with pytest.raises(InputError) as e:
        to_relax(imported)
    assert e.value.loc[:1] == ("model",) and "converter failed on purpose" in e.value.msg, e.value
    assert capfd.readouterr().out == ""
