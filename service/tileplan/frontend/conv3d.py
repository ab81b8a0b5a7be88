"""Quantized 3-D convolutions (a video net's Conv3d) as 2-D ones the accelerator runs.

y[n, k, t] = sum over dt of conv2d(x[n, :, t * st + dt * dt_dil - pad_t], W[k, :, dt]) + B[k]: each output frame is
one 2-D convolution of the kt input frames it reads, stacked on the channel axis (channel dt * C + c). So the
int8 input is padded in time with its zero point (what the 3-D conv pads with), the kt frame sequences are sliced
out and concatenated on the channel axis, and the output frames become the batch of one 2-D conv with weights
W' [k, dt * C + c, kh, kw]; its int8 result is put back in NCTHW order. Host copies before and after (Pad, Slice,
Concat, Transpose, Reshape on int8), the same integer sums in between: the result equals QLinearConv's.

Rewritten (`conv3d_as_conv2d`): DequantizeLinear(x), DequantizeLinear(int8 constant W) (per tensor or per output
channel), [DequantizeLinear(int32 constant B)] -> 5-D Conv (one group, explicit pads) -> QuantizeLinear (its only
consumer), on tensors of known shape. Others stay 3-D and run on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tileplan.frontend import onnx_graph
from tileplan.frontend.onnx_graph import attr as _attr


def conv3d_as_conv2d(model: Any) -> str | None:
    """Rewrite each quantized 3-D Conv of the form above as host copies around a 2-D Conv (the Conv keeps its
    name). Returns the rewritten nodes' names (None: none)."""
    from onnx import helper, numpy_helper

    g = model.graph
    if not any(n.op_type == "Conv" and len(_attr(n, "kernel_shape", [])) == 3 for n in g.node):
        return None
    _, shapes = onnx_graph.types_and_shapes(model)
    ix = onnx_graph.index(g)
    inits, producer, consumers, outputs = ix.inits, ix.producer, ix.consumers, ix.outputs
    done: list[str] = []
    old_dq: list[Any] = []
    for node in list(g.node):
        kernel = list(_attr(node, "kernel_shape", []))
        if node.op_type != "Conv" or len(kernel) != 3 or _attr(node, "group", 1) != 1:
            continue
        if _attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            continue
        x_dq, w_dq = producer.get(node.input[0]), producer.get(node.input[1])
        users = consumers.get(node.output[0], [])
        if (x_dq is None or x_dq.op_type != "DequantizeLinear" or w_dq is None or w_dq.op_type != "DequantizeLinear"
                or w_dq.input[0] not in inits or len(users) != 1 or users[0].op_type != "QuantizeLinear"
                or node.output[0] in outputs or x_dq.input[0] not in shapes or node.output[0] not in shapes):
            continue
        w = numpy_helper.to_array(inits[w_dq.input[0]])
        per_channel = w_dq.input[1] not in inits or numpy_helper.to_array(inits[w_dq.input[1]]).size > 1
        if w.dtype != np.int8 or w.ndim != 5 or (per_channel and int(_attr(w_dq, "axis", 1)) % 5 != 0):
            continue
        n_, c, _, h, wd = shapes[x_dq.input[0]]
        t_out = shapes[node.output[0]][2]
        kt, kh, kw = kernel
        st, sh, sw = list(_attr(node, "strides", [1, 1, 1]))
        dt_dil, dh, dw = list(_attr(node, "dilations", [1, 1, 1]))
        p = list(_attr(node, "pads", [0] * 6))
        q = users[0]
        base = f"{node.name}/as_conv2d"
        xq = x_dq.input[0]
        x_zp = x_dq.input[2] if len(x_dq.input) > 2 and x_dq.input[2] else None
        new: list[Any] = []

        def const(arr: np.ndarray, suffix: str, base: str = base) -> str:
            g.initializer.append(numpy_helper.from_array(arr, f"{base}/{suffix}"))
            return f"{base}/{suffix}"

        def make(op: str, ins: list[str], suffix: str, base: str = base, new: list[Any] = new, **attrs: Any) -> str:
            new.append(helper.make_node(op, ins, [f"{base}/{suffix}"], name=f"{base}/{suffix}", **attrs))
            return f"{base}/{suffix}"

        frames = xq
        if p[0] or p[3]:  # frames before and after the clip: the input zero point, as the 3-D conv pads
            pads = np.array([0, 0, p[0], 0, 0, 0, 0, p[3], 0, 0], np.int64)
            zero = x_zp if x_zp is not None else const(np.zeros((), np.int8), "zero")
            frames = make("Pad", [xq, const(pads, "pads"), zero], "pad_t", mode="constant")
        taps = []
        for dt in range(kt):
            start = dt * dt_dil
            taps.append(make("Slice", [frames, const(np.array([start], np.int64), f"start{dt}"),
                                       const(np.array([start + (t_out - 1) * st + 1], np.int64), f"end{dt}"),
                                       const(np.array([2], np.int64), f"axis{dt}"),
                                       const(np.array([st], np.int64), f"step{dt}")], f"frames{dt}"))
        stacked = taps[0] if kt == 1 else make("Concat", taps, "stack", axis=1)
        batch = make("Transpose", [stacked], "frames_first", perm=[0, 2, 1, 3, 4])
        x2 = make("Reshape", [batch, const(np.array([n_ * t_out, kt * c, h, wd], np.int64), "shape_in")], "x2d")
        x2_dq = make("DequantizeLinear", [x2, *x_dq.input[1:]], "x2d_dq")
        w2 = w.transpose(0, 2, 1, 3, 4).reshape(w.shape[0], kt * c, kh, kw).copy()
        w2_dq = make("DequantizeLinear", [const(w2, "w"), *w_dq.input[1:]], "w_dq", axis=0)
        conv_in = [x2_dq, w2_dq, *node.input[2:]]
        conv = helper.make_node("Conv", conv_in, [f"{base}/y"], name=node.name, kernel_shape=[kh, kw],
                                strides=[sh, sw], dilations=[dh, dw], pads=[p[1], p[2], p[4], p[5]])
        k, ho, wo = shapes[node.output[0]][1], *shapes[node.output[0]][3:]
        q_out = q.output[0]
        q.input[0] = f"{base}/y"
        q.output[0] = f"{base}/y_q"
        back = [helper.make_node("Reshape", [f"{base}/y_q", const(np.array([n_, t_out, k, ho, wo], np.int64),
                                                                  "shape_out")], [f"{base}/y_frames"],
                                 name=f"{base}/y_frames"),
                helper.make_node("Transpose", [f"{base}/y_frames"], [q_out], name=f"{base}/y_ncthw",
                                 perm=[0, 2, 1, 3, 4])]
        at = list(g.node).index(node)
        g.node.remove(node)
        for j, n in enumerate([*new, conv]):
            g.node.insert(at + j, n)
        at = list(g.node).index(q) + 1
        for j, n in enumerate(back):
            g.node.insert(at + j, n)
        done.append(node.name)
        old_dq += [x_dq, w_dq]
    if not done:
        return None
    used = {i for n in g.node for i in n.input} | outputs
    dropped = {i for d in old_dq if d.output[0] not in used for i in d.input}
    for d in old_dq:
        if d.output[0] not in used and d in g.node:
            g.node.remove(d)  # the 3-D convs' own input and weight dequantisation, now unused
    used = {i for n in g.node for i in n.input} | outputs
    for t in [t for t in g.initializer if t.name in dropped and t.name not in used]:
        g.initializer.remove(t)
    return ", ".join(done)
