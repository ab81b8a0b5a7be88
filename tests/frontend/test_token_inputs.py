"""A model that takes token ids (int64 indices into an embedding table, as a DistilBERT or GPT export does) and
the compile-time emulated run: its random input drew integers from the dtype's whole range, the host's Gather
read the table trillions of rows past its end, and the compile died of a segmentation fault (DistilBERT-like and
GPT-like exports of bench/zoo_export.py). Integer inputs of that run are now small non-negative integers (0 or
1: valid token ids, mask values and booleans alike)."""

from __future__ import annotations

import multiprocessing
from typing import Any

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


def _in_a_fresh_process(target: Any, *args: Any) -> int | None:
    """`target(*args)`'s exit code in a new interpreter (the failure guarded against is a segmentation fault, not
    an exception). Spawned, not forked: a child forked from this multi-threaded process (TVM's and the build's
    threads) sometimes failed to start its C compiler (OSError EFAULT on /bin/sh) and ended with 1."""
    child = multiprocessing.get_context("spawn").Process(target=target, args=args)
    child.start()
    child.join(600)
    return child.exitcode


def test_token_ids_model_compiles_with_its_emulated_run():
    code = _in_a_fresh_process(_compile_and_check, _embedding())
    assert code == 0, f"the compile's process ended with {code}"


def _run_with_ids(data: bytes, ids: list[int], path: str) -> None:
    res = compile_bytes(data, options=OPTIONS)
    feeds = {"input_ids": np.asarray([ids], dtype=np.int64)}
    np.save(path, run_artifact(res.artifact, feeds).outputs["y"])


def test_an_index_out_of_the_table_never_reads_past_it(tmp_path):
    """ONNX's Gather takes indices in [-n, n - 1] (a negative one counts from the end; onnxruntime refuses any
    other). The program's Gather wraps negative ones as ONNX says and clamps the rest to the table's edge rows: a
    user's bad token id must not read memory past the table (before: TVM's take in its "fast" mode, no bounds)."""
    data = _embedding()
    ids = [0, -1, -VOCAB, VOCAB - 1, VOCAB, 10**12, -(10**12), 3]
    path = str(tmp_path / "y.npy")
    code = _in_a_fresh_process(_run_with_ids, data, ids, path)
    assert code == 0, f"the run's process ended with {code}"
    # in [-n, n - 1] (0-3, 7): onnxruntime's rows; beyond either end (4-6): the nearest edge row
    as_clamped = [0, -1, -VOCAB, VOCAB - 1, VOCAB - 1, VOCAB - 1, 0, 3]
    want = reference_outputs(data, {"input_ids": np.asarray([as_clamped], np.int64)}, "ort-int8")["y"]
    assert np.array_equal(np.load(path), want)
