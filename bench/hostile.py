"""Hostile mix: the requests of issue 16, a few per second for a minute, next to normal cached traffic.

    .venv/bin/python bench/hostile.py [--baseline-seconds 30] [--seconds 60] [--rate 3] [--out bench/results/hostile.md]

One `tileplan serve` (SQLite, 2 solver processes, tokens with reads protected, every other setting at its default)
on 127.0.0.1:18290. Four layers are solved and cached first. The normal traffic and the probe run alone for
`--baseline-seconds` (the reference, measured in the same run on the same machine), then together with the hostile
client for `--seconds`:
- a prober, in a process of its own, GETs /healthz every 50 ms (5 s client timeout; a timeout counts as a failure at
  5000 ms);
- 4 normal clients POST /schedule for the cached layers back to back (with the token), each answer must be a 200;
- the hostile client sends `--rate` requests per second, round robin over the cases (below), each with a 5 s client
  timeout (a client that gives up is part of the mix: its work must stop);
- the API process's resident memory (VmRSS) is sampled every 0.5 s.
The table goes to bench/results/hostile.md with the API's RSS budget (README, "Budgets"), the /healthz percentiles and
the normal requests' success rate. Case 5 (PostgreSQL going away) needs PostgreSQL and is left to
tests/hostile/test_hostile_database.py.

The flood probe (its own section of the file, `--flood-only` runs just it): a fresh `tileplan serve` (SQLite, 2 solver
processes, two tokens: two owners, default settings and options); a second client's one-layer request (a distinct,
uncached conv each time, `wait`) is timed alone (the reference, same run), then while the first client floods 1,000
distinct uncached layers (10 requests of 100, not waited for); how far the flood had got when each probe was
answered says it was still running. With `--pg-admin URL` it runs again on the deployed form: PostgreSQL, the API
with TILEPLAN_QUEUE=procrastinate and two `tileplan worker` processes (concurrency 1), in a scratch database.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
PORT = 18290
TOKEN = "bench-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
RSS_BUDGET_MIB = 300  # README "Budgets": what the API process may hold under this mix
WORKER_CAP_MIB = 2048  # settings.worker_memory_mb's default: each worker's data segment
SECRETS: list[bytes] = []  # pieces of the server's own files; no answer may hold one
FAST = {"time_limit_s": 2}
NORMAL = [
    {"name": "fc", "op": "matmul", "M": 1, "K": 2048, "N": 1000},
    {"name": "qkv", "op": "matmul", "M": 128, "K": 768, "N": 768},
    {"name": "res2", "op": "conv2d", "in_channels": 64, "out_channels": 64, "in_h": 56, "in_w": 56, "kernel": 3,
     "padding": 1},
    {"name": "res4", "op": "conv2d", "in_channels": 256, "out_channels": 256, "in_h": 14, "in_w": 14, "kernel": 3,
     "padding": 1},
]

HUGE_PE = """
architecture:
  version: 0.3
  subtree:
    - name: System
      local:
        - {name: DRAM, class: DRAM, attributes: {word-bits: 8, shared_bandwidth: 8}}
      subtree:
        - name: Chip
          local:
            - {name: Scratchpad, class: SRAM, attributes: {entries: 65536, word-bits: 8}}
          subtree:
            - name: PE[0..9999999999999999]
              local:
                - {name: MAC, class: intmac, attributes: {word-bits: 8}}
"""
RECURSIVE = """
architecture:
  version: 0.3
  subtree:
    - &top
      name: System
      local: [{name: DRAM, class: DRAM, attributes: {word-bits: 8}}]
      subtree: [*top]
"""


def alias_bomb() -> str:
    lines = ["x0: &x0 [a, a, a, a, a, a, a, a, a, a]"]
    for i in range(1, 7):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 10) + "]")
    return "name: bomb\npe_array: *x6\n" + "\n".join(lines)


def dilated(in_h: int) -> dict[str, Any]:
    return {"op": "conv2d", "in_channels": 16, "out_channels": 16, "in_h": in_h, "in_w": 8, "kernel": 3,
            "dilation": 2, "padding": 2}


def dram_only(dims: dict[str, int]) -> dict[str, Any]:
    levels: list[dict[str, Any]] = [{"name": n} for n in ("Registers", "Accumulator", "Scratchpad", "DRAM")]
    levels[-1]["temporal"] = [[d, n] for d, n in dims.items() if n > 1]
    return {"levels": levels}


def hostile_cases(descriptor: dict[str, Any], plan_key: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(case, method, path, httpx keyword arguments)."""
    def schedule(hw: Any, layers: list[Any], **more: Any) -> dict[str, Any]:
        return {"json": {"hardware": hw, "layers": layers, "options": FAST, **more}, "headers": AUTH}

    big = dilated(1_000_000)
    return [
        ("1 Timeloop PE[0..10^16-1]", "POST", "/schedule",
         schedule({"name": "huge", "format": "timeloop", "source": HUGE_PE}, [NORMAL[0]])),
        ("1 YAML alias bomb", "POST", "/schedule", schedule({"name": "bomb", "source": alias_bomb()}, [NORMAL[0]])),
        ("2 /evaluate in_h=20000004", "POST", "/evaluate",
         {"json": {"hardware": "gemmini-16x16", "layer": dilated(20_000_004),
                   "mapping": dram_only({"P": 20_000_000})}, "headers": AUTH}),
        ("2 /evaluate in_h=10^6 (costly)", "POST", "/evaluate",
         {"json": {"hardware": "gemmini-16x16", "layer": big,
                   "mapping": dram_only({"K": 16, "C": 16, "P": 1_000_000, "Q": 8, "R": 3, "S": 3})},
          "headers": AUTH}),
        ("3 1.5 MB description", "POST", "/schedule",
         schedule({**descriptor, "description": "d" * 1_500_000}, [NORMAL[0]])),
        ("3 200 KB layer name (cache hit)", "POST", "/schedule",
         schedule("gemmini-16x16", [{**NORMAL[0], "name": "n" * 200_000}])),
        ("4 in_channels=10^9", "POST", "/schedule",
         {"json": {"hardware": "gemmini-16x16", "options": {"time_limit_s": 1},
                   "layers": [{"op": "conv2d", "in_channels": 10**9, "out_channels": 16, "in_h": 8, "in_w": 8}]},
          "headers": AUTH}),
        ("6 module under a new name", "GET", f"/plans/{plan_key}/module", {"headers": AUTH}),
        ("7 NUL in path / query", "GET", "/hardware/a%00b", {"headers": AUTH}),
        ("7 lone surrogate in a layer name", "POST", "/schedule",
         {"content": (b'{"hardware": "gemmini-16x16", "layers": [{"op": "matmul", "M": 1, "K": 8, "N": 8, '
                      b'"name": "x\\ud800"}]}'), "headers": {**AUTH, "content-type": "application/json"}}),
        ("8 hardware name with '/'", "POST", "/hardware", {"json": {**descriptor, "name": "a/b"}, "headers": AUTH}),
        ("9 recursive YAML anchor", "POST", "/schedule",
         schedule({"name": "loop", "format": "timeloop", "source": RECURSIVE}, [NORMAL[0]])),
        ("9 bandwidth 1e-320", "POST", "/schedule",
         schedule({**descriptor, "name": "slow", "memory_levels": [
             *descriptor["memory_levels"][:-1], {**descriptor["memory_levels"][-1], "bandwidth": 1e-320}]},
             [NORMAL[0]])),
        ("10 /openapi.json without a token", "GET", "/openapi.json", {}),
        ("11 in_channels: true", "POST", "/schedule",
         schedule("gemmini-16x16", [{"op": "conv2d", "in_channels": True, "out_channels": 16, "in_h": 8,
                                     "in_w": 8}])),
    ]


