"""torchvision networks as quantized ONNX models for the whole-model benches (bench/fusion.py).

Run with the bench-only Python that has torch + torchvision + onnxruntime (never a Tileplan dependency):

    PY bench/torch_models.py --out DIR mobilenet_v2 resnet18

Each model: torchvision's architecture with seeded random weights, BatchNorm statistics from a few random forward
passes in training mode (cumulative averages, so the folded scales are realistic rather than 1), exported at
batch 1, 3 x SIZE x SIZE, opset 17, then onnxruntime's `quantize_static` (QDQ, int8 activations and weights,
per-tensor, MinMax calibration on seeded random inputs). Writes DIR/<name>_<size>.onnx and prints the path; an
existing file is kept (delete it to export again). The same arguments give the same model bytes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ARCHS = ("mobilenet_v2", "resnet18")
BN_PASSES = 4
CALIBRATION = 8


def export(name: str, out: Path, size: int = 224, seed: int = 0, symmetric: bool = False) -> Path:
    import onnx
    import torch
    import torchvision
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    path = out / f"{name}_{size}{'_sym' if symmetric else ''}.onnx"  # symmetric: ActivationSymmetric
    if path.exists():
        return path
    torch.manual_seed(seed)
    net = getattr(torchvision.models, name)(weights=None)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None  # cumulative average over the passes below
    net.train()
    with torch.no_grad():
        for _ in range(BN_PASSES):
            net(torch.randn(8, 3, size, size))
    net.eval()
    rng = np.random.default_rng(seed)
    feeds = [{"input": rng.standard_normal((1, 3, size, size)).astype(np.float32)} for _ in range(CALIBRATION)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "quant.onnx"
        torch.onnx.export(net, (torch.randn(1, 3, size, size),), str(src), opset_version=17, dynamo=False,
                          input_names=["input"], output_names=["output"], do_constant_folding=True)
        onnx.checker.check_model(str(src))
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=False,
                        extra_options={"ActivationSymmetric": symmetric})
        out.mkdir(parents=True, exist_ok=True)
        tmp_out = path.with_suffix(".tmp")
        tmp_out.write_bytes(dst.read_bytes())
        tmp_out.replace(path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", choices=ARCHS)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--symmetric", action="store_true", help="activations with zero points 0 (ActivationSymmetric)")
    args = ap.parse_args()
    for name in args.models:
        print(export(name, args.out, args.size, args.seed, args.symmetric))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
