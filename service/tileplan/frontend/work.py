"""What a compile of a model will cost, bounded from its inferred shapes before anything is planned or run.

A model's bytes say little about its work: a 165-byte model of one MaxPool with a 64x64 window over a 2^27-element
int8 tensor is 5.5 * 10^11 compares in the compile-time emulated run (an hour of the compile process, whose lane
every other owner's compile waits for; a compile stopped at its time limit was the server's fault and tried again);
a 1 MB chain of 3x3 convolutions over 1024 x 2048 images is 8 * 10^10 MACs a layer; and a chain of a few thousand
matrix products of distinct shapes is as many MIP solves. So a compile's work is counted from the shapes shape
inference gave (`onnx_import.load_model`'s model) and bounded, each bound a setting named in its 422:

- `max_compile_layers`: distinct convolutions and matrix products (operator, input shapes and attributes: each
  distinct one is planned by a mapper run of its own, up to `options.time_limit_s` each);
- with the emulated run (`options.emulate`, the default): `max_compile_macs`, the multiply-accumulates of every
  convolution and matrix product (on the accelerator or not), and `max_compile_host_ops`, the element operations of
  every other node (a node's input and output elements; a pooling window's or LRN's size times its output; a sort's
  n log n; non-maximum suppression's boxes squared).

The defaults are far above the models people run (`bench/results/zoo.md`: ViT-B/16 is 1.8 * 10^10 MACs, VGG-19
2 * 10^10, DenseNet-121 120 convolutions of which fewer are distinct; their host work is under 10^9) and below what
holds a compile for minutes (`tests/hostile/test_hostile_compile_work.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tileplan.errors import InputError
from tileplan.frontend.onnx_graph import attr, tensor_shapes

MAX_COMPILE_LAYERS = 256  # (settings.max_compile_layers etc.: the same defaults)
MAX_COMPILE_MACS = 1 << 37  # ~1.4 * 10^11: ~100 s of the emulator's accelerator at ~1.3 * 10^9 MACs/s
MAX_COMPILE_HOST_OPS = 1 << 34  # ~1.7 * 10^10 element operations: ~100 s of host C at ~1.5 * 10^8 windowed compares/s

NO_RUN = ("compile without the emulated run (options.emulate=false; tileplan compile --no-emulate), or with "
          "smaller input shapes")
_limits: dict[str, float] = {"layers": MAX_COMPILE_LAYERS, "macs": MAX_COMPILE_MACS, "host_ops": MAX_COMPILE_HOST_OPS,
                              "plan_s": 0}

MAC_OPS = {"Conv", "ConvInteger", "ConvTranspose", "ConvTransposeInteger", "MatMul", "MatMulInteger",
           "MatMulInteger16", "Gemm", "Einsum", "LSTM", "GRU", "QLinearConv", "QLinearMatMul", "QGemm", "Attention"}
WINDOW_OPS = {"MaxPool", "AveragePool", "LpPool", "QLinearAveragePool", "MaxUnpool"}
SORT_OPS = {"TopK", "Unique"}
QUADRATIC_OPS = {"NonMaxSuppression", "AllClassNMS"}
# ops whose every output element reads a fixed neighbourhood (bilinear / bicubic taps, sampling grids)
TAP_OPS = {"Resize": 16, "Upsample": 16, "GridSample": 16, "RoiAlign": 64, "MaxRoiPool": 64, "AffineGrid": 4}


def set_limits(layers: int | None = None, macs: int | None = None, host_ops: int | None = None,
               plan_s: float | None = None) -> None:
    """This process's bounds (the service sets the settings' in every process that reads models; the CLI its own);
    `plan_s`: a service compile's planning budget (compile_plan_budget_s; 0: none)."""
    for key, value in (("layers", layers), ("macs", macs), ("host_ops", host_ops), ("plan_s", plan_s)):
        if value:
            _limits[key] = float(value) if key == "plan_s" else int(value)


def limits() -> dict[str, float]:
    return dict(_limits)


def of_settings(settings: Any) -> dict[str, Any]:
    """`set_limits`' keyword arguments from the service's settings."""
    return {"layers": settings.max_compile_layers, "macs": settings.max_compile_macs,
            "host_ops": settings.max_compile_host_ops, "plan_s": settings.compile_plan_budget_s}


@dataclass
class Work:
    macs: int = 0
    host_ops: int = 0
    layers: set[str] = field(default_factory=set)
    heaviest_mac: tuple[int, str] = (0, "")  # (MACs, node) of the node with the most
    heaviest_host: tuple[int, str] = (0, "")


def _prod(dims: Any) -> int:
    return math.prod(int(d) for d in dims)


