"""A model that takes token ids (int64 indices into an embedding table, as a DistilBERT or GPT export does) and
the compile-time emulated run: its random input drew integers from the dtype's whole range, the host's Gather
read the table trillions of rows past its end, and the compile died of a segmentation fault (DistilBERT-like and
GPT-like exports of bench/zoo_export.py). Integer inputs of that run are now small non-negative integers (0 or
1: valid token ids, mask values and booleans alike)."""

from __future__ import annotations

import multiprocessing

import numpy as np
from frontend_helpers import OPTIONS, compile_bytes

from tileplan.frontend.reference import reference_outputs
from tileplan.frontend.runner import run_artifact

VOCAB, WIDTH, SEQ = 50, 16, 8


def _embedding() -> bytes:
    """input_ids (int64) -> Gather(float table) -> QuantizeLinear -> DequantizeLinear -> output."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((VOCAB, WIDTH)).astype(np.float32), "table"),
             numpy_helper.from_array(np.float32(0.03), "s"), numpy_helper.from_array(np.int8(2), "z")]
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["e"], name="embed", axis=0),
             helper.make_node("QuantizeLinear", ["e", "s", "z"], ["eq"], name="q"),
             helper.make_node("DequantizeLinear", ["eq", "s", "z"], ["y"], name="dq")]
    g = helper.make_graph(nodes, "embedding", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, SEQ])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, WIDTH])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _compile_and_check(data: bytes) -> None:
    res = compile_bytes(data, options=OPTIONS)  # with the compile-time emulated run
    assert res.summary["total"]["cycles_emulated"] is not None, res.summary["notes"]
    feeds = {"input_ids": np.random.default_rng(1).integers(0, VOCAB, (1, SEQ)).astype(np.int64)}
    got = run_artifact(res.artifact, feeds).outputs["y"]
    assert np.array_equal(got, reference_outputs(data, feeds, "ort-int8")["y"])


def test_token_ids_model_compiles_with_its_emulated_run():
    # in a forked process: the failure this guards against is a segmentation fault, not an exception
    child = multiprocessing.get_context("fork").Process(target=_compile_and_check, args=(_embedding(),))
    child.start()
    child.join(600)
    assert child.exitcode == 0, f"the compile's process ended with {child.exitcode}"
