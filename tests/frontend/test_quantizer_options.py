"""The quantizer's options users set that change the graph's form (issue 24, other exports: bench/zoo_export.py
VARIANTS): each such model offloaded where the accelerator computes it exactly, and matching onnxruntime."""

from __future__ import annotations

import pytest
from frontend_helpers import OPTIONS, assert_offloaded_and_matching, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact

FAST = OPTIONS.model_copy(update={"emulate": False})


@pytest.mark.parametrize("model", ["resnet_block", "mlp"])
def test_float_weights_behind_a_quantize_dequantize_pair_run_on_the_accelerator(model):
    """AddQDQPairToWeight keeps each weight in float and quantizes it in the graph (QuantizeLinear of the
    initializer, then DequantizeLinear). onnxruntime folds that constant QuantizeLinear into int8 weights before
    its QDQ fusion; Tileplan folds it the same way, so the product is the usual dequantize(const int8 W)."""
    data = zoo.build(model, "qdq", extra={"AddQDQPairToWeight": True})
    res = compile_bytes(data, options=FAST)
    assert_offloaded_and_matching(data, res, "QuantizeLinear of constant")


@pytest.mark.parametrize("model", ["resnet_block", "attention"])
def test_contrib_domain_quantize_dequantize_are_read_as_onnx_ones(model):
    """UseQDQContribOps writes every QuantizeLinear / DequantizeLinear in onnxruntime's com.microsoft domain; for
    8-bit codes (and an int32 bias) they define what ONNX's define, so the model is the usual QDQ model."""
    data = zoo.build(model, "qdq", extra={"UseQDQContribOps": True})
    res = compile_bytes(data, options=FAST)
    assert_offloaded_and_matching(data, res, "com.microsoft")


