# mypy: disable-error-code="valid-type"
# (TVMScript parameter annotations, T.Buffer((shape), dtype), are calls that TVM parses, not Python types)
"""ONNX LSTM, GRU and RNN as one host function each (TVM's ONNX importer has no converter for any).

A recurrence's step t multiplies the state of step t - 1, so its products cannot be laid out as one matrix product
for the accelerator, and onnxruntime's static quantizer leaves LSTM / GRU in float anyway (its QDQ and QOperator
exports keep the float op between a DequantizeLinear and a QuantizeLinear). The host computes them as ONNX
defines them, in float32, every direction and step in one loop nest (a PrimFunc written in TVMScript: a
recurrence is not a TE compute), into one buffer of states [seq, directions, batch, slots, hidden] (slot 0 the
hidden state H_t, slot 1 an LSTM's cell state C_t); Y, Y_h and Y_c are slices of it. Each step's gates are
computed as onnxruntime's CPU kernels order them: the input product plus both biases, then the state product
added; sigmoid and tanh are TVM's (onnxruntime's are MLAS approximations: results agree to a few float32 ulps).

Taken: the default activations, layout 0 (sequence first), no sequence_lens, no peepholes, no clip, no
input_forget; anything else is refused naming the attribute.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RECURRENT_OPS = ("LSTM", "GRU", "RNN")
_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent_macs(x_shape: tuple[int, ...], w_shape: tuple[int, ...], r_shape: tuple[int, ...]) -> int:
    """Multiply-accumulates of an LSTM / GRU: every step's input and state products, per direction."""
    seq, batch = x_shape[0], x_shape[1]
    dirs, gates_h, inputs = w_shape
    return int(dirs * seq * batch * gates_h * (inputs + r_shape[2]))


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _refusal(op: str, inputs: Any, attrs: dict) -> str | None:
    acts = [_text(a) for a in attrs.get("activations", [])]
    dirs = 2 if _text(attrs.get("direction", "forward")) == "bidirectional" else 1
    if acts and acts != _ACTIVATIONS[op] * dirs:
        return f"activations {acts} (Tileplan computes the default ones, {_ACTIVATIONS[op]})"
    if int(attrs.get("layout", 0)) != 0:
        return "layout 1 (batch first; Tileplan takes layout 0, sequence first, as torch exports)"
    if "clip" in attrs:
        return "a clip (Tileplan computes the recurrence without one)"
    if int(attrs.get("input_forget", 0)):
        return "input_forget (coupled input and forget gates)"
    if len(inputs) > 4 and inputs[4] is not None:
        return "sequence_lens (sequences of different lengths in one batch)"
    if op == "LSTM" and len(inputs) > 7 and inputs[7] is not None:
        return "peephole weights P"
    return None