SECRET_FILE = "pyproject.toml"  # in the server's working directory (the bench copies it there)


def _onnx_external(location: str) -> bytes:
    """A model whose one initializer's data is 'external', at `location` (a server file, if it were read)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, external_data_helper, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((64, 64), np.int8), "w")
    external_data_helper.set_external_data(w, location, offset=0, length=4096)
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["x", "w"], ["y"], name="mm")], "leak",
                              [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 64])], [w])
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _constant_bomb() -> bytes:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    side = 1 << 15  # 2^30 float32 elements: 4 GiB if made
    inits = [numpy_helper.from_array(np.array([side, side], np.int64), "shape"),
             numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq"),
             helper.make_node("ConstantOfShape", ["shape"], ["c"], name="bomb",
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Add", ["dq", "c"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "bomb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [side, side])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _many_nodes(n: int) -> bytes:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Identity", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _big_model(mib: int) -> bytes:
    """A valid QDQ MLP with an unused int8 initializer of `mib` MiB (read in full before the request's error)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    sys.path.insert(0, str(REPO / "service"))
    from tileplan.frontend import zoo

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    pad = np.random.default_rng(0).integers(-128, 127, size=mib << 20, dtype=np.int8)
    m.graph.initializer.append(numpy_helper.from_array(pad, "padding"))
    return m.SerializeToString()


def _zip_bomb_npz(gib: float = 1.0) -> bytes:
    import io
    import zipfile

    import numpy as np

    n = int(gib * (1 << 30))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (n,)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z, z.open("input.npy", "w", force_zip64=True) as f:
        f.write(header.getvalue())
        chunk = bytes(1 << 24)
        for _ in range(n // len(chunk)):
            f.write(chunk)
    return buf.getvalue()


def _named_model(secret: Path, marker: Path) -> bytes:
    """The QDQ MLP whose graph and node names try to leave their comments in the generated C and Makefile: an
    `#include` of the server's file (gcc's errors would quote its lines) and a `$(shell touch marker)` make line."""
    import onnx

    from tileplan.frontend import zoo

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    m.graph.name = f"mlp\n$(shell touch {marker})\n"
    for node in m.graph.node:
        node.name = f'{node.name} */\n#include "{secret}"\n/*'
    return m.SerializeToString()


def _sparse_bomb() -> bytes:
    """A QDQ MLP holding a sparse tensor of one value whose dense shape is 2^40 elements."""
    import onnx
    from onnx import TensorProto, helper

    from tileplan.frontend import zoo

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(
        helper.make_tensor("sp", TensorProto.FLOAT, [1], [1.0]), helper.make_tensor("sp_i", TensorProto.INT64, [1], [0]),
        [1 << 40]))
    return m.SerializeToString()


def _long_raw_data() -> bytes:
    import onnx

    from tileplan.frontend import zoo

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    t = max(m.graph.initializer, key=lambda t: len(t.raw_data))
    t.raw_data = t.raw_data * 3
    return m.SerializeToString()


def compile_cases(secret: Path | None = None, marker: Path | None = None) -> list[tuple[str, str, str, dict[str, Any]]]:
    """Issue 23's compile-path probes: (case, method, path, httpx keyword arguments); with `secret` and `marker`
    (a server file, a file no command may make) the names-in-generated-code case too."""
    import base64
    import json

    import numpy as np

    # every body encoded once, here: the bench's threads share one interpreter, and encoding 120 MB of JSON per
    # request would hold its lock (and so delay the /healthz prober) for as long as it took
    def body(model: bytes, **more: Any) -> dict[str, Any]:
        doc = {"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(), "options": FAST,
               "wait": False, **more}
        return {"content": json.dumps(doc).encode(), "headers": {**AUTH, "content-type": "application/json"}}

    def form(parts: dict[str, bytes], request: dict[str, Any]) -> dict[str, Any]:
        boundary = "tileplanbenchboundary"
        out = [f'--{boundary}\r\nContent-Disposition: form-data; name="request"\r\n\r\n'.encode(),
               json.dumps(request).encode(), b"\r\n"]
        for name, data in parts.items():
            out += [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}.bin"\r\n'
                    "Content-Type: application/octet-stream\r\n\r\n".encode(), data, b"\r\n"]
        out.append(f"--{boundary}--\r\n".encode())
        return {"content": b"".join(out),
                "headers": {**AUTH, "content-type": f"multipart/form-data; boundary={boundary}"}}

    sys.path.insert(0, str(REPO / "service"))
    from tileplan.frontend import zoo

    float_mlp = zoo.build("mlp", "float")
    big = _big_model(90)
    # the second round's models are built by their tests (one builder each)
    sys.path.insert(0, str(REPO / "tests" / "hostile"))
    from onnx import helper
    from test_hostile_compile_work import distinct_matmuls, maxpool_bomb
    from test_hostile_ninth import _form, _qdq_in, non_finite, npz
    from test_hostile_ninth import float_mlp as float_mlp9
    from test_hostile_onnx_hiding import doubling, function_call_bomb, function_default_leak, split_concat
    from test_hostile_schedule_model import relu_chain
    from test_hostile_tenth import conv, mute, named, typed_identity
    tiny = _qdq_in([helper.make_node("Identity", ["dq"], ["y"], name="out")], []).SerializeToString()
    quantize = {"hardware": "gemmini-16x16", "options": {**FAST, "quantize": True}}
    return [
        ("c1 external data: pyproject.toml", "POST", "/compile", body(_onnx_external(SECRET_FILE))),
        ("c1 external data: ./data/tileplan.db", "POST", "/compile", body(_onnx_external("./data/tileplan.db"))),
        ("c2 .npz zip bomb (1 GiB) as calibration", "POST", "/compile",
         form({"model": float_mlp, "calibration": _zip_bomb_npz(1.0)},
              {"hardware": "gemmini-16x16", "options": {"quantize": True}})),
        ("c3 ConstantOfShape bomb (2^30 elements)", "POST", "/compile", body(_constant_bomb())),
        ("c4 90 MB model as JSON", "POST", "/compile", {**body(big, input_shapes={"nope": [1, 64]}),
                                                        "timeout": 120.0}),
        ("c4 90 MB model as multipart", "POST", "/compile",
         {**form({"model": big}, {"hardware": "gemmini-16x16", "input_shapes": {"nope": [1, 64]}}),
          "timeout": 120.0}),
        ("c4 100,000-node model", "POST", "/compile", body(_many_nodes(100_000))),
        ("c9 input_shapes 1e23", "POST", "/compile",
         {"content": json.dumps({"hardware": "gemmini-16x16", "model": base64.b64encode(float_mlp).decode()}
                                )[:-1].encode() + b', "input_shapes": {"input": [1e23, 64]}}',
          "headers": {**AUTH, "content-type": "application/json"}}),
        ("c9 input_shapes [1,3,2^20,2^20]", "POST", "/compile",
         body(float_mlp, input_shapes={"input": [1, 3, 1 << 20, 1 << 20]})),
        ("c11 sparse tensor of 2^40 dense elements", "POST", "/compile", body(_sparse_bomb())),
        ("c12 raw_data 3x what its dims say", "POST", "/compile", body(_long_raw_data())),
        ("c13 external data: a function's default attribute", "POST", "/compile",
         body(function_default_leak(SECRET_FILE))),
        ("c14 function-call bomb (2^40 nodes inlined)", "POST", "/compile", body(function_call_bomb())),
        ("c15 Concat(c, c) x40 (2^40 elements, 2 KB)", "POST", "/compile", body(doubling(shape_node=True))),
        ("c16 Split into 2000 + Concat of 2000", "POST", "/compile", body(split_concat(2000))),
        ("c17 MaxPool 64x64 over 2^27 elements (165 bytes, 5.5e11 compares)", "POST", "/compile",
         body(maxpool_bomb())),
        ("c18 300 distinct matmuls to plan", "POST", "/compile", body(distinct_matmuls(300))),
        ("c19 /schedule model of 49,000 nodes (1.4 MB)", "POST", "/schedule",
         {"json": {"hardware": "gemmini-16x16", "model": relu_chain(49_000), "options": FAST}, "headers": AUTH}),
        ("c20 Range from 0 to inf (a 500)", "POST", "/compile", body(non_finite("range_inf"))),
        ("c21 calibration of another shape (a 500, run again each time)", "POST", "/compile",
         form({"model": float_mlp9(), "calibration": npz(np.zeros((4, 7), np.float32))}, quantize)),
        ("c22 calibration of 3e38 (a TVM ScheduleError, a 500)", "POST", "/compile",
         form({"model": float_mlp9(), "calibration": npz(np.full((2, 1, 16), 3e38, np.float32))}, quantize)),
        ("c23 two `model` parts (the last one compiled, silently)", "POST", "/compile",
         {"content": _form(("model", b"not this one", "a.onnx"), ("model", tiny, "m.onnx"),
                           ("request", json.dumps({"hardware": "gemmini-16x16", "options": FAST}).encode(), None)),
          "headers": {**AUTH, "content-type": "multipart/form-data; boundary=XyZ"}}),
        ("c24 a float16 input (a KeyError in the compile, a 500)", "POST", "/compile",
         body(typed_identity("FLOAT16"))),
        ("c25 a graph without outputs (the host build failed, a 500)", "POST", "/compile", body(mute())),
        ("c26 Conv kernel_shape 5x5 on a 3x3 weight (SIGABRT, a 500)", "POST", "/compile", body(conv([5, 5]))),
        ("c27 a NUL in the graph name (PostgreSQL: a 503)", "POST", "/compile", body(named(graph="g\x00"))),
    ] + ([("c10 names: '*/ #include <server file>', '$(shell touch F)'", "POST", "/compile",
           body(_named_model(secret, marker), wait=True))] if secret is not None and marker is not None else [])