def node_macs(node: Any, shapes: dict[str, tuple[int, ...]]) -> int:
    """Multiply-accumulates of a convolution / matrix product node (0 when a shape it needs is unknown)."""
    from tileplan.frontend.compile import _node_macs

    op = node.op_type
    try:
        if op == "QLinearConv":
            return _prod(shapes[node.output[0]]) * _prod(shapes[node.input[3]][1:])
        if op in ("QLinearMatMul", "MatMulInteger16", "QGemm"):
            a, y = shapes[node.input[0]], shapes[node.output[0]]
            k = a[-2] if op == "QGemm" and attr(node, "transA", 0) and len(a) >= 2 else a[-1]
            return _prod(y) * int(k)
        if op == "Attention":  # com.microsoft: the QKV projection and the two products of every head
            x, w = shapes[node.input[0]], shapes[node.input[1]]
            batch, seq, hidden = x[0], x[1], x[-1]
            return _prod(x) * int(w[-1]) + 2 * batch * seq * seq * hidden
    except (KeyError, IndexError, TypeError, ValueError):
        return 0
    return int(_node_macs(node, shapes))


def node_host_ops(node: Any, shapes: dict[str, tuple[int, ...]]) -> int:
    """Element operations of any other node: its inputs' and outputs' elements, times a pooling window, a sort's
    log n, the boxes of non-maximum suppression, or the taps of a resampling."""
    ins = sum(_prod(shapes[i]) for i in node.input if i in shapes)
    outs = sum(_prod(shapes[o]) for o in node.output if o in shapes)
    op = node.op_type
    if op in WINDOW_OPS or op == "LRN":
        window = _prod(attr(node, "kernel_shape", [])) if op != "LRN" else int(attr(node, "size", 1))
        return ins + outs * max(window, 1)
    if op in SORT_OPS:
        return ins * max(1, int(math.log2(max(ins, 2)))) + outs
    if op in QUADRATIC_OPS:
        boxes = shapes.get(node.input[0]) if node.input else None
        n = _prod(boxes[:-1]) if boxes else 0
        return ins + outs + n * n
    if op in TAP_OPS:
        return ins + outs * TAP_OPS[op]
    return ins + outs


def layer_signature(node: Any, shapes: dict[str, tuple[int, ...]]) -> str:
    """What makes two convolutions / matrix products one layer to plan: operator, input shapes, attributes."""
    from onnx import helper

    attrs = sorted((a.name, repr(helper.get_attribute_value(a))) for a in node.attribute)
    return repr((node.op_type, [shapes.get(i) for i in node.input[:3]], attrs))


def estimate(model: Any) -> Work:
    """The work of compiling (and emulating) `model`, a model whose shapes were inferred."""
    shapes = tensor_shapes(model.graph)
    work = Work()
    for node in model.graph.node:
        if node.op_type in MAC_OPS:
            macs = node_macs(node, shapes)
            work.macs += macs
            work.heaviest_mac = max(work.heaviest_mac, (macs, node.name))
            if macs:
                work.layers.add(layer_signature(node, shapes))
        elif node.op_type not in ("Constant", "Shape", "Size", "Identity"):
            ops = node_host_ops(node, shapes)
            work.host_ops += ops
            work.heaviest_host = max(work.heaviest_host, (ops, node.name))
    return work


def check(model: Any, emulate: bool = True, loc: tuple[str, ...] = ("model",)) -> Work:
    """InputError (type too_costly) naming the bound and the heaviest node when compiling `model` would be more
    work than this process's bounds allow (`emulate`: the MAC and host-operation bounds apply too)."""
    work = estimate(model)
    lim = _limits
    if len(work.layers) > lim["layers"]:
        raise InputError(loc, f"{len(work.layers)} distinct convolutions / matrix products (operator, shapes, "
                         f"attributes) to plan, over this server's bound of {lim['layers']} per compile "
                         "(max_compile_layers)", "too_costly")
    if not emulate:
        return work
    if work.macs > lim["macs"]:
        macs, node = work.heaviest_mac
        raise InputError(loc, f"{work.macs:.3g} multiply-accumulates to emulate (node {node!r} alone: {macs:.3g}), "
                         f"over this server's bound of {lim['macs']:.3g} per compile (max_compile_macs): {NO_RUN}", "too_costly")
    if work.host_ops > lim["host_ops"]:
        ops, node = work.heaviest_host
        raise InputError(loc, f"{work.host_ops:.3g} element operations of host ops to emulate (node {node!r} alone: "
                         f"{ops:.3g}), over this server's bound of {lim['host_ops']:.3g} per compile "
                         f"(max_compile_host_ops): {NO_RUN}", "too_costly")
    return work
