"""Make the small quantized ONNX model the README's `--model` examples plan.

    python examples/make_example_model.py                  # -> examples/models/small_cnn_int8.onnx

A CIFAR-sized CNN (3x32x32 input: three convolutions, global pooling, a fully connected layer) built with
`onnx.helper`, with seeded random weights, then quantized to int8 by onnxruntime's static quantizer in the QDQ
format (QuantizeLinear/DequantizeLinear pairs around each Conv and Gemm, as exported int8 models are), calibrated
on random inputs. Tileplan reads only its shapes, so random weights plan the same as trained ones.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "models" / "small_cnn_int8.onnx"
INPUT = "image"
INPUT_SHAPE = (1, 3, 32, 32)


def float_model(seed: int = 0) -> onnx.ModelProto:
    """The float32 model: conv3x3(3->16) relu, conv3x3/2(16->32) relu, conv1x1(32->64) relu, global average
    pool, flatten, gemm(64->10)."""
    rng = np.random.default_rng(seed)
    inits: list[TensorProto] = []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name))
        return name

    nodes = []
    x = INPUT
    for i, (cin, cout, k, stride) in enumerate([(3, 16, 3, 1), (16, 32, 3, 2), (32, 64, 1, 1)], start=1):
        pad = k // 2
        nodes.append(helper.make_node(
            "Conv", [x, weight(f"conv{i}.weight", (cout, cin, k, k)), weight(f"conv{i}.bias", (cout,))],
            [f"conv{i}"], name=f"conv{i}", kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4))
        nodes.append(helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"], name=f"relu{i}"))
        x = f"relu{i}"
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", weight("fc.weight", (10, 64)), weight("fc.bias", (10,))], ["logits"],
                         name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tileplan-example")
    model.ir_version = 8  # what onnxruntime's quantizer and older runtimes read
    onnx.checker.check_model(model)
    return model


class RandomCalibration:
    """onnxruntime's CalibrationDataReader protocol: a few random input batches."""

    def __init__(self, samples: int, seed: int) -> None:
        rng = np.random.default_rng(seed + 1)
        self._batches: Iterator[dict[str, np.ndarray]] = iter(
            [{INPUT: rng.standard_normal(INPUT_SHAPE).astype(np.float32)} for _ in range(samples)]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def make(out: Path = DEFAULT_OUT, seed: int = 0, samples: int = 8) -> Path:
    """Write the int8 QDQ model to `out` and return its path."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "small_cnn_fp32.onnx"
        onnx.save(float_model(seed), fp32)
        logging.disable(logging.WARNING)  # the quantizer's advice to pre-process (shape inference) a model this small
        try:
            quantize_static(
                str(fp32), str(out), RandomCalibration(samples, seed),  # type: ignore[arg-type]
                quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
            )
        finally:
            logging.disable(logging.NOTSET)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where to write it (default {DEFAULT_OUT.name})")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    path = make(args.out, args.seed)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