def _state_func(op: str, seq: int, batch: int, inputs_n: int, hidden: int, dirs: int, rev_base: int,
                rev_step: int, linear_before_reset: bool) -> Any:
    """The PrimFunc (x, w, r, b, h0[, c0]) -> states. Direction d runs backwards when rev_base + rev_step * d is
    1 (reverse: 1 + 0 d; bidirectional: 0 + 1 d, its second direction)."""
    from tvm.script import tirx as T

    S, B, I, H, D = seq, batch, inputs_n, hidden, dirs  # the ONNX operator's letters
    f32 = "float32"
    if op == "LSTM":
        @T.prim_func(private=True)
        def lstm(x: T.Buffer((S, B, I), f32), w: T.Buffer((D, 4 * H, I), f32), r: T.Buffer((D, 4 * H, H), f32),
                 bias: T.Buffer((D, 8 * H), f32), h0: T.Buffer((D, B, H), f32), c0: T.Buffer((D, B, H), f32),
                 out: T.Buffer((S, D, B, 2, H), f32)) -> None:
            T.func_attr({"op_pattern": 8})
            gates = T.alloc_buffer((B, 4 * H), f32)
            hr = T.alloc_buffer((B, 4 * H), f32)
            h = T.alloc_buffer((B, H), f32)
            c = T.alloc_buffer((B, H), f32)
            for d in range(D):
                for b, j in T.grid(B, H):
                    h[b, j] = h0[d, b, j]
                    c[b, j] = c0[d, b, j]
                for s in range(S):
                    t = s + (rev_base + rev_step * d) * (S - 1 - 2 * s)
                    for b, g in T.grid(B, 4 * H):
                        gates[b, g] = T.float32(0)
                        for k in range(I):
                            gates[b, g] = gates[b, g] + x[t, b, k] * w[d, g, k]
                        gates[b, g] = gates[b, g] + (bias[d, g] + bias[d, 4 * H + g])
                    for b, g in T.grid(B, 4 * H):
                        hr[b, g] = T.float32(0)
                        for k in range(H):
                            hr[b, g] = hr[b, g] + h[b, k] * r[d, g, k]
                        gates[b, g] = hr[b, g] + gates[b, g]
                    for b, j in T.grid(B, H):  # gates i, o, f, c
                        c[b, j] = (T.sigmoid(gates[b, 2 * H + j]) * c[b, j]
                                   + T.sigmoid(gates[b, j]) * T.tanh(gates[b, 3 * H + j]))
                        h[b, j] = T.sigmoid(gates[b, H + j]) * T.tanh(c[b, j])
                        out[t, d, b, 0, j] = h[b, j]
                        out[t, d, b, 1, j] = c[b, j]

        return lstm

    if op == "RNN":
        @T.prim_func(private=True)
        def rnn(x: T.Buffer((S, B, I), f32), w: T.Buffer((D, H, I), f32), r: T.Buffer((D, H, H), f32),
                bias: T.Buffer((D, 2 * H), f32), h0: T.Buffer((D, B, H), f32),
                out: T.Buffer((S, D, B, 1, H), f32)) -> None:
            T.func_attr({"op_pattern": 8})
            xg = T.alloc_buffer((B, H), f32)
            h = T.alloc_buffer((B, H), f32)
            for d in range(D):
                for b, j in T.grid(B, H):
                    h[b, j] = h0[d, b, j]
                for s in range(S):
                    t = s + (rev_base + rev_step * d) * (S - 1 - 2 * s)
                    for b, g in T.grid(B, H):  # the input product plus both biases, then the state product
                        xg[b, g] = T.float32(0)
                        for k in range(I):
                            xg[b, g] = xg[b, g] + x[t, b, k] * w[d, g, k]
                        xg[b, g] = xg[b, g] + bias[d, g] + bias[d, H + g]
                        for k in range(H):
                            xg[b, g] = xg[b, g] + h[b, k] * r[d, g, k]
                    for b, j in T.grid(B, H):
                        h[b, j] = T.tanh(xg[b, j])
                        out[t, d, b, 0, j] = h[b, j]

        return rnn

    lbr = 1 if linear_before_reset else 0

    @T.prim_func(private=True)
    def gru(x: T.Buffer((S, B, I), f32), w: T.Buffer((D, 3 * H, I), f32), r: T.Buffer((D, 3 * H, H), f32),
            bias: T.Buffer((D, 6 * H), f32), h0: T.Buffer((D, B, H), f32),
            out: T.Buffer((S, D, B, 1, H), f32)) -> None:
        T.func_attr({"op_pattern": 8})
        xg = T.alloc_buffer((B, 3 * H), f32)
        hg = T.alloc_buffer((B, 3 * H), f32)
        h = T.alloc_buffer((B, H), f32)
        for d in range(D):
            for b, j in T.grid(B, H):
                h[b, j] = h0[d, b, j]
            for s in range(S):
                t = s + (rev_base + rev_step * d) * (S - 1 - 2 * s)
                for b, g in T.grid(B, 3 * H):
                    xg[b, g] = T.float32(0)
                    for k in range(I):
                        xg[b, g] = xg[b, g] + x[t, b, k] * w[d, g, k]
                    xg[b, g] = xg[b, g] + bias[d, g]
                for b, g in T.grid(B, 2 * H):  # gates z, r: state product plus its bias
                    hg[b, g] = T.float32(0)
                    for k in range(H):
                        hg[b, g] = hg[b, g] + h[b, k] * r[d, g, k]
                    hg[b, g] = hg[b, g] + bias[d, 3 * H + g]
                for b, j in T.grid(B, H):  # gate h: r * (h R_h + Rb_h), or (r * h) R_h + Rb_h
                    hg[b, 2 * H + j] = T.float32(0)
                    for k in range(H):
                        hg[b, 2 * H + j] = hg[b, 2 * H + j] + T.if_then_else(
                            lbr == 1, h[b, k], T.sigmoid(xg[b, H + k] + hg[b, H + k]) * h[b, k]) * r[d, 2 * H + j, k]
                    hg[b, 2 * H + j] = hg[b, 2 * H + j] + bias[d, 5 * H + j]
                for b, j in T.grid(B, H):
                    xg[b, 2 * H + j] = T.tanh(xg[b, 2 * H + j] + T.if_then_else(
                        lbr == 1, T.sigmoid(xg[b, H + j] + hg[b, H + j]) * hg[b, 2 * H + j], hg[b, 2 * H + j]))
                    h[b, j] = ((T.float32(1) - T.sigmoid(xg[b, j] + hg[b, j])) * xg[b, 2 * H + j]
                               + T.sigmoid(xg[b, j] + hg[b, j]) * h[b, j])
                    out[t, d, b, 0, j] = h[b, j]

    return gru


