"""Compare a compiled model's output (`tileplan run ... --output out.npy`) with onnxruntime's on the same input.

    python examples/compare_with_onnxruntime.py examples/models/small_cnn_int8.onnx in.npy out.npy

Prints the largest difference and how many outputs agree exactly; exits 1 when an output differs by more than
`--tolerance` (default: two steps of the output's quantization, the bound the tests hold compiled models to).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that produces the graph's output (1.0 for an integer output)."""
    out = model.graph.output[0].name
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and out in node.output and node.input[1] in inits:
            return float(numpy_helper.to_array(inits[node.input[1]]).max())
    return 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the ONNX model that was compiled")
    ap.add_argument("input", help="the input given to `tileplan run` (.npy)")
    ap.add_argument("output", help="what `tileplan run --output` wrote (.npy)")
    ap.add_argument("--tolerance", type=float, default=None, help="largest allowed |difference| (default: 2 steps)")
    args = ap.parse_args()
    model = onnx.load(args.model)
    session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    x = np.load(args.input)
    want = session.run(None, {session.get_inputs()[0].name: x})[0]
    got = np.load(args.output)
    if got.shape != want.shape:
        print(f"shapes differ: tileplan {got.shape}, onnxruntime {want.shape}", file=sys.stderr)
        return 1
    step = output_step(model)
    tolerance = args.tolerance if args.tolerance is not None else 2 * step + 1e-6
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    print(f"{diff.size} outputs: {int((diff == 0).sum())} equal to onnxruntime's, {int((diff <= step + 1e-6).sum())} "
          f"within one quantization step ({step:g}), largest difference {diff.max():g} (allowed {tolerance:g})")
    return 0 if diff.max() <= tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
