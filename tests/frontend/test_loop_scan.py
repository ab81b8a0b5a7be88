"""ONNX Scan and Loop (refused as control flow): a Scan over inputs of static shapes, and a Loop whose trip count
is a constant and whose condition stays true, are unrolled at import, each iteration's body nodes ordinary nodes;
a Loop whose trip count is computed at run time is refused, naming the node."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.errors import InputError
from tileplan.frontend.runner import run_artifact

F = 1  # TensorProto.FLOAT


def _qdq(nodes: list, inits: list, x: str, tag: str, scale: float, zero: int) -> str:
    from onnx import helper, numpy_helper

    inits += [numpy_helper.from_array(np.float32(scale), f"{tag}_s"), numpy_helper.from_array(np.int8(zero), f"{tag}_z")]
    nodes += [helper.make_node("QuantizeLinear", [x, f"{tag}_s", f"{tag}_z"], [f"{tag}_q"]),
              helper.make_node("DequantizeLinear", [f"{tag}_q", f"{tag}_s", f"{tag}_z"], [f"{tag}_d"])]
    return f"{tag}_d"


def _model(node_fn, outs: dict[str, list[int]], extra_inits: list | None = None) -> bytes:
    """x [5, 4] -> Q -> DQ -> the control-flow node (node_fn(xd) -> (nodes, {output: raw name})) -> Q -> DQ."""
    from onnx import helper

    nodes: list = []
    inits: list = list(extra_inits or [])
    xd = _qdq(nodes, inits, "x", "x", 0.05, 0)
    cf, raw = node_fn(xd)
    nodes += cf
    for k, o in enumerate(outs):
        nodes.append(helper.make_node("Identity", [_qdq(nodes, inits, raw[o], f"o{k}", 0.1, 3)], [o]))
    graph = helper.make_graph(nodes, "cf", [helper.make_tensor_value_info("x", F, [5, 4])],
                              [helper.make_tensor_value_info(o, F, s) for o, s in outs.items()], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _scan(direction: int, out_axis: int) -> bytes:
    """Scan over x's axis 1 (4 steps of [5]), an RNN-like body h' = (h + x_t) * w (w: an outer-scope
    initializer); the scan output h' stacked along out_axis; input and output directions reversed by `direction`."""
    from onnx import helper, numpy_helper

    def fn(xd: str) -> tuple[list, dict[str, str]]:
        body = helper.make_graph(
            [helper.make_node("Add", ["h", "xt"], ["s"]), helper.make_node("Mul", ["s", "w"], ["h2"]),
             helper.make_node("Identity", ["h2"], ["yt"])], "body",
            [helper.make_tensor_value_info("h", F, [5]), helper.make_tensor_value_info("xt", F, [5])],
            [helper.make_tensor_value_info("h2", F, [5]), helper.make_tensor_value_info("yt", F, [5])])
        node = helper.make_node("Scan", ["h0", xd], ["hN", "ys"], name="scan", body=body, num_scan_inputs=1,
                                scan_input_axes=[1], scan_input_directions=[direction],
                                scan_output_axes=[out_axis], scan_output_directions=[direction])
        return [node], {"h": "hN", "y": "ys"}

    inits = [numpy_helper.from_array(np.full(5, 0.5, np.float32), "w"),
             numpy_helper.from_array(np.linspace(-1, 1, 5, dtype=np.float32), "h0")]
    return _model(fn, {"h": [5], "y": [4, 5] if out_axis == 0 else [5, 4]}, inits)


def _loop(trip_input: bool = False, trips: int = 3) -> bytes:
    """Loop of 3 iterations: carried c' = c + xd * i (i: the iteration number), scan output c' (stacked on axis 0);
    the condition passed through. trip_input: the trip count a graph input (refused)."""
    from onnx import TensorProto, helper, numpy_helper

    def fn(xd: str) -> tuple[list, dict[str, str]]:
        body = helper.make_graph(
            [helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Mul", [xd, "fi"], ["p"]),
             helper.make_node("Add", ["c", "p"], ["c2"]), helper.make_node("Identity", ["cond"], ["cond2"]),
             helper.make_node("Identity", ["c2"], ["ys"])], "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
             helper.make_tensor_value_info("c", F, [5, 4])],
            [helper.make_tensor_value_info("cond2", TensorProto.BOOL, []),
             helper.make_tensor_value_info("c2", F, [5, 4]), helper.make_tensor_value_info("ys", F, [5, 4])])
        return [helper.make_node("Loop", ["M", "t", xd], ["cN", "scan"], name="loop", body=body)], \
            {"c": "cN", "s": "scan"}

    inits = [numpy_helper.from_array(np.asarray(True), "t")]
    if trip_input:
        import onnx

        m = onnx.load_from_string(_model(fn, {"c": [5, 4], "s": [3, 5, 4]}, inits))
        m.graph.input.append(helper.make_tensor_value_info("M", TensorProto.INT64, []))
        return m.SerializeToString()
    inits.append(numpy_helper.from_array(np.asarray(trips, np.int64), "M"))
    return _model(fn, {"c": [5, 4], "s": [trips, 5, 4]}, inits)


def _check(data: bytes) -> None:
    x = np.linspace(-2, 2, 20, dtype=np.float32).reshape(5, 4)
    res = compile_bytes(data)
    got = run_artifact(res.artifact, {"x": x}).outputs
    want = onnxruntime_outputs(data, {"x": x})
    for k, v in want.items():
        assert got[k].shape == v.shape and (got[k] == v).all(), (k, got[k], v)


@pytest.mark.parametrize("direction,out_axis", [(0, 0), (1, 1)])
def test_scan_unrolled(direction: int, out_axis: int) -> None:
    _check(_scan(direction, out_axis))


def test_loop_constant_trip_count_unrolled() -> None:
    _check(_loop())


def test_loop_run_time_trip_count_refused() -> None:
    with pytest.raises(InputError) as err:
        compile_bytes(_loop(trip_input=True))
    assert err.value.loc[-1] == "loop" and "trip count" in str(err.value), str(err.value)


def test_loop_too_many_iterations_refused() -> None:
    """A constant trip count unrolling would write more nodes than a model may have is refused before writing."""
    with pytest.raises(InputError) as err:
        compile_bytes(_loop(trips=10**5))
    assert err.value.loc[-1] == "loop" and "100000 iterations" in str(err.value), str(err.value)
