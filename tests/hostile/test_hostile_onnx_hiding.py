"""Hostile models that reach past the first round of checks (issue 23's probes, second round).

1. A server file read through a model-local function's *default attribute*: `FunctionProto.attribute_proto` holds a
   tensor with external data (`location: pyproject.toml`); a Constant in the function takes its `value` from that
   default (`ref_attr_name`). onnxruntime's shape folding inlines the function and reads the file relative to the
   working directory: the file's bytes became a folded constant and went into the compiled program's weights.
2. A function-call bomb: 40 model-local functions each calling the next twice (4 KB) stand for 2^40 nodes once
   inlined; onnxruntime's folding and ONNX's shape inference expand them and the check ran into its time limit.
3. ONNX's data propagation (shape inference's `data_prop`) keeps every propagated value as a shape's dimension
   (~100-200 bytes each): `Concat(c, c)` forty times from a 1-element constant (2 KB) took the checking process to
   its memory cap (and a process without one, the CLI's, past the machine's), where its static shapes alone say
   2^40 elements.
Each is now a 422 naming the model (the node or tensor), up front, in well under a second.
"""

from __future__ import annotations

import base64
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hostile_models import qdq_in as _qdq_in

from tileplan.api.app import create_app
from tileplan.errors import InputError
from tileplan.frontend.onnx_import import decode
from tileplan.jobs.compiles import read_model
from tileplan.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SECRET = (ROOT / "pyproject.toml").read_bytes()


def _external(name: str, location: str, n: int) -> Any:
    from onnx import TensorProto, external_data_helper, numpy_helper

    t = numpy_helper.from_array(np.zeros(n, np.uint8), name)
    external_data_helper.set_external_data(t, location, offset=0, length=n)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    return t


def function_default_leak(location: str = "pyproject.toml") -> bytes:
    """A function `Leak` whose Constant's value is its attribute `dflt`, defaulting to 64 bytes of `location`;
    called without that attribute (so the default is used), and a Shape node so the shapes get folded."""
    import onnx
    from onnx import AttributeProto, TensorProto, helper

    n = 64
    fn = onnx.FunctionProto(name="Leak", domain="local", input=["a"], output=["b"],
                            opset_import=[helper.make_opsetid("", 17)])
    const = helper.make_node("Constant", [], ["c"])
    const.attribute.append(AttributeProto(name="value", ref_attr_name="dflt", type=AttributeProto.TENSOR))
    fn.node.extend([const, helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
                    helper.make_node("Add", ["a", "cf"], ["b"])])
    fn.attribute_proto.append(helper.make_attribute("dflt", _external("leak", location, n)))
    m = _qdq_in([helper.make_node("Leak", ["dq"], ["y"], domain="local", name="call"),
                 helper.make_node("Shape", ["dq"], ["sh"], name="shape")], [], n)
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.append(fn)
    return bytes(m.SerializeToString())


def function_call_bomb(depth: int = 40, calls: int = 2) -> bytes:
    """`depth` model-local functions, each calling the next `calls` times: calls**depth Relu nodes inlined."""
    from onnx import helper

    fns = []
    for d in range(depth):
        if d + 1 == depth:
            body = [helper.make_node("Relu", ["a"], ["b"])]
        else:
            body = [helper.make_node(f"F{d + 1}", ["a" if c == 0 else f"t{c - 1}"], [f"t{c}"], domain="local")
                    for c in range(calls)] + [helper.make_node("Identity", [f"t{calls - 1}"], ["b"])]
        fns.append(helper.make_function("local", f"F{d}", ["a"], ["b"], body,
                                        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]))
    m = _qdq_in([helper.make_node("F0", ["dq"], ["y"], domain="local", name="call"),
                 helper.make_node("Shape", ["dq"], ["sh"], name="shape")], [], 4)
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.extend(fns)
    return bytes(m.SerializeToString())


