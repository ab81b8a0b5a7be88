"""LSTM and GRU (a sequence classifier's recurrence, as torch.onnx.export writes nn.LSTM / nn.GRU): onnxruntime's
static quantizer leaves them in float, and TVM's ONNX importer has no converter for either, so a model with one
was refused at import. Each step's matrix products need the previous step's state, so they run on the host as
ONNX defines them, in float; the host's result is held to onnxruntime's float kernel (the sigmoid and tanh are
TVM's, onnxruntime's are MLAS approximations: equal to a few float32 ulps, not bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import OPTIONS, compile_bytes

from tileplan.frontend.compile import CompiledModel
from tileplan.frontend.reference import reference_outputs
from tileplan.frontend.runner import run_artifact

FAST = OPTIONS.model_copy(update={"emulate": False})
SEQ, BATCH, IN, HIDDEN = 7, 2, 5, 6


def _recurrent(op: str, direction: str = "forward", initial: bool = True, **attrs: int) -> bytes:
    """input (float) -> QuantizeLinear -> DequantizeLinear -> op(X, W, R, B, [], h0, c0) with every output
    (Y, Y_h, Y_c) a float graph output: the recurrence itself, nothing quantized after it."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    dirs = 2 if direction == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    inits = [numpy_helper.from_array(np.float32(0.02), "s"), numpy_helper.from_array(np.int8(-3), "z")]
    for name, shape in (("W", (dirs, gates * HIDDEN, IN)), ("R", (dirs, gates * HIDDEN, HIDDEN)),
                        ("B", (dirs, 2 * gates * HIDDEN)), ("h0", (dirs, BATCH, HIDDEN)),
                        ("c0", (dirs, BATCH, HIDDEN))):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name))
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    state = (["h0", "c0"] if op == "LSTM" else ["h0"]) if initial else []
    nodes = [helper.make_node("QuantizeLinear", ["input", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["x"], name="dq"),
             helper.make_node(op, ["x", "W", "R", "B", "", *state], outputs, name="rnn", hidden_size=HIDDEN,
                              direction=direction, **attrs)]
    shapes = {"Y": [SEQ, dirs, BATCH, HIDDEN], "Y_h": [dirs, BATCH, HIDDEN], "Y_c": [dirs, BATCH, HIDDEN]}
    g = helper.make_graph(nodes, f"{op.lower()}_{direction}",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [SEQ, BATCH, IN])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _check(data: bytes, res: CompiledModel) -> None:
    for seed in (1, 2):
        feeds = {"input": np.random.default_rng(seed).standard_normal((SEQ, BATCH, IN)).astype(np.float32)}
        got = run_artifact(res.artifact, feeds).outputs
        want = reference_outputs(data, feeds, "ort")
        for name, w in want.items():
            assert got[name].shape == w.shape, (name, got[name].shape, w.shape)
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(("op", "direction", "attrs"), [
    ("LSTM", "forward", {}),
    ("LSTM", "reverse", {}),
    ("LSTM", "bidirectional", {}),
    ("GRU", "forward", {"linear_before_reset": 1}),  # torch's nn.GRU
    ("GRU", "bidirectional", {"linear_before_reset": 0}),  # ONNX's default
    # nn.RNN (tanh): refused before, 'operator RNN ... is not supported' (bench/op_coverage.py)
    ("RNN", "forward", {}),
    ("RNN", "bidirectional", {}),
])
def test_recurrence_runs_on_the_host_as_onnxruntime_computes_it(op, direction, attrs):
    data = _recurrent(op, direction, **attrs)
    res = compile_bytes(data, options=FAST)
    _check(data, res)
    host = [o for o in res.summary["ops"] if o["onnx_op"] == op]
    assert host and host[0]["where"] == "host"
    assert "recurrence" in host[0]["reason"], host[0]["reason"]


def test_recurrence_without_initial_state_starts_from_zeros():
    data = _recurrent("LSTM", initial=False)
    _check(data, compile_bytes(data, options=FAST))


def test_recurrence_macs_are_counted_on_the_host():
    """The summary counts a recurrence's multiply-accumulates (each step's input and state products) as the
    host's: a model whose MACs are mostly an LSTM does not read as offloaded."""
    data = _recurrent("LSTM", "bidirectional")
    total = compile_bytes(data, options=FAST).summary["total"]
    assert total["macs"] == 2 * SEQ * BATCH * 4 * HIDDEN * (IN + HIDDEN)
    assert total["accelerator_mac_share"] == 0.0