def _one_element_qparams(data: bytes) -> bytes:
    """The model with every scalar scale and zero point of its QuantizeLinear / DequantizeLinear stored as a
    1-element 1-D tensor behind an Identity, as torch.onnx writes a fake-quantized (QAT) model's per-tensor
    parameters (`torch.fake_quantize_per_tensor_affine` with tensor qparams; equal tensors deduplicated)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_model_from_string(data)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    made: dict[str, str] = {}
    outputs = {o.name for o in g.output}  # (the judge reads an output's step from its DequantizeLinear's scale)
    for node in list(g.node):
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or node.output[0] in outputs:
            continue
        for k in (1, 2):
            name = node.input[k] if len(node.input) > k else ""
            if name not in inits or len(inits[name].dims) != 0:
                continue
            if name not in made:
                arr = numpy_helper.to_array(inits[name]).reshape(1)
                g.initializer.append(numpy_helper.from_array(arr, f"{name}/1d"))
                g.node.insert(0, helper.make_node("Identity", [f"{name}/1d"], [f"{name}/id"], name=f"{name}/id"))
                made[name] = f"{name}/id"
            node.input[k] = made[name]
    return model.SerializeToString()


@pytest.mark.parametrize("model", ["resnet_block", "mlp"])
def test_one_element_scales_behind_identities_are_per_tensor(model):
    """A 1-element scale or zero point is per tensor (onnxruntime's QDQ selectors read it so); through an
    Identity of an initializer too. Such a model was refused (TypeError: only 0-dimensional arrays can be
    converted to Python scalars)."""
    data = _one_element_qparams(zoo.build(model, "qdq"))
    res = compile_bytes(data, options=FAST)
    assert_offloaded_and_matching(data, res)


@pytest.mark.parametrize("weight_type", ["QInt4", "QUInt4"])
def test_4bit_weights_run_on_the_accelerator_as_int8(weight_type):
    """weight_type=QInt4 / QUInt4 (com.microsoft DequantizeLinear below opset 21): every 4-bit code and zero point
    is an int8 value, so the weights are stored as int8 and the products offloaded. onnxruntime has no integer
    kernel for them and computes those units in float, so the judge's bar (>= 99.9% within 1 LSB) applies."""
    data = zoo.build("resnet_block", "qdq", weight_type=weight_type)
    res = compile_bytes(data, options=FAST)
    assert_offloaded_and_matching(data, res, "4-bit weights")


@pytest.mark.parametrize("activation_type", ["QInt16", "QUInt16"])
def test_16bit_activations_are_refused_naming_the_node_and_why(activation_type):
    """16-bit activations: the accelerator multiplies 8-bit operands, and onnxruntime computes such units in float,
    which the host's float kernels do not reproduce to a 16-bit step; refused before anything is compiled."""
    from tileplan.errors import InputError

    data = zoo.build("cnn_small", "qdq", activation_type=activation_type)
    with pytest.raises(InputError) as err:
        compile_bytes(data, options=FAST)
    msg = str(err.value)
    assert "16-bit" in msg and "QuantizeLinear" in msg and "activation_type=QuantType.QInt8" in msg, msg
    assert err.value.loc[0] == "model" and len(err.value.loc) == 2, err.value.loc


def test_a_conv_whose_float_result_is_also_used_elsewhere_is_not_offloaded_whole():
    """A QAT export quantizes a conv's result for the next layer and also uses it in float (a residual add):
    one composite cannot hand out both the accelerator's int8 result and the float value. Such a match used to
    become a composite with two results, and the compile crashed (call_dps_packed: 'Expected Array<relax.TensorType>
    but got ir.TupleType'); the conv now stays on the host, the model compiles and matches onnxruntime."""
    import onnx
    from frontend_helpers import lsb_errors
    from onnx import TensorProto, helper

    from tileplan.frontend.reference import reference_outputs

    model = onnx.shape_inference.infer_shapes(onnx.load_model_from_string(zoo.build("cnn_small", "qdq")))
    g = model.graph
    conv = next(n for n in g.node if n.op_type == "Conv")
    shape = next(v for v in g.value_info if v.name == conv.output[0]).type.tensor_type.shape
    g.output.append(helper.make_tensor_value_info(conv.output[0], TensorProto.FLOAT,
                                                  [d.dim_value for d in shape.dim]))
    data = model.SerializeToString()
    res = compile_bytes(data, options=FAST)
    host = {o["name"]: o["reason"] for o in res.summary["ops"] if o["where"] == "host"}
    assert conv.name in host, host
    assert "is used by a graph output" in host[conv.name], host[conv.name]
    feeds = zoo.sample_inputs(data, seed=1)
    got = run_artifact(res.artifact, feeds).outputs
    first = g.output[0].name
    want = reference_outputs(data, feeds, "ort-int8")
    assert lsb_errors(data, {first: got[first]}, {first: want[first]}).max() <= 1.0 + 1e-4


def test_a_float_bias_behind_an_identity_stays_float_and_says_why():
    """QuantizeBias=False leaves each bias in float; torch.onnx shares equal ones through an Identity (a QAT
    export's fused BatchNorm biases). onnxruntime's WeightBiasQuantization does not look through the Identity
    (its optimised graph keeps the float bias: tests/frontend/test_float_qgemm.py), so it computes such a conv in
    float; the host does too, and the reason names the Identity instead of 'a bias computed at run time'."""
    import onnx
    from onnx import helper

    model = onnx.load_model_from_string(zoo.build("resnet_block", "qdq", extra={"QuantizeBias": False}))
    g = model.graph
    inits = {t.name for t in g.initializer}
    conv = next(n for n in g.node if n.op_type == "Conv" and len(n.input) > 2 and n.input[2] in inits)
    g.node.insert(0, helper.make_node("Identity", [conv.input[2]], [f"{conv.input[2]}/shared"],
                                      name=f"{conv.name}/bias_identity"))
    conv.input[2] = f"{conv.input[2]}/shared"
    res = compile_bytes(model.SerializeToString(), options=FAST)
    op = next(o for o in res.summary["ops"] if o["name"] == conv.name)
    assert op["where"] == "host", op
    assert "Identity" in op["reason"] and "run time" not in op["reason"], op["reason"]