def eleventh_cases(db_url: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """Branch hostile11's cases (tests/hostile/test_hostile_eleventh.py builds them). c31's compile of 40,000 ops is
    written into the server's store as its compile process writes one (compiling the 1.4 MB model of 40,000 Identity
    nodes that makes it takes the compile lane about a minute)."""
    sys.path.insert(0, str(REPO / "tests" / "hostile"))
    from test_hostile_eleventh import LAYER, _with, descriptor, store_many_ops

    from tileplan.store import Store

    store = Store(db_url)
    try:
        cid = store_many_ops(store, 40_000)
    finally:
        store.engine.dispose()

    def schedule(hw: Any) -> dict[str, Any]:
        return {"json": {"hardware": hw, "layers": [LAYER], "options": FAST}, "headers": AUTH}

    return [
        ("c28 a descriptor of 3,000 memory levels (its solve budget spent)", "POST", "/schedule",
         schedule(descriptor("levels", levels=3_000))),
        ("c29 a descriptor of 12,000 dataflows (its solve budget spent)", "POST", "/schedule",
         schedule(descriptor("dataflows", dataflows=12_000))),
        ("c30 a permutation of 40,000 repeats (taken silently)", "POST", "/schedule",
         schedule(_with("permutation", ["K", "C"] * 20_000))),
        ("c31 GET a compile of 40,000 ops (12 MB summary: 1.3 s of event loop)", "GET", f"/compiles/{cid}",
         {"headers": AUTH}),
        ("c31 its page (3.9 s of event loop)", "GET", f"/ui/compiles/{cid}", {"headers": AUTH}),
    ]


def twelfth_cases() -> list[tuple[str, str, str, dict[str, Any]]]:
    """Branch hostile12's cases (tests/hostile/test_hostile_twelfth.py builds c32). Renamed module builds holding
    other owners' compiles are case 6 here; c33 is one owner's costly sandbox calls (their effect on another owner's
    calls and compiles is what the tests assert: this mix has one owner)."""
    import base64
    import json

    sys.path.insert(0, str(REPO / "tests" / "hostile"))
    from test_hostile_twelfth import _with_strings

    doc = {"hardware": "gemmini-16x16", "model": base64.b64encode(_with_strings("initializer")).decode(),
           "options": FAST, "wait": True}
    levels = "".join(f"        - {{name: B{i}, class: SRAM, attributes: {{entries: 64, word-bits: 8}}}}\n"
                     for i in range(3000))
    source = "architecture:\n  version: 0.3\n  subtree:\n    - name: S\n      local:\n" + levels
    mapping = {"levels": [{"name": "Registers"}, {"name": "Accumulator"}, {"name": "Scratchpad"},
                          {"name": "DRAM", "temporal": [["K", 16], ["C", 16], ["P", 16]]}]}
    return [
        ("c32 a string initializer (stored, then a compile-lane run failing in TVM)", "POST", "/compile",
         {"content": json.dumps(doc).encode(), "headers": {**AUTH, "content-type": "application/json"}}),
        ("c33 /evaluate on a Timeloop tree of 3,000 levels (the sandbox's 10 s, first come first served)", "POST",
         "/evaluate", {"json": {"hardware": {"name": "tl3000", "format": "timeloop", "source": source},
                                "layer": {"op": "matmul", "M": 16, "K": 16, "N": 16}, "mapping": mapping},
                       "headers": AUTH}),
    ]


def thirteenth_cases() -> list[tuple[str, str, str, dict[str, Any]]]:
    """Branch hostile13's cases (tests/hostile/test_hostile_thirteenth.py builds them). c33's Timeloop tree, sent
    again and again by this mix, is now refused from the sandbox's memory after its first refusal."""
    import base64

    sys.path.insert(0, str(REPO / "tests" / "hostile"))
    from test_hostile_thirteenth import _opsets, _relu

    def compile_body(model: bytes) -> dict[str, Any]:
        return {"json": {"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(), "options": FAST,
                         "wait": True}, "headers": AUTH}

    return [
        ("c34 a layer named with ESC sequences and a newline (stored, listed to every client)", "POST", "/schedule",
         {"json": {"hardware": "gemmini-16x16", "options": FAST,
                   "layers": [{"name": "fc\x1b]0;pwned\x07\x1b[2J\nb", "op": "matmul", "M": 1, "K": 2048,
                               "N": 1000}]}, "headers": AUTH}),
        ("c35 a model whose graph name forges a log line (stored as the compile's model name)", "POST", "/compile",
         compile_body(_relu(graph="g\nts=forged level=ERROR event=forged"))),
        ("c36 a model importing the default domain twice (opset 17 and 9; taken silently)", "POST", "/compile",
         compile_body(_opsets([("", 17), ("", 9)]))),
    ]


def children(pid: int) -> list[int]:
    """Every process under `pid` (the solver, module, intake and sandbox processes of the API)."""
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for c in (task / "children").read_text().split():
                out += [int(c), *children(int(c))]
    except OSError:
        pass
    return out


def rss_mib(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # (a process that ended between being listed and read)
        return 0.0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


class Phase:
    """What one phase measured."""

    def __init__(self) -> None:
        self.health: list[float] = []
        self.health_fail = 0
        self.probes: list[tuple[float, float]] = []  # each /healthz probe: (sent, answered), time.monotonic()
        self.sent: list[tuple[str, float, float]] = []  # each hostile request: (case, sent, answered or given up)
        self.normal: list[tuple[int, float]] = []
        self.hostile: dict[str, Counter[str]] = defaultdict(Counter)
        self.rss: list[float] = []
        self.workers: dict[int, float] = {}  # child process -> its largest RSS seen (MiB)
        self.leaks = 0  # hostile answers holding bytes of the server's own files
        self.rss_start = 0.0
        self.seconds = 0.0
        self.lag: dict[float, float] = {}  # the API's event-loop lag histogram over the phase: bound (s) -> count

    def lag_over(self, seconds: float) -> tuple[int, int]:
        """(timer samples of the API's event loop later than `seconds`, all samples) in this phase."""
        total = self.lag.get(float("inf"), 0.0)
        within = max((n for bound, n in self.lag.items() if bound <= seconds), default=0.0)
        return int(total - within), int(total)

    @property
    def ok(self) -> int:
        return sum(1 for code, _ in self.normal if code == 200)

    @property
    def latency(self) -> list[float]:
        return [ms for _, ms in self.normal]


def loop_lag(url: str) -> dict[float, float]:
    """The API's tileplan_event_loop_lag_seconds histogram (cumulative counts by upper bound)."""
    text = httpx.get(url + "/metrics", headers=AUTH, timeout=30).text
    out = {}
    for line in text.splitlines():
        if line.startswith("tileplan_event_loop_lag_seconds_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(bound)] = float(line.rsplit(" ", 1)[1])
    return out


def _probe(url: str, stop: Any, results: Any) -> None:
    """In a process of its own: GET /healthz every 50 ms until `stop` is set, then send back (sent, answered,
    ms, ok) per probe (monotonic times: the same clock as the bench's)."""
    out = []
    with httpx.Client(timeout=5.0) as h:
        while not stop.is_set():
            t = time.perf_counter()
            sent = time.monotonic()
            try:
                ok = h.get(url + "/healthz").status_code == 200
            except httpx.TransportError:
                ok = False
            out.append((sent, time.monotonic(), (time.perf_counter() - t) * 1000 if ok else 5000.0, ok))
            time.sleep(0.05)
    results.send(out)


class Prober:
    """The /healthz prober, in its own process: in the bench's process its timings included waiting for that
    interpreter's lock behind the normal clients' and the hostile client's threads (client time, not the server's)."""

    def __init__(self, url: str) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._results, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_probe, args=(url, self._stop, child), daemon=True)
        self._proc.start()

    def stop(self) -> list[tuple[float, float, float, bool]]:
        self._stop.set()
        out: list[tuple[float, float, float, bool]] = self._results.recv() if self._results.poll(30) else []
        self._proc.join(10)
        return out


def measure(url: str, pid: int, cases: list[tuple[str, str, str, dict[str, Any]]], seconds: float,
            rate: float) -> Phase:
    """Normal traffic, the /healthz probe and the RSS sampler for `seconds`, plus the hostile `cases` (if any)."""
    out = Phase()
    out.rss_start = rss_mib(pid)
    lag0 = loop_lag(url)
    stop = threading.Event()
    in_flight: list[threading.Thread] = []  # hostile requests sent: each is answered (or given up) before the end

    def normal_client(i: int) -> None:
        with httpx.Client(base_url=url, timeout=30.0, headers=AUTH) as n:
            for layer in itertools.cycle(NORMAL[i:] + NORMAL[:i]):
                if stop.is_set():
                    return
                t = time.perf_counter()
                try:
                    code = n.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [layer],
                                                     "options": FAST}).status_code
                except httpx.TransportError:
                    code = 0
                out.normal.append((code, (time.perf_counter() - t) * 1000))

    def sampler() -> None:
        while not stop.is_set():
            out.rss.append(rss_mib(pid))
            for child in children(pid):
                out.workers[child] = max(out.workers.get(child, 0.0), rss_mib(child))
            time.sleep(0.5)

    def hostile_client() -> None:
        n = 0
        start = time.monotonic()
        for case, method, path, kw in itertools.cycle(cases):
            if stop.is_set():
                return
            n += 1
            if case.startswith("6"):
                kw = {**kw, "params": {"format": "c", "name": f"reader{n}"}}

            def one(case: str = case, method: str = method, path: str = path, kw: dict[str, Any] = kw) -> None:
                kw = dict(kw)
                timeout = kw.pop("timeout", 5.0)
                sent = time.monotonic()
                try:
                    r = httpx.request(method, url + path, timeout=timeout, **kw)
                    out.hostile[case][str(r.status_code)] += 1
                    out.leaks += any(secret in r.content for secret in SECRETS)
                except httpx.TimeoutException:
                    out.hostile[case][f"gave up ({timeout:g} s)"] += 1
                except httpx.TransportError as exc:
                    out.hostile[case][type(exc).__name__] += 1
                out.sent.append((case, sent, time.monotonic()))

            th = threading.Thread(target=one, daemon=True)
            th.start()
            in_flight.append(th)
            time.sleep(max(0.0, start + n / rate - time.monotonic()))

    prober = Prober(url)
    workers = [sampler] + ([hostile_client] if cases else [])
    threads = [threading.Thread(target=f, daemon=True) for f in workers]
    threads += [threading.Thread(target=normal_client, args=(i,), daemon=True) for i in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for sent, answered, ms, ok in prober.stop():
        out.health.append(ms)
        out.probes.append((sent, answered))
        out.health_fail += not ok
    for t in threads:
        t.join(timeout=30)
    for t in in_flight:  # (the 90 MB probes wait up to 120 s: the server must not be stopped under them)
        t.join(timeout=150)
    out.seconds = time.monotonic() - t0
    out.lag = {bound: n - lag0.get(bound, 0.0) for bound, n in loop_lag(url).items()}
    return out


def attribution(phase: Phase, slow_ms: float) -> list[tuple[str, int, float, int]]:
    """Per hostile case: (case, /healthz probes made while one of its requests was in flight, their p99 in ms, how
    many of those took over `slow_ms`), the largest share of slow probes first; the case "(none in flight)" counts the probes made while no
    hostile request was. The cases overlap in time (3/s, each up to its client timeout), so a case that stalls the
    server shows as the one whose probes are slow where the others' are not."""
    by_case: dict[str, list[float]] = defaultdict(list)
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for case, sent, done in phase.sent:
        spans[case].append((sent, done))
    for ms, (start, end) in zip(phase.health, phase.probes):
        hit = False
        for case, intervals in spans.items():
            if any(sent < end and done > start for sent, done in intervals):
                by_case[case].append(ms)
                hit = True
        if not hit:
            by_case["(none in flight)"].append(ms)
    rows = [(case, len(v), pct(v, .99), sum(1 for x in v if x > slow_ms)) for case, v in by_case.items()]
    return sorted(rows, key=lambda r: (-r[3] / max(1, r[1]), -r[2]))


FLOODER, SECOND = "flooder-token", "second-token"  # two owners
FLOOD_LAYERS, FLOOD_REQUESTS = 1000, 10


def flood_layer(i: int) -> dict[str, Any]:
    return {"name": f"flood{i}", "op": "matmul", "M": 64, "K": 64 + 16 * i, "N": 96}


def probe_layer(i: int) -> dict[str, Any]:
    return {"name": f"probe{i}", "op": "conv2d", "in_channels": 24 + 8 * i, "out_channels": 64, "in_h": 28,
            "in_w": 28, "kernel": 3, "padding": 1}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], seconds: float = 120.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not become healthy")


