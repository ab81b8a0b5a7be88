"""ONNX DeformConv (opset 19; 2-D) on the host, as onnxruntime's CPU kernel computes it (TVM's importer has no
converter: the compile refused it, 'operator DeformConv ... is not supported').

onnxruntime's kernel is a deformable im2col then one SGEMM per image and group, then the bias:

- each column element (channel c, kernel tap (i, j), output pixel (oh, ow)) samples channel c bilinearly at
  h = float(oh * stride - pad + i * dilation) + offset_h (likewise w), offsets of c's offset group: 0 where
  h <= -1, h >= H, w <= -1 or w >= W; else the four neighbours of (floor h, floor w) with weights
  (1 - lh)(1 - lw), (1 - lh) lw, lh (1 - lw), lh lw (lh = h - floor h), a neighbour outside the image taking weight
  0 and the image's first value, summed w00 v00 + w01 v01 + w10 v10 + w11 v11 in that order, times the mask if
  there is one;
- Y_g = W_g [M / group, C / group * kH * kW] x col_g (MLAS's SGEMM, beta 0: the host's MLAS-ordered matmul,
  host_ops) for each group, then + B per output channel.

The column is one TE compute here (float arithmetic in onnxruntime's order), the products a relax.matmul, which
the host computes as MLAS on one thread does: bit for bit while MLAS runs the product on one thread (M N K below
its 65,536 per thread); a larger one onnxruntime splits along N across its threads, each part slicing K by its own
width, so its result depends on its thread count: within float rounding of it (host_ops._matmul_te)."""

from __future__ import annotations

from typing import Any


def _int_list(attrs: dict, name: str, default: list[int]) -> list[int]:
    return [int(v) for v in attrs.get(name, default)]


def deform_conv_convert(bb: Any, inputs: Any, attrs: dict) -> Any:
    """ONNX DeformConv (inputs X, W, offset, [B], [mask]) of float32 / float64 tensors as onnxruntime computes
    it (module docstring)."""
    from tvm import relax, te, tirx

    x, w, off = inputs[0], inputs[1], inputs[2]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    xs, ws, offs = ([int(d) for d in t.ty.shape] for t in (x, w, off))
    dtype = str(x.ty.dtype)
    if dtype not in ("float32", "float64"):
        raise ValueError(f"a {dtype} input (onnxruntime's DeformConv takes float32 and float64)")
    if len(xs) != 4 or len(ws) != 4:
        raise ValueError(f"an input of shape {xs} and weight {ws} (Tileplan computes 2-D DeformConv)")
    n_, c_, h_, w_ = xs
    m_, cg, kh, kw = ws
    kh, kw = _int_list(attrs, "kernel_shape", [kh, kw])
    if [kh, kw] != ws[2:]:
        raise ValueError(f"kernel_shape {[kh, kw]} for a weight of shape {ws}")
    group, ogroup = int(attrs.get("group", 1)), int(attrs.get("offset_group", 1))
    sh, sw = _int_list(attrs, "strides", [1, 1])
    dh, dw = _int_list(attrs, "dilations", [1, 1])
    pt, pl, pb, pr = _int_list(attrs, "pads", [0, 0, 0, 0])
    oh_ = (h_ + pt + pb - (dh * (kh - 1) + 1)) // sh + 1
    ow_ = (w_ + pl + pr - (dw * (kw - 1) + 1)) // sw + 1
    k_ = kh * kw
    if (c_ % group or m_ % group or cg * group != c_ or c_ % ogroup or oh_ < 1 or ow_ < 1
            or offs != [n_, ogroup * 2 * k_, oh_, ow_]):
        raise ValueError(f"shapes X {xs}, W {ws}, offset {offs} with group {group}, offset_group {ogroup} "
                         f"(output {oh_} x {ow_})")
    if mask is not None and [int(d) for d in mask.ty.shape] != [n_, ogroup * k_, oh_, ow_]:
        raise ValueError(f"a mask of shape {[int(d) for d in mask.ty.shape]} (expected {[n_, ogroup * k_, oh_, ow_]})")
    per_og = c_ // ogroup

    def compute(img: Any, o: Any, *mk: Any) -> Any:
        def f(n: Any, c: Any, i: Any, j: Any, y: Any, z: Any) -> Any:
            og = tirx.floordiv(c, per_og)
            kidx = i * kw + j
            base_h = (y * sh - pt + i * dh).astype(dtype)
            base_w = (z * sw - pl + j * dw).astype(dtype)
            him = base_h + o[n, og * 2 * k_ + 2 * kidx, y, z]
            wim = base_w + o[n, og * 2 * k_ + 2 * kidx + 1, y, z]
            one, zero = tirx.const(1.0, dtype), tirx.const(0.0, dtype)
            inside = tirx.all(him > -one, him < tirx.const(float(h_), dtype), wim > -one,
                              wim < tirx.const(float(w_), dtype))
            hf, wf = tirx.floor(him), tirx.floor(wim)
            hl = tirx.if_then_else(inside, hf.astype("int32"), 0)
            wl = tirx.if_then_else(inside, wf.astype("int32"), 0)
            lh, lw = him - hf, wim - wf
            hh, hw = one - lh, one - lw
            val = None
            for wt, hi, wi in ((hh * hw, hl, wl), (hh * lw, hl, wl + 1), (lh * hw, hl + 1, wl),
                               (lh * lw, hl + 1, wl + 1)):
                ok = tirx.all(inside, hi >= 0, hi < h_, wi >= 0, wi < w_)
                term = (tirx.if_then_else(ok, wt, zero)
                        * img[n, c, tirx.if_then_else(ok, hi, 0), tirx.if_then_else(ok, wi, 0)])
                val = term if val is None else val + term
            if mk:
                val = val * mk[0][n, og * k_ + kidx, y, z]
            return val

        return te.compute((n_, c_, kh, kw, oh_, ow_), f, name="deform_col")

    args = [x, off] + ([mask] if mask is not None else [])
    col = bb.emit(bb.call_te(compute, *args, primfunc_name_hint="deform_im2col"))
    kd = cg * k_
    col = bb.normalize(relax.op.reshape(col, (n_, group, kd, oh_ * ow_)))
    wg = bb.normalize(relax.op.reshape(w, (1, group, m_ // group, kd)))
    y = bb.normalize(relax.op.matmul(wg, col))
    y = bb.normalize(relax.op.reshape(y, (n_, m_, oh_, ow_)))
    if bias is not None:
        y = relax.op.add(y, relax.op.reshape(bias, (1, m_, 1, 1)))
    return y
