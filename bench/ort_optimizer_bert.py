"""A BERT file as a user who ran onnxruntime's transformer optimizer and then its static quantizer has it, compiled
by Tileplan and compared with onnxruntime, every fused operator's output included.

    # 1. the file (a bench venv with torch, onnx, onnxruntime): a 2-layer BERT (hidden 64, 4 heads, sequence 16)
    #    exported by torch.onnx, fused by onnxruntime.transformers.optimizer (model_type bert, opt_level 0), quantized by
    #    quantize_static (QDQ, int8, 4 random calibration batches)
    BENCH_VENV/bin/python bench/ort_optimizer_bert.py --make DIR
    # 2. compile and judge (the project's venv)
    PYTHONPATH=service python bench/ort_optimizer_bert.py --judge DIR [--out bench/results/ort_optimizer_bert.md]

The judged file keeps every fused node's first output as a graph output too, so each is compared: bits that
differ from onnxruntime's default session (`ort`) and from onnxruntime with graph optimisations off (`ort-noopt`,
the file's operators as written), on 3 random token batches with 0, 3 and 6 padded positions.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

H, HEADS, LAYERS, SEQ, VOCAB = 64, 4, 2, 16, 100
FUSED = ("EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu", "MatMul")


def make(out: Path) -> None:
    import onnx
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.transformers import optimizer
    from torch import nn

    torch.manual_seed(0)

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(H, H) for _ in range(4))
            self.ln = nn.LayerNorm(H, eps=1e-12)

        def heads(self, x: torch.Tensor) -> torch.Tensor:
            b, n, _ = x.shape
            return x.view(b, n, HEADS, H // HEADS).permute(0, 2, 1, 3)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(H // HEADS) + mask, -1)
            c = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
            return self.ln(self.o(c.view(c.shape[0], c.shape[1], H)) + x)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn, self.up, self.down = SelfAttention(), nn.Linear(H, 4 * H), nn.Linear(4 * H, H)
            self.ln = nn.LayerNorm(H, eps=1e-12)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            a = self.attn(x, mask)
            return self.ln(self.down(nn.functional.gelu(self.up(a))) + a)

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word, self.pos, self.segment = nn.Embedding(VOCAB, H), nn.Embedding(SEQ, H), nn.Embedding(2, H)
            self.ln = nn.LayerNorm(H, eps=1e-12)
            self.layers = nn.ModuleList([Layer() for _ in range(LAYERS)])

        def forward(self, ids: torch.Tensor, types: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
            x = self.ln(self.word(ids) + self.pos(torch.arange(ids.shape[1]).unsqueeze(0)) + self.segment(types))
            mask = (1.0 - attention[:, None, None, :].float()) * -10000.0
            for layer in self.layers:
                x = layer(x, mask)
            return x

    out.mkdir(parents=True, exist_ok=True)
    ids = torch.randint(0, VOCAB, (1, SEQ))
    torch.onnx.export(Bert().eval(), (ids, torch.zeros_like(ids), torch.ones_like(ids)), str(out / "bert.onnx"),
                      input_names=["input_ids", "token_type_ids", "attention_mask"], output_names=["out"],
                      opset_version=17, dynamo=False)
    opt = optimizer.optimize_model(str(out / "bert.onnx"), model_type="bert", num_heads=HEADS, hidden_size=H,
                                   opt_level=0)  # its Python fusions alone (1+: onnxruntime rewrites after them)
    opt.save_model_to_file(str(out / "bert_opt.onnx"))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.data = iter([{"input_ids": rng.integers(0, VOCAB, (1, SEQ)).astype(np.int64),
                               "token_type_ids": np.zeros((1, SEQ), np.int64),
                               "attention_mask": np.ones((1, SEQ), np.int64)} for _ in range(4)])

        def get_next(self) -> dict | None:
            return next(self.data, None)

    quantize_static(str(out / "bert_opt.onnx"), str(out / "bert_opt_qdq.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    print(Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}"
                  for n in onnx.load(str(out / "bert_opt_qdq.onnx")).graph.node))


def judge(work: Path, out: Path) -> None:
    import onnx
    import onnxruntime as ort

    from tileplan.frontend.compile import CompileOptions, compile_model
    from tileplan.frontend.reference import reference_outputs
    from tileplan.frontend.runner import run_artifact
    from tileplan.hardware.catalog import get_hardware

    model = onnx.load(str(work / "bert_opt_qdq.onnx"))
    ops = Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in model.graph.node)
    have = {o.name for o in model.graph.output}
    for n in model.graph.node:  # every fused node's first output judged too
        if n.op_type in FUSED and n.output[0] not in have:
            model.graph.output.append(onnx.helper.make_tensor_value_info(n.output[0], 1, None))
            have.add(n.output[0])
    feeds0 = {"input_ids": np.zeros((1, SEQ), np.int64), "token_type_ids": np.zeros((1, SEQ), np.int64),
              "attention_mask": np.ones((1, SEQ), np.int64)}
    for o, v in zip(model.graph.output, ort.InferenceSession(model.SerializeToString(),
                                                             providers=["CPUExecutionProvider"]).run(None, feeds0)):
        o.type.tensor_type.ClearField("shape")
        for d in v.shape:
            o.type.tensor_type.shape.dim.add().dim_value = int(d)
    data = model.SerializeToString()
    t0 = time.time()
    res = compile_model(data, get_hardware("gemmini-16x16"), CompileOptions(time_limit_s=1.0),
                        input_shapes={k: [1, SEQ] for k in feeds0})
    compile_s = time.time() - t0
    producer = {o: n for n in model.graph.node for o in n.output}
    rows: dict[tuple[str, str], list[int]] = {}
    rng = np.random.default_rng(0)
    for trial in range(3):
        feeds = {"input_ids": rng.integers(0, VOCAB, (1, SEQ)).astype(np.int64),
                 "token_type_ids": rng.integers(0, 2, (1, SEQ)).astype(np.int64),
                 "attention_mask": np.concatenate([np.ones((1, SEQ - 3 * trial), np.int64),
                                                   np.zeros((1, 3 * trial), np.int64)], 1)}
        got = run_artifact(res.artifact, feeds).outputs
        for j in ("ort", "ort-noopt"):
            for name, want in reference_outputs(data, feeds, j).items():
                differ = int((got[name].view(np.uint32) != want.view(np.uint32)).sum())
                key = (name, j)
                rows[key] = [rows.get(key, [0, 0])[0] + differ, rows.get(key, [0, 0])[1] + want.size]
    lines = ["# onnxruntime's transformer optimizer's BERT, quantized, compiled by Tileplan",
             "",
             f"`PYTHONPATH=service python bench/ort_optimizer_bert.py --judge DIR` (DIR from `--make`, module "
             f"docstring), {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, "
             f"{platform.processor() or platform.machine()}; compile {compile_s:.1f} s.",
             "",
             "The file's operators: " + ", ".join(f"{v} {k}" for k, v in sorted(ops.items())) + ".",
             "",
             "Bits of each output that differ from onnxruntime's (3 token batches; 0, 3, 6 padded positions). "
             "The quantizer wrote DequantizeLinear on the weights only (the MatMuls' activations are the fused "
             "nodes' float outputs); onnxruntime's default session fuses each such DequantizeLinear -> MatMul into "
             "a com.microsoft MatMulNBits (its saved optimized graph has 6), whose kernel computes otherwise than "
             "the float MatMul the file states: `ort` differs from the first MatMul on, `ort-noopt` (the file's "
             "operators) is what Tileplan computes.",
             "",
             "| output | produced by | differ from `ort` | differ from `ort-noopt` |",
             "|---|---|---|---|"]
    for name in [o.name for o in model.graph.output]:
        a, b = rows[(name, "ort")], rows[(name, "ort-noopt")]
        lines.append(f"| {name} | {producer[name].op_type} | {a[0]} of {a[1]} | {b[0]} of {b[1]} |")
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make", type=Path, help="write the files into this directory (bench venv)")
    ap.add_argument("--judge", type=Path, help="compile and judge the files of this directory")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results/ort_optimizer_bert.md")
    args = ap.parse_args()
    if args.make:
        make(args.make)
    if args.judge:
        judge(args.judge, args.out)
    if not (args.make or args.judge):
        ap.print_help()
        sys.exit(2)


if __name__ == "__main__":
    main()