class Flood:
    """What one flood probe measured."""

    def __init__(self, form: str) -> None:
        self.form = form
        self.alone: list[float] = []  # the second client's probes, seconds, on the idle server
        self.during: list[tuple[float, int, int]] = []  # (seconds, status, flood layers done when it was answered)
        self.submit_s = 0.0
        self.health: list[float] = []


def flood_probe(url: str, form: str, probes: int = 5) -> Flood:
    out = Flood(form)
    first = {"authorization": f"Bearer {FLOODER}"}
    second = {"authorization": f"Bearer {SECOND}"}
    with httpx.Client(base_url=url, timeout=120) as c:
        def probe(i: int) -> tuple[float, int]:
            t = time.perf_counter()
            r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [probe_layer(i)]}, headers=second)
            return time.perf_counter() - t, r.status_code

        c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [probe_layer(99)]}, headers=second)  # warm
        for i in range(probes):
            seconds, code = probe(i)
            assert code == 200, code
            out.alone.append(seconds)

        prober = Prober(url)
        t0 = time.perf_counter()
        per = FLOOD_LAYERS // FLOOD_REQUESTS
        jobs = []
        for part in range(FLOOD_REQUESTS):
            r = c.post("/schedule", json={"hardware": "gemmini-16x16", "wait": False,
                                          "layers": [flood_layer(part * per + i) for i in range(per)]}, headers=first)
            assert r.status_code == 202, r.text
            jobs.append(r.json()["links"]["self"])
        out.submit_s = time.perf_counter() - t0
        time.sleep(1.0)
        for i in range(probes):
            seconds, code = probe(probes + i)
            done = sum(c.get(link, headers=first).json()["progress"]["done"] for link in jobs)
            out.during.append((seconds, code, done))
            time.sleep(2.0)
        out.health = [ms for _, _, ms, _ in prober.stop()]
    return out


