"""Helpers of the model-compiler tests: onnxruntime as the judge, one plan per layer shape per session."""

from __future__ import annotations

from typing import Any

import numpy as np

from tileplan.frontend.compile import CompiledModel, CompileOptions, compile_model
from tileplan.hardware.catalog import get_hardware
from tileplan.plan import make_plan

HW = get_hardware("gemmini-16x16")
OPTIONS = CompileOptions(time_limit_s=2.0)
_PLANS: dict[str, Any] = {}


def planner(layer: Any, hw: Any, options: Any) -> Any:
    """make_plan, memoised for the session (many test models share layer shapes)."""
    key = f"{hw.name}|{layer.model_dump_json(exclude={'name', 'count'})}|{options.model_dump_json()}"
    if key not in _PLANS:
        _PLANS[key] = make_plan(layer, hw, options)
    return _PLANS[key]


def compile_bytes(data: bytes, **kw: Any) -> CompiledModel:
    opts = kw.pop("options", OPTIONS)
    return compile_model(data, HW, opts, planner=planner, **kw)


def onnxruntime_outputs(data: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from tileplan.frontend.reference import session

    sess = session(data, "ort")  # the default session (exact kernels on every x86): what the program must match
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def output_lsb(data: bytes, output: str) -> float:
    """The quantisation step of a model output: the scale of the DequantizeLinear that produces it."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load_model_from_string(data)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = next(n for n in model.graph.node if output in n.output)
    assert producer.op_type == "DequantizeLinear", f"{output} is not dequantized ({producer.op_type})"
    return float(inits[producer.input[1]])


def lsb_errors(data: bytes, got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> np.ndarray:
    """|got - want| in output quantisation steps, all outputs flattened."""
    errs = []
    for name, w in want.items():
        assert got[name].shape == w.shape and got[name].dtype == w.dtype, name
        if np.issubdtype(w.dtype, np.integer):
            errs.append(np.abs(got[name].astype(np.int64) - w.astype(np.int64)).ravel().astype(np.float64))
        else:
            errs.append((np.abs(got[name].astype(np.float64) - w.astype(np.float64)) / output_lsb(data, name)).ravel())
    return np.concatenate(errs)


def is_qoperator(data: bytes) -> bool:
    import onnx

    from tileplan.frontend.qoperator import QOPERATORS

    return any(n.op_type in QOPERATORS for n in onnx.load_model_from_string(data).graph.node)


def assert_matches_onnxruntime(data: bytes, got: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The README's bar, by named judge (tileplan.frontend.reference): a QOperator export against onnxruntime's
    default session (its integer QLinear* kernels): every element within 1 LSB, >= 99.9% equal; a QDQ export
    against `ort-int8` (onnxruntime with session.qdqisint8allowed=1: every int8 QDQ unit as its integer
    kernel): >= 99.9% within 1 LSB, none further than 2."""
    from tileplan.frontend.reference import reference_outputs

    if is_qoperator(data):
        err = lsb_errors(data, got, reference_outputs(data, feeds, "ort"))
        equal = float(np.mean(err <= 1e-4))
        assert err.max() <= 1.0 + 1e-4, f"max error {err.max():.3f} LSB against ort"
        assert equal >= 0.999, f"{equal:.4%} equal to ort"
        return err
    err = lsb_errors(data, got, reference_outputs(data, feeds, "ort-int8"))
    within = float(np.mean(err <= 1.0 + 1e-4))
    assert within >= 0.999, f"{within:.4%} within 1 LSB of ort-int8 (max {err.max():.3f} LSB)"
    assert err.max() <= 2.0 + 1e-4, f"max error {err.max():.3f} LSB against ort-int8"
    return err



def assert_offloaded_and_matching(data: bytes, res: CompiledModel, note: str | None = None,
                                  seeds: tuple[int, ...] = (1, 2)) -> None:
    """Every MAC of `res` on the accelerator (else: the host ops with MACs and their reasons), a summary note
    containing `note` (the import's account of its rewrite), and the program's outputs on each seed's input
    within the README's bar of onnxruntime (assert_matches_onnxruntime)."""
    from tileplan.frontend import zoo
    from tileplan.frontend.runner import run_artifact

    assert res.summary["total"]["accelerator_mac_share"] == 1.0, [
        (o["name"], o["reason"]) for o in res.summary["ops"] if o["where"] == "host" and o["macs"]]
    if note is not None:
        assert any(note in n for n in res.summary["notes"]), res.summary["notes"]
    for seed in seeds:
        feeds = zoo.sample_inputs(data, seed=seed)
        assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def qdq_norm_model(op: str, shape: list[int], channels: int, eps: float, quantized_output: bool, seed: int,
                   bias: bool = True, y_scale: float = 0.02, x_scale: float = 0.05, x_zero: int = 3,
                   **attrs: Any) -> bytes:
    """x -> Q -> DQ -> `op`(x, scale[, bias]) [-> Q -> DQ] -> y: a float normalisation between int8 dequantize and
    quantize (LayerNormalization, InstanceNormalization), with a random scale and bias of `channels` elements."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    consts = {"xs": np.float32(x_scale), "xz": np.int8(x_zero), "ys": np.float32(y_scale), "yz": np.int8(-2),
              "g": rng.normal(1.0, 0.3, channels).astype(np.float32),
              "b": rng.normal(0.0, 0.3, channels).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node(op, ["xd", "g", "b"] if bias else ["xd", "g"], ["n" if quantized_output else "y"],
                              epsilon=eps, **attrs)]
    if quantized_output:
        nodes += [helper.make_node("QuantizeLinear", ["n", "ys", "yz"], ["nq"]),
                  helper.make_node("DequantizeLinear", ["nq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def ort_quantize(model: Any, fmt: str, activation: str = "int8", symmetric: bool = False) -> bytes:
    """`model` quantized by onnxruntime's static quantizer (QDQ or QOperator, int8 weights, per-tensor), calibrated
    on four seeded normal samples of its inputs."""
    import tempfile
    from pathlib import Path

    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    rng = np.random.default_rng(0)
    feeds = iter([{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()} for _ in range(4)])

    class Reader(CalibrationDataReader):
        def get_next(self):  # type: ignore[no-untyped-def]
            return next(feeds, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "f.onnx", Path(tmp) / "q.onnx"
        onnx.save(model, str(src))
        quantize_static(str(src), str(dst), Reader(),
                        quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                        activation_type=QuantType.QInt8 if activation == "int8" else QuantType.QUInt8,
                        weight_type=QuantType.QInt8, extra_options={"ActivationSymmetric": symmetric})
        return dst.read_bytes()
