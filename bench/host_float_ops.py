"""Float ops the host runs, against onnxruntime's CPU kernels, bit for bit.

    PYTHONPATH=service python bench/host_float_ops.py [--out bench/results/host_float_ops.md]

A model's float units between DequantizeLinear and QuantizeLinear (what onnxruntime's quantizer leaves in float: a
QOperator export's HardSwish, Erf, Gelu, ...) run on the host, with onnxruntime's arithmetic where Tileplan states it
(LayerNorm, MatMul / Einsum, GridSample, ConvTranspose, HardSwish, ThresholdedRelu, and the transcendental ops and
Softmax through tileplan/frontend/ort_math.py: MLAS's and Eigen's approximations), else as TVM lowers them. A float result one ulp
from onnxruntime's is a different code only when it sits on a rounding boundary after the next QuantizeLinear, but
a deep net meets such boundaries: MobileNetV3-Large's HardSwish flipped one code of an SE mean and 42% of the
model's outputs moved (fixed). Per op: x [1, 256] -> QuantizeLinear -> DequantizeLinear -> op -> y (float), every
int8 code once as input, Tileplan's compiled program (`compile_model`, the emulator's host build) against
onnxruntime's default session; cells: outputs that differ (NaN = NaN), the largest absolute difference, and the
largest in ulps of the reference value where that is at least 1e-3 (ulps of values near 0 are meaningless). Then a
stricter sweep of values no int8 grid holds (a float op's input after another float op): 4,099 floats spread
uniformly over [-12, 12] ((0, 24] for Log, Sqrt, Reciprocal; seeded) through the same op, x -> Q -> DQ -> Mul by a
constant [1, 4099] (one code times the targets: an exact IEEE product on both sides) -> op; 4,099 = 3 mod 4, so
the last three are the elements Eigen-based kernels compute with the scalar function.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OPS: list[tuple[str, dict[str, object], int]] = [
    ("HardSwish", {}, 17), ("HardSigmoid", {}, 17), ("Relu", {}, 17), ("LeakyRelu", {}, 17), ("Abs", {}, 17),
    ("Sqrt", {}, 17), ("Reciprocal", {}, 17), ("Round", {}, 17), ("Floor", {}, 17), ("ThresholdedRelu", {}, 17),
    ("Sigmoid", {}, 17), ("Tanh", {}, 17), ("Erf", {}, 17), ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
    ("Softplus", {}, 17), ("Elu", {}, 17), ("Selu", {}, 17), ("Celu", {}, 17), ("Celu", {"alpha": 2.5}, 17), ("Exp", {}, 17), ("Log", {}, 17), ("Mish", {}, 18),
    ("Softsign", {}, 17), ("Sin", {}, 17), ("Cos", {}, 17), ("Softmax", {}, 13),
]


DENSE = 4099


def model(op: str, attrs: dict[str, object], opset: int, scale: float, zp: int,
          factors: np.ndarray | None = None) -> bytes:
    """x [1, n] -> Q -> DQ [-> Mul by `factors`, a constant [n]] -> op -> y; n = 256, or the factors' count."""
    from onnx import TensorProto, helper, numpy_helper

    n = 256 if factors is None else len(factors)
    consts: dict[str, np.ndarray] = {"s": np.asarray(np.float32(scale)), "z": np.asarray(np.int8(zp))}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
    src = "xd"
    if factors is not None:
        consts["f"] = factors.astype(np.float32).reshape(1, n)
        nodes.append(helper.make_node("Mul", ["xd", "f"], ["xm"]))
        src = "xm"
    nodes.append(helper.make_node(op, [src], ["y"], name="op", **attrs))
    g = helper.make_graph(nodes, "op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m.SerializeToString()


def cpu_name() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "-"
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "-")


def main() -> None:
    from tileplan.frontend.compile import CompileOptions, compile_model
    from tileplan.frontend.ort_math import exp_variant
    from tileplan.frontend.reference import reference_outputs
    from tileplan.frontend.runner import run_artifact
    from tileplan.hardware.catalog import get_hardware

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "host_float_ops.md")
    args = ap.parse_args()
    hw, opts = get_hardware("gemmini-16x16"), CompileOptions(time_limit_s=2.0)
    rows, t0, load = [], time.time(), os.getloadavg()[0]

    def compare(data: bytes, x: np.ndarray) -> tuple[int, float, float]:
        got = run_artifact(compile_model(data, hw, opts).artifact, {"x": x}).outputs["y"]
        want = reference_outputs(data, {"x": x}, "ort")["y"]
        differ = (got.view(np.uint32) != want.view(np.uint32)) & ~(np.isnan(got) & np.isnan(want))
        big = differ & (np.abs(want) >= 1e-3)
        ulps = np.abs(got - want)[big] / np.spacing(np.abs(want[big])) if big.any() else np.zeros(1)
        diff = float(np.abs(got - want)[differ].max()) if differ.any() else 0.0
        return int(differ.sum()), diff, float(ulps.max())

    for op, attrs, opset in OPS:
        positive = op in ("Log", "Sqrt", "Reciprocal")
        scale, zp = (0.05, -128) if positive else (0.05, 0)  # (positive inputs)
        x = ((np.arange(256, dtype=np.float32) - 128 - zp) * np.float32(scale)).reshape(1, 256)
        codes = compare(model(op, attrs, opset, scale, zp), x)
        targets = np.random.default_rng(1).uniform(0.0 if positive else -12.0, 24.0 if positive else 12.0, DENSE)
        factors = (targets.astype(np.float32) / np.float32(2.0)).astype(np.float32)  # code 40 at 0.05 is 2.0
        dense = compare(model(op, attrs, opset, 0.05, 0, factors), np.full((1, DENSE), 2.0, np.float32))
        name = op + (" " + ", ".join(f"{k}={v}" for k, v in attrs.items()) if attrs else "")
        rows.append((name, *codes, *dense))
        print(rows[-1], flush=True)
    lines = ["# Host float ops against onnxruntime, bit for bit", "",
             f"`PYTHONPATH=service python bench/host_float_ops.py` on {platform.machine()} ({platform.processor() or '-'}),"
             f" {time.strftime('%Y-%m-%d', time.gmtime())}, {time.time() - t0:.0f} s, load average {load:.1f} at the"
             " start (2 cores, shared; the cells do not depend on it).", "",
             (__doc__ or "").split("\n\n")[2].replace("\n", " "), "",
             f"CPU: {cpu_name()} (onnxruntime's MLAS Exp kernel here: {exp_variant()}).", "",
             "| op | codes: outputs of 256 that differ | largest difference | largest in ulps (reference >= 1e-3) "
             f"| dense: outputs of {DENSE:,} that differ | largest difference | largest in ulps |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {n} | {d} | {a:.3g} | {u:.0f} | {dd} | {da:.3g} | {du:.0f} |" for n, d, a, u, dd, da, du in rows]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