def run_flood(pg_admin: str | None) -> list[Flood]:
    """The flood probe on `tileplan serve` (SQLite, local queue), and with `pg_admin` on the deployed form."""
    results = []
    forms = ["local"] + (["procrastinate"] if pg_admin else [])
    for form in forms:
        work = Path(tempfile.mkdtemp(prefix="tileplan-flood-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TILEPLAN_")}
        env.update(PYTHONPATH=os.pathsep.join([str(REPO / "service"), str(REPO / "client")]),
                   TILEPLAN_DATA_DIR=str(work / "data"), TILEPLAN_TOKENS=f"{FLOODER},{SECOND}",
                   TILEPLAN_LOG_LEVEL="warning")
        database = None
        if form == "procrastinate":
            import psycopg

            assert pg_admin is not None
            name = f"tileplan_flood_{os.getpid()}"
            with psycopg.connect(pg_admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}"')
            database = pg_admin.rsplit("/", 1)[0] + "/" + name
            env.update(TILEPLAN_DATABASE_URL=database, TILEPLAN_QUEUE="procrastinate")
        port = free_port()
        procs = []
        logs = []
        try:
            log = open(work / "api.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tileplan.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                 "--workers", "2"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work))
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, procs[0])
            if form == "procrastinate":
                for i in range(2):
                    wlog = open(work / f"worker{i}.log", "wb")
                    logs.append(wlog)
                    procs.append(subprocess.Popen([sys.executable, "-m", "tileplan.cli", "worker", "--concurrency",
                                                   "1"], env=env, stdout=wlog, stderr=subprocess.STDOUT, cwd=work))
            results.append(flood_probe(url, form))
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
            for f in logs:
                f.close()
            if database is not None and pg_admin is not None:
                import psycopg

                with psycopg.connect(pg_admin, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database.rsplit("/", 1)[1]}" WITH (FORCE)')
    return results


