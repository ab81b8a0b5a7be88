"""The zoo's models as a new user would make them (bench/zoo.py runs this with the bench-only Python that has
torch + torchvision + onnxruntime; never a Tileplan dependency):

    PY bench/zoo_export.py --out DIR resnet18 vit_b_16 bert_layer

Each model: seeded random weights, BatchNorm statistics from a few random forward passes in training mode
(cumulative averages), `torch.onnx.export` at opset 17, batch 1 (224 x 224 images; 128 tokens of width 768 for
the transformer blocks), nothing simplified or folded by hand; then onnxruntime's `quantize_static` (int8
activations and weights, per-tensor, MinMax on 8 seeded random inputs) in both of its formats. Writes
DIR/<name>.float.onnx, DIR/<name>.qdq.onnx and DIR/<name>.qoperator.onnx (existing files are kept) and prints
one line per model: name, then the three paths, or `name FAILED reason` when the export or the quantizer fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import numpy as np

VISION = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "regnet_x_400mf",
          "squeezenet1_0", "shufflenet_v2_x1_0", "densenet121", "googlenet", "convnext_tiny", "vit_b_16",
          "swin_t")
TRANSFORMERS = ("bert_layer", "gpt2_block")
BN_PASSES = 4
CALIBRATION = 8
SEQ, WIDTH, HEADS, FFN = 128, 768, 12, 3072


def _transformer(name: str) -> Any:
    """A BERT-base encoder layer (post-norm, GELU) or a GPT-2 block (pre-norm, GELU, causal self-attention)."""
    import torch

    gpt = name == "gpt2_block"
    layer = torch.nn.TransformerEncoderLayer(WIDTH, HEADS, FFN, dropout=0.0, activation="gelu", batch_first=True,
                                             norm_first=gpt)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer
            self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), 1) if gpt else None)

        def forward(self, x: Any) -> Any:
            return self.layer(x, src_mask=self.mask)

    return Block()


def _net(name: str) -> tuple[Any, tuple[int, ...]]:
    import torch
    import torchvision

    if name in TRANSFORMERS:
        return _transformer(name), (1, SEQ, WIDTH)
    kwargs = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    net = getattr(torchvision.models, name)(weights=None, **kwargs)
    for m in net.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum = None  # cumulative average over the passes below
    net.train()
    with torch.no_grad():
        for _ in range(BN_PASSES):
            net(torch.randn(2, 3, 224, 224))
    return net, (1, 3, 224, 224)


def export(name: str, out: Path, seed: int = 0) -> dict[str, Path]:
    import onnx
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    paths = {f: out / f"{name}.{f}.onnx" for f in ("float", "qdq", "qoperator")}
    if all(p.exists() for p in paths.values()):
        return paths
    torch.manual_seed(seed)
    net, shape = _net(name)
    net.eval()
    out.mkdir(parents=True, exist_ok=True)
    if not paths["float"].exists():
        # with gradients on: PyTorch's fused attention fast path (eval + no_grad) has no ONNX export
        torch.onnx.export(net, (torch.randn(*shape),), str(paths["float"]), opset_version=17, dynamo=False,
                          input_names=["input"], output_names=["output"])
        onnx.checker.check_model(str(paths["float"]))
    rng = np.random.default_rng(seed)
    feeds = [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(CALIBRATION)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    for fmt, qf in (("qdq", QuantFormat.QDQ), ("qoperator", QuantFormat.QOperator)):
        if paths[fmt].exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            dst = Path(tmp) / "quant.onnx"
            quantize_static(str(paths["float"]), str(dst), Reader(), quant_format=qf,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=False)
            tmp_out = paths[fmt].with_suffix(".tmp")
            tmp_out.write_bytes(dst.read_bytes())
            tmp_out.replace(paths[fmt])
    return paths


def main() -> None:
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's "consider pre-processing" advice
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", choices=VISION + TRANSFORMERS)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in args.models:
        try:
            paths = export(name, args.out, args.seed)
            print(name, paths["float"], paths["qdq"], paths["qoperator"], flush=True)
        except Exception as exc:  # noqa: BLE001 - reported per model, the others still export
            traceback.print_exc(file=sys.stderr)
            print(name, "FAILED", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                  flush=True)


if __name__ == "__main__":
    main()