def convert(bb: Any, op: str, inputs: Any, attrs: dict) -> tuple[Any, Any]:
    """(the states call, a function of its bound variable giving the op's outputs as a relax.Tuple: Y, Y_h and,
    for an LSTM, Y_c)."""
    from tvm import relax

    why = _refusal(op, inputs, attrs)
    if why is not None:
        raise ValueError(f"{op} with {why} is not supported")
    x, w, r = inputs[0], inputs[1], inputs[2]
    seq, batch, n_in = (int(d) for d in x.ty.shape)
    dirs, gh, _ = (int(d) for d in w.ty.shape)
    hidden = gh // GATES[op]
    direction = _text(attrs.get("direction", "forward"))
    rev_base, rev_step = {"forward": (0, 0), "reverse": (1, 0), "bidirectional": (0, 1)}[direction]
    zeros = relax.const(np.zeros((dirs, batch, hidden), np.float32))

    def given(k: int, default: Any) -> Any:
        return inputs[k] if len(inputs) > k and inputs[k] is not None else default

    bias = given(3, relax.const(np.zeros((dirs, 2 * gh), np.float32)))
    state = [given(5, zeros)] + ([given(6, zeros)] if op == "LSTM" else [])
    slots = 2 if op == "LSTM" else 1
    func = _state_func(op, seq, batch, n_in, hidden, dirs, rev_base, rev_step,
                       bool(int(attrs.get("linear_before_reset", 0))))
    gv = bb.add_func(func, op.lower())
    call = relax.call_tir(gv, relax.Tuple([x, w, r, bias, *state]),
                          relax.TensorType((seq, dirs, batch, slots, hidden), "float32"))

    def outputs(states: Any) -> Any:
        def slot(k: int) -> Any:
            return bb.emit(relax.op.reshape(relax.op.strided_slice(states, [3], [k], [k + 1]),
                                            (seq, dirs, batch, hidden)))

        def last(y: Any) -> Any:  # each direction's final step: the last for forward, the first for backward
            steps = [seq - 1 if (rev_base + rev_step * d) == 0 else 0 for d in range(dirs)]
            parts = [relax.op.strided_slice(y, [0, 1], [t, d], [t + 1, d + 1]) for d, t in enumerate(steps)]
            both = parts[0] if dirs == 1 else relax.op.concat(parts, axis=1)
            return bb.emit(relax.op.reshape(both, (dirs, batch, hidden)))

        y = slot(0)
        outs = [y, last(y)] + ([last(slot(1))] if op == "LSTM" else [])
        return relax.Tuple(outs)

    return call, outputs