def flood_section(results: list[Flood], command: str, load: tuple[float, float]) -> str:
    lines = [
        "## Flood: one client's 1,000 distinct layers, another client's one layer",
        "",
        f"`{command}`: a fresh `tileplan serve` (2 solver processes, tokens `{FLOODER}` and `{SECOND}`: two owners, "
        "default settings and options). The second client POSTs one distinct, uncached conv (`wait`), first alone "
        f"(the reference, same run), then 1 s after the first client sent {FLOOD_LAYERS:,} distinct uncached layers "
        f"({FLOOD_REQUESTS} requests of {FLOOD_LAYERS // FLOOD_REQUESTS}, not waited for), every 2 s; `flood done` is "
        "how many of the 1,000 were solved when the probe was answered (the flood was still running). "
        f"{platform.machine()}, {os.cpu_count()} cores shared with other work (load average {load[0]:.1f} before, "
        f"{load[1]:.1f} after). Target: answered within 5 s.",
        "",
        "| queue | second client alone: each (s) | during the flood: each (s), flood done | max during / alone | "
        "/healthz p99 during | flood submitted in |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        alone = ", ".join(f"{s:.2f}" for s in r.alone)
        during = ", ".join(f"{s:.2f} ({done})" + ("" if code == 200 else f" [{code}]") for s, code, done in r.during)
        worst = max(s for s, _, _ in r.during)
        form = {"local": "local (SQLite)", "procrastinate": "procrastinate (PostgreSQL, 2 workers)"}[r.form]
        lines.append(f"| {form} | {alone} | {during} | {worst:.2f} s / {max(r.alone):.2f} s = "
                     f"{worst / max(r.alone):.1f}x | {pct(r.health, .99):.1f} ms | {r.submit_s:.1f} s |")
    return "\n".join(lines) + "\n"


def write_section(path: Path, heading: str, text: str) -> None:
    """Replace the `heading` section of `path` (up to the next `## ` heading) with `text`, or append it."""
    old = path.read_text() if path.exists() else ""
    start = old.find(heading)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text if old else text
    else:
        end = old.find("\n## ", start + len(heading))
        new = old[:start] + text + (old[end + 1:] if end >= 0 else "")
    path.write_text(new)


def damaged_storage(work: Path, env: dict[str, str], key: str) -> list[tuple[str, str]]:
    """Overwrite the plans table's root page of the mix's database, serve it again, and ask."""
    import sqlite3

    db = work / "data" / "tileplan.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'plans'").fetchone()[0]
    con.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * page)
        f.write(b"\xa5" * page)
    log = open(work / "api-damaged.log", "wb")
    api = subprocess.Popen([sys.executable, "-m", "tileplan.cli", "serve", "--host", "127.0.0.1", "--port",
                            str(PORT), "--workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    url = f"http://127.0.0.1:{PORT}"
    out = []
    try:
        for _ in range(300):
            try:
                httpx.get(url + "/healthz", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        asks = [("GET /healthz", "GET", "/healthz", {}), (f"GET /plans/{key[:8]}...", "GET", f"/plans/{key}", {}),
                ("GET /plans", "GET", "/plans", {}),
                ("POST /schedule (cached layer)", "POST", "/schedule",
                 {"json": {"hardware": "gemmini-16x16", "layers": [NORMAL[0]], "options": FAST}})]
        for name, method, path, kw in asks:
            codes: Counter[str] = Counter()
            for _ in range(5):
                r = httpx.request(method, url + path, headers=AUTH, timeout=30, **kw)
                retry = r.headers.get("retry-after")
                codes[f"{r.status_code}" + (f" (Retry-After {retry})" if retry else "")] += 1
            out.append((name, ", ".join(f"{c}: {n}" for c, n in sorted(codes.items()))))
    finally:
        api.terminate()
        try:
            api.wait(20)
        except subprocess.TimeoutExpired:
            api.kill()
        log.close()
    return out


def mix_command(args: argparse.Namespace) -> str:
    """The command line of this run (the mix and, without --no-flood, the flood probe after it)."""
    return (f".venv/bin/python bench/hostile.py --seconds {args.seconds:g} --baseline-seconds {args.baseline_seconds:g} "
            f"--rate {args.rate:g}" + (" --no-flood" if args.no_flood else "") + (
                " --pg-admin URL" if args.pg_admin else ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--baseline-seconds", type=float, default=30.0, help="normal traffic alone, first")
    ap.add_argument("--rate", type=float, default=3.0, help="hostile requests per second")
    ap.add_argument("--out", default=str(REPO / "bench/results/hostile.md"))
    ap.add_argument("--flood-only", action="store_true", help="only the flood probe (its section of --out)")
    ap.add_argument("--pg-admin", help="a PostgreSQL URL to make a scratch database in: the flood probe runs on the "
                    "deployed form (procrastinate) too")
    ap.add_argument("--no-flood", action="store_true", help="only the mix (the flood's section of --out is kept)")
    args = ap.parse_args()
    if not args.flood_only:
        mix(args)
    if args.no_flood:
        return
    load0 = os.getloadavg()[0]
    floods = run_flood(args.pg_admin)
    command = (".venv/bin/python bench/hostile.py --flood-only" + (" --pg-admin URL" if args.pg_admin else "")
               if args.flood_only else mix_command(args))
    section = flood_section(floods, command, (load0, os.getloadavg()[0]))
    write_section(Path(args.out), "## Flood", section)
    print(section)


def mix(args: argparse.Namespace) -> None:
    """The hostile mix next to normal traffic (the file's first part)."""
    work = Path(tempfile.mkdtemp(prefix="tileplan-hostile-"))
    import shutil

    shutil.copy(REPO / SECRET_FILE, work / SECRET_FILE)  # a server file a request must never read
    secret = (work / SECRET_FILE).read_bytes()
    SECRETS[:] = [secret[i:i + 64] for i in range(0, min(len(secret), 2048), 512)] + [b"SQLite format 3\x00"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEPLAN_")}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO / "service"), str(REPO / "client")]),
               TILEPLAN_DATA_DIR=str(work / "data"), TILEPLAN_TOKENS=TOKEN, TILEPLAN_PROTECT_READS="true",
               TILEPLAN_LOG_LEVEL="warning")
    log = open(work / "api.log", "wb")
    api = subprocess.Popen([sys.executable, "-m", "tileplan.cli", "serve", "--host", "127.0.0.1", "--port",
                            str(PORT), "--workers", "2"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    url = f"http://127.0.0.1:{PORT}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        with httpx.Client(base_url=url, timeout=300, headers=AUTH) as c:
            r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": NORMAL, "options": FAST})
            r.raise_for_status()
            while r.status_code == 202 or r.json().get("status") not in ("done", "failed"):  # (a loaded machine)
                time.sleep(1.0)
                r = c.get(r.json()["links"]["self"])
                r.raise_for_status()
            key = r.json()["plans"][0]["key"]
            descriptor = c.get("/hardware/gemmini-8x8").json()
        descriptor = {k: v for k, v in descriptor.items() if k != "source"}
        cases = (hostile_cases(descriptor, key) + compile_cases(work / SECRET_FILE, work / "made-by-a-name")
                 + eleventh_cases(f"sqlite:///{work / 'data' / 'tileplan.db'}") + twelfth_cases()
                 + thirteenth_cases())
        load0 = os.getloadavg()[0]
        calm = measure(url, api.pid, [], args.baseline_seconds, args.rate)
        mixed = measure(url, api.pid, cases, args.seconds, args.rate)
        time.sleep(5.5)  # the hostile requests still in flight give up
        load1 = os.getloadavg()[0]
    finally:
        api.terminate()
        try:
            api.wait(20)
        except subprocess.TimeoutExpired:
            api.kill()
        log.close()
    damaged = damaged_storage(work, env, key)

    def row(name: str, f: Any, target: str = "") -> str:
        return f"| {name} | {f(calm)} | {f(mixed)} | {target} |"

    lines = [
        "# Hostile mix (issues 16 and 23)",
        "",
        f"`{mix_command(args)}`: one `tileplan serve` (SQLite, 2 solver processes, tokens with reads protected, default "
        "budgets), 4 normal clients posting cached layers back to back and a /healthz probe every 50 ms: first alone "
        f"(the reference, {calm.seconds:.0f} s), then with the hostile cases round robin at {args.rate:g}/s, each with "
        f"a 5 s client timeout ({mixed.seconds:.0f} s). {platform.machine()}, {os.cpu_count()} cores shared with other "
        f"work (load average {load0:.1f} before, {load1:.1f} after).",
        "",
        "| measure | normal traffic alone | with the hostile mix | target |",
        "|---|---|---|---|",
        row("/healthz probes (failed)", lambda r: f"{len(r.health)} ({r.health_fail})", "all answer"),
        row("/healthz p50 / p99 / max", lambda r: f"{pct(r.health, .5):.1f} / {pct(r.health, .99):.1f} / "
            f"{max(r.health):.1f} ms", "p99 < 200 ms"),
        row("API event loop: lag samples over 50 ms / over 200 ms (of all)", lambda r: f"{r.lag_over(.05)[0]} / "
            f"{r.lag_over(.2)[0]} ({r.lag_over(.2)[1]})", "0 over 200 ms"),
        row("normal cached POST /schedule answered 200", lambda r: f"{r.ok} of {len(r.normal)} "
            f"({r.ok / max(1, len(r.normal)):.2%})", "100%"),
        row("normal p50 / p99", lambda r: f"{pct(r.latency, .5):.1f} / {pct(r.latency, .99):.1f} ms"),
        row(f"API RSS max (start {calm.rss_start:.0f} MiB)", lambda r: f"{max(r.rss):.0f} MiB",
            f"< {RSS_BUDGET_MIB} MiB"),
        f"| /healthz p99 with the mix / alone | | {pct(mixed.health, .99) / pct(calm.health, .99):.2f}x | |",
        row("worker processes' RSS max (processes seen)", lambda r: f"{max(r.workers.values(), default=0):.0f} MiB "
            f"({len(r.workers)})", f"<= {WORKER_CAP_MIB} MiB (worker_memory_mb)"),
        row("hostile answers 5xx", lambda r: str(sum(n for v in r.hostile.values() for c, n in v.items()
                                                     if c.startswith("5"))), "0"),
        row("hostile answers holding bytes of a server file", lambda r: str(r.leaks), "0"),
        f"| commands a model's names ran on the server (c10's file made) | | "
        f"{'yes' if (work / 'made-by-a-name').exists() else 'no'} | no |",
        "",
        f"Hostile requests sent: {sum(sum(v.values()) for v in mixed.hostile.values())}.",
        "",
        "| hostile case | answers |",
        "|---|---|",
    ]
    for case, _, _, _ in cases:
        got = ", ".join(f"{code}: {n}" for code, n in sorted(mixed.hostile[case].items()))
        lines.append(f"| {case} | {got} |")
    slow = 200.0
    lines += ["", "Which cases were in flight when /healthz was slow (each probe counts for every case with a request "
              "in flight while it ran):", "",
              f"| hostile case in flight | /healthz probes | their p99 (ms) | over {slow:g} ms (share) |", "|---|---|---|---|"]
    lines += [f"| {case} | {n} | {p99:.1f} | {over} ({over / max(1, n):.0%}) |"
              for case, n, p99, over in attribution(mixed, slow)]
    lines += ["", "Case 5 (PostgreSQL going away) is not in this SQLite mix: tests/hostile/test_hostile_database.py "
              "replays it. Cases c1-c9 are issue 23's compile-path probes (c1: external data naming the server's "
              f"`{SECRET_FILE}` and database, both in its working directory; c4: 90 MB models, read in full before the "
              "request's error, `input_shapes` naming no input, with a 120 s client timeout). c10-c12 are this session's "
              "(branch hostile): c10 a model whose graph and node names try to close their comments in the generated "
              "C and Makefile (an `#include` of the server's file, whose lines gcc's errors would quote, and a make "
              "`$(shell ...)` line; waited for, so the first try may give up at 5 s and the next is answered from the "
              "store), c11 a sparse tensor's dense shape, c12 raw_data longer than its dims. c13-c15 are branch "
              "hostile7's (tests/hostile/test_hostile_onnx_hiding.py builds them): c13 external data in a model-local "
              "function's default attribute (onnxruntime's folding inlined it and read the file into the program's "
              "weights), c14 40 functions each calling the next twice, c15 a constant doubled by Concat 40 times "
              "(ONNX's data propagation and onnxruntime's folding each took the checking process to its memory cap), "
              "c16 a Split of 2000 outputs into a Concat of 2000 inputs (500: a RecursionError in the C emitter, "
              "a 500; 2000: a compile past 10 minutes). c17-c19 are branch hostile8's: c17 a 165-byte MaxPool whose "
              "emulated run was an hour of the one compile lane and c18 300 distinct layers to plan (now 422s from "
              "the compile work bounds, tests/hostile/test_hostile_compile_work.py), c19 a /schedule model read in the "
              "API's thread (~1 s of event loop each; now in the sandbox, tests/hostile/test_hostile_schedule_model.py). "
              "c20-c23 are branch hostile9's (tests/hostile/test_hostile_ninth.py builds them): c20 a Range to inf "
              "(its up-front size count raised OverflowError, a 500), c21 calibration arrays of another shape than the "
              "model's input (onnxruntime's error in the compile, a 500 run again by every identical request), c22 "
              "calibration of 3e38 (an output scale of inf, a requantization multiplier of 0, a TVM ScheduleError), "
              "c23 a form with two `model` parts (now 422s; c22 compiles with the op on the host). c24-c27 are branch "
              "hostile10's (tests/hostile/test_hostile_tenth.py builds them): c24 an input of a type C has none for "
              "(a KeyError writing the program's signature), c25 a graph without outputs (a `tileplan_run` of no "
              "outputs, whose host build failed), c26 a Conv whose kernel_shape is not its weight's (ONNX's inference "
              "takes the attribute: a wrong program, or the compile's process aborted), c27 a NUL in the graph name "
              "(stored as the compile's model name: PostgreSQL refuses it, a 503 blaming the storage); each now a 422 "
              "before anything is stored. c28-c31 are branch hostile11's (tests/hostile/test_hostile_eleventh.py "
              "builds them): c28 and c29 descriptors of 3,000 memory levels or 12,000 dataflows (each spent its "
              "layer's whole solve budget, ~10 s of a solver, then failed; now a 422 before any level is read), c30 a "
              "loop permutation of 40,000 repeated dimensions (taken silently; now a 422), c31 a compile of 40,000 "
              "ops (a 1.4 MB model of 40,000 Identity nodes makes one; written into the store here) read as JSON and "
              "as its page (the 12 MB summary parsed and encoded again in the API: 1.3 s and 3.9 s of its event loop "
              "per view; now the stored text is sent as it is and the page lists 1,000 ops). c32 and c33 are branch "
              "hostile12's; c34-c36 branch hostile13's (tests/hostile/test_hostile_thirteenth.py builds them): c34 a "
              "layer name and c35 a model's graph name holding control characters (stored and shown to every client, "
              "a newline forged a line of the server's log; now 422s), c36 a model importing the default ONNX domain "
              "twice (taken silently; now a 422); c33's Timeloop tree is refused from the sandbox's memory after its "
              "first refusal.",
              "",
              "## Damaged storage (issue 23, case 8)", "",
              "After the mix the server is stopped, the `plans` table's root page in its SQLite file overwritten, and "
              "the server started again on it; each request 5 times:", "",
              "| request | answers |", "|---|---|"]
    lines += [f"| {req} | {got} |" for req, got in damaged]
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    kept = out.read_text() if out.exists() else ""
    flood = kept.find("## Flood")
    out.write_text(text + ("\n" + kept[flood:] if flood >= 0 else ""))  # (the flood's section is rewritten after)
    print(text)


if __name__ == "__main__":
    main()