def doubling(k: int = 40, shape_node: bool = False) -> bytes:
    """`Concat(c, c)` `k` times from a 1-element int64 constant (2^k elements), summed into the output."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, prev = [], "one"
    for j in range(k):
        nodes.append(helper.make_node("Concat", [prev, prev], [f"c{j}"], axis=0, name=f"cat{j}"))
        prev = f"c{j}"
    if shape_node:
        nodes.append(helper.make_node("Shape", ["dq"], ["sh"], name="shape"))
    nodes += [helper.make_node("Cast", [prev], ["cf"], to=TensorProto.FLOAT, name="cast"),
              helper.make_node("ReduceSum", ["cf"], ["total"], keepdims=0, name="sum"),
              helper.make_node("Add", ["dq", "total"], ["y"], name="add")]
    return bytes(_qdq_in(nodes, [numpy_helper.from_array(np.ones(1, np.int64), "one")], 4).SerializeToString())


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- 1: external data in a function's default attribute ---------------------------------------------------------


@pytest.mark.parametrize("location", ["pyproject.toml", str(ROOT / "pyproject.toml"), "../hostile/pyproject.toml"])
def test_external_data_in_a_functions_default_attribute_is_refused(location: str) -> None:
    with pytest.raises(InputError) as err:
        decode(function_default_leak(location))
    assert err.value.loc == ("model",) and "'leak'" in err.value.msg and "external data" in err.value.msg
    assert "function Leak" in err.value.msg, err.value.msg


# -- 2: function-call bomb --------------------------------------------------------------------------------------


def test_nodes_are_counted_as_the_functions_expand() -> None:
    start = time.monotonic()
    with pytest.raises(InputError) as err:
        decode(function_call_bomb(40))
    assert err.value.type == "too_large" and "nodes" in err.value.msg and "function" in err.value.msg, err.value.msg
    assert time.monotonic() - start < 5
    decode(function_call_bomb(8))  # 2^8 nodes inlined: read


# -- 3: data propagation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape_node", [False, True])
def test_a_doubling_constant_is_refused_from_its_static_shapes(shape_node: bool) -> None:
    before = _max_rss_mib()
    start = time.monotonic()
    with pytest.raises(InputError) as err:
        read_model(doubling(40, shape_node), {}, False)
    assert err.value.type == "too_large" and "elements" in err.value.msg, err.value.msg
    assert err.value.loc[0] == "model" and "cat" in err.value.msg, err.value
    assert time.monotonic() - start < 5
    assert _max_rss_mib() - before < 300


def test_data_propagation_is_bounded_below_the_tensor_bound() -> None:
    """2^23 elements each (under max_tensor_elements): propagating them as shape data took ~2 GiB; now the shapes
    that need no propagation are inferred, and the model reads with its static shapes."""
    before = _max_rss_mib()
    assert read_model(doubling(23), {}, False) == "hostile"
    assert _max_rss_mib() - before < 300


# -- through POST /compile ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile_hiding"), solver_processes=1, wait_limit_s=300)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _post(client: TestClient, model: bytes) -> Any:
    return client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(),
                                         "options": {"time_limit_s": 2}, "wait": True})


@pytest.mark.parametrize("model", ["leak", "bomb", "doubling"])
def test_compile_refuses_each_with_a_422_and_stores_nothing(client: TestClient, model: str) -> None:
    data = {"leak": function_default_leak, "bomb": function_call_bomb, "doubling": doubling}[model]()
    r = _post(client, data)
    assert r.status_code == 422, r.text[:2000]
    d = r.json()["detail"][0]
    assert d["loc"][:2] == ["body", "model"], d
    leaked = np.frombuffer(SECRET[:64], np.uint8).astype(np.float32).tobytes()
    assert SECRET[:64] not in r.content and leaked not in r.content
    assert client.get("/compiles").json()["compiles"] == []


# -- 4: a scale that makes a requantization multiplier vanish ------------------------------------------------------


def test_a_huge_activation_scale_compiles_or_is_refused_never_an_internal_error() -> None:
    """The MLP's hidden activation quantized with scale 3e38: its producer's requantization multiplier is ~1e-40,
    over which the fusion planner enumerated accumulators (OverflowError: the compile failed as the server's)."""
    import onnx
    from onnx import numpy_helper

    from tileplan.frontend import zoo
    from tileplan.frontend.compile import CompileOptions, compile_model
    from tileplan.hardware.catalog import catalog

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    scale = next(t for t in m.graph.initializer if t.name == "relu3_out_scale")
    scale.CopyFrom(numpy_helper.from_array(np.array(3e38, np.float32), scale.name))
    try:
        out = compile_model(m.SerializeToString(), catalog()["gemmini-16x16"], CompileOptions(time_limit_s=2))
    except InputError as exc:  # (a refusal naming the model is as good)
        assert exc.loc[0] == "model", exc
        return
    assert any("too small for an accumulator offset to be checked" in n for n in out.summary["notes"]), out.notes


# -- 5: a node with thousands of inputs or outputs ----------------------------------------------------------------


def split_concat(n: int) -> bytes:
    """x [1, n] split into n pieces and concatenated again: 2 nodes of n outputs / inputs (TVM lowers the Concat to
    n nested selects: 500 overflowed the C emitter's recursion (a 500), 2000 ran the compile past 10 minutes)."""
    from onnx import helper

    parts = [f"p{k}" for k in range(n)]
    m = _qdq_in([helper.make_node("Split", ["dq"], parts, axis=1, name="split"),
                 helper.make_node("Concat", parts, ["y"], axis=1, name="concat")], [], n)
    return bytes(m.SerializeToString())


def test_a_nodes_inputs_and_outputs_are_bounded() -> None:
    with pytest.raises(InputError) as err:
        decode(split_concat(2000))
    assert err.value.loc == ("model", "split") and err.value.type == "too_large", err.value
    assert "2000 outputs" in err.value.msg, err.value.msg
    decode(split_concat(64))  # (within the bound: read)
