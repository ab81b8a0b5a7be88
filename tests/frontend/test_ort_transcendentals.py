"""Float transcendental host ops as onnxruntime computes them, bit for bit (tileplan.frontend.ort_math).

A quantized model leaves Sigmoid (SiLU), Erf / Gelu (BERT, ViT), Tanh (GPT-2's Gelu), Softplus, Mish, ... in
float between DequantizeLinear and QuantizeLinear; one ulp from onnxruntime's result flips a code after the
next QuantizeLinear at a rounding boundary.  TVM's libm-style formulas differed from onnxruntime's MLAS / Eigen
approximations on 4-188 of the 256 int8 codes per op (bench/results/host_float_ops.md before this change)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from frontend_helpers import compile_bytes

from tileplan.frontend.reference import reference_outputs
from tileplan.frontend.runner import run_artifact

OPS = [("Sigmoid", {}, 17), ("Tanh", {}, 17), ("Erf", {}, 17), ("Gelu", {}, 20),
       ("Gelu", {"approximate": "tanh"}, 20), ("Exp", {}, 17), ("Log", {}, 17), ("Softplus", {}, 17),
       ("Elu", {"alpha": 0.7}, 17), ("Selu", {}, 17), ("Mish", {}, 18), ("Softsign", {}, 17), ("Sin", {}, 17),
       ("Cos", {}, 17), ("Celu", {"alpha": 2.5}, 17)]


def _model(op: str, attrs: dict[str, object], opset: int, n: int, scale: float, zp: int,
           factors: np.ndarray | None = None) -> bytes:
    """x [1, n] -> Q -> DQ [-> * factors] -> op -> y (float): the host's float result itself. `factors` (a
    float constant [1, n]): spreads one code's value over n dense floats (an exact IEEE product on both sides)."""
    from onnx import TensorProto, helper, numpy_helper

    consts: dict[str, np.ndarray] = {"s": np.asarray(np.float32(scale)), "z": np.asarray(np.int8(zp))}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
    src = "xd"
    if factors is not None:
        consts["f"] = factors.astype(np.float32).reshape(1, n)
        nodes.append(helper.make_node("Mul", ["xd", "f"], ["xm"]))
        src = "xm"
    nodes.append(helper.make_node(op, [src], ["y"], name="op", **attrs))
    graph = helper.make_graph(nodes, "op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model.SerializeToString()


def _differ(data: bytes, x: np.ndarray) -> str:
    got = run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"]
    want = reference_outputs(data, {"x": x}, "ort")["y"]
    differ = (got.view(np.uint32) != want.view(np.uint32)) & ~(np.isnan(got) & np.isnan(want))
    if not differ.any():
        return ""
    i = int(np.flatnonzero(differ.ravel())[0])
    return (f"{int(differ.sum())} of {differ.size} differ, e.g. element {i}: {got.ravel()[i]!r} vs onnxruntime's "
            f"{want.ravel()[i]!r}")


@pytest.mark.parametrize(("op", "attrs", "opset"), OPS, ids=[o + "".join(f"_{v}" for v in a.values())
                                                              for o, a, _ in OPS])
def test_every_int8_code_is_onnxruntimes(op: str, attrs: dict[str, object], opset: int) -> None:
    zp = -128 if op == "Log" else 0  # (positive inputs)
    x = ((np.arange(256, dtype=np.float32) - 128 - zp) * np.float32(0.05)).reshape(1, 256)
    problem = _differ(_model(op, attrs, opset, 256, 0.05, zp), x)
    assert not problem, problem


@pytest.mark.parametrize(("op", "attrs", "opset"), [OPS[i] for i in (0, 2, 5, 6, 7, 12)],
                         ids=["Sigmoid", "Erf", "Exp", "Log", "Softplus", "Sin"])
def test_dense_floats_are_onnxruntimes(op: str, attrs: dict[str, object], opset: int) -> None:
    """1,023 floats that no int8 grid holds (a float op's input after another float op), spread over [-12, 12]
    ((0, 24] for Log); 1,023 = 3 mod 4: the last three are the elements Eigen computes with the scalar
    function (Log, Softplus, Sin)."""
    n = 1023
    rng = np.random.default_rng(7)
    lo, hi = (0.0, 24.0) if op == "Log" else (-12.0, 12.0)
    targets = rng.uniform(lo, hi, n).astype(np.float32)
    targets[-3:] = np.float32([0.7312, 2.2461, 1.0371]) * (1 if op == "Log" else -1)
    factors = (targets / np.float32(2.0)).astype(np.float32)  # x's code 40 at scale 0.05 is 2.0 exactly
    x = np.full((1, n), 2.0, np.float32)
    problem = _differ(_model(op, attrs, opset, n, 0.05, 0, factors), x)
    assert not problem, problem


@pytest.mark.parametrize("shape", [[1, 256], [3, 1000], [2, 4, 77]], ids=["256", "3x1000", "2x4x77"])
def test_float_softmax_is_onnxruntimes(shape: list[int]) -> None:
    """A float Softmax over the last axis (rows of 77-1,000 dense floats: partial lanes of MLAS's sum): MLAS's
    sum-exp kernel's exp and summation order, then e * (1 / sum) (253 of 256, 3,000 of 3,000, 543 of 616 apart
    with TVM's softmax)."""
    from onnx import TensorProto, helper, numpy_helper

    n = int(np.prod(shape))
    factors = (np.random.default_rng(0).standard_normal(n) * 3).astype(np.float32).reshape(shape)
    consts = {"s": np.asarray(np.float32(0.05)), "z": np.asarray(np.int8(0)), "f": factors}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Mul", ["xd", "f"], ["xm"]), helper.make_node("Softmax", ["xm"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    problem = _differ(model.SerializeToString(), np.full(shape, 2.0, np.float32))
    assert not problem, problem


def test_the_other_exp_variant_would_differ_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Softmax tests above hold for the MLAS kernel `ort_math.exp_variant` picks from this CPU's flags; with the
    other kernel's arithmetic stated, a dense Softmax differs from onnxruntime's on this machine (on an AVX2-only
    AMD EPYC: forced AVX512F, 3,682 of 4,099 dense floats 1-2 ulps apart), so the choice is checked, not moot."""
    from tileplan.frontend import ort_math

    other = "fma3" if ort_math.exp_variant() == "avx512f" else "avx512f"
    monkeypatch.setattr(ort_math, "exp_variant", lambda: other)
    n = 1000
    factors = (np.random.default_rng(0).standard_normal(n) * 3).astype(np.float32)
    problem = _differ(_model("Softmax", {}, 13, n, 0.05, 0, factors), np.full((1, n), 2.0, np.float32))
    assert problem, f"the {other} kernel's Softmax equals onnxruntime's here too: the variant test is moot"


def test_thresholded_relu_zeros_are_positive() -> None:
    """onnxruntime's ThresholdedRelu selects 0.0 below alpha; TVM's (x > alpha) * x made -0.0 of a negative x
    (128 of 256 codes: equal values, other bits)."""
    x = ((np.arange(256, dtype=np.float32) - 128) * np.float32(0.05)).reshape(1, 256)
    problem = _differ(_model("ThresholdedRelu", {"alpha": 0.5}, 17, 256, 0.05, 0), x)
    assert not problem, problem


def test_helpers_twice_in_one_file_compile(tmp_path: Path) -> None:
    """compile.host_units concatenates host functions into one C file: two functions calling one helper carry its
    definition twice (ViT-B/16's twelve Erf units: redefinition errors before the guards)."""
    from tileplan.frontend import ort_math

    fn = ["float f{i}(float x) {{ return tp_ort_gelu_erf(x) + tp_ort_softplus(x, 0); }}"]
    text = "\n".join(["#include <math.h>", "#include <stdint.h>"]
                     + [line for i in range(2) for line in [*ort_math.definitions(fn[0]), fn[0].format(i=i)]])
    src = tmp_path / "unit.c"
    src.write_text(text + "\n")
    subprocess.run(["cc", "-c", "-O2", "-std=c11", "-Wall", "-Werror", "-o", str(tmp_path / "unit.o"), str(src)],
                   check=True, capture_output=True, text=True)


HELPER_CALLS = {"Sigmoid": "tp_ort_logistic(v)", "Tanh": "tp_ort_tanh(v)", "Erf": "tp_ort_erf(v)",
                "Gelu": "tp_ort_gelu_erf(v)", "Exp": "tp_ort_exp_{variant}(v)", "Log": "tp_ort_log(v, t)",
                "Softplus": "tp_ort_softplus(v, t)", "Elu": "tp_ort_elu(v, 1.0f, t)",
                "Selu": "tp_ort_selu(v, 1.67326319217681884765625f, 1.05070102214813232421875f, t)",
                "Mish": "v * tp_ort_tanh(tp_ort_softplus(v, t))", "Softsign": "tp_ort_softsign(v)",
                "Sin": "tp_ort_sin(v, t)", "Cos": "tp_ort_cos(v, t)"}


def test_helpers_are_onnxruntimes_on_a_dense_sweep(tmp_path: Path) -> None:
    """The C helpers alone (cc -std=c11, no TVM) on 200,017 floats: a dense sweep of [-30, 30], normal samples
    at two scales and the special values (+-0, +-inf, NaN, tiny, near the clamps), against onnxruntime on one
    thread (several threads split Eigen's ops into blocks whose ends it computes with the scalar function)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from tileplan.frontend import ort_math

    rng = np.random.default_rng(3)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 3.925, 9.0, 18.0, 88.72, 88.8, -87.4, -103.9,
               -104.5, 17.844]
    x = np.concatenate([np.linspace(-30, 30, 100001, dtype=np.float32), rng.standard_normal(80000) * 4,
                        rng.standard_normal(20000) * 1e-3, special]).astype(np.float32)
    n = len(x)  # 200,017 = 1 mod 4: the last element is one Eigen computes with the scalar function
    x.tofile(tmp_path / "x.bin")
    calls = {k: c.format(variant=ort_math.exp_variant()) for k, c in HELPER_CALLS.items()}
    body = "\n".join(f'  for (long i = 0; i < n; i++) {{ float v = x[i]; int t = i >= n - n % 4; y[i] = {c}; }}\n'
                     f'  f = fopen("{tmp_path}/{k}.bin", "wb"); fwrite(y, 4, n, f); fclose(f);'
                     for k, c in calls.items())
    src = "\n".join(["#include <math.h>", "#include <stdint.h>", "#include <stdio.h>", "#include <stdlib.h>",
                     *ort_math.definitions(" ".join(calls.values())),
                     f"int main(void) {{ long n = {n}; FILE *f = fopen(\"{tmp_path}/x.bin\", \"rb\");",
                     "  float *x = malloc(n * 4), *y = malloc(n * 4);",
                     "  if (fread(x, 4, n, f) != (size_t)n) return 1; fclose(f);", body, "  return 0; }"])
    (tmp_path / "sweep.c").write_text(src + "\n")
    subprocess.run(["cc", "-O2", "-std=c11", "-ffp-contract=off", "-o", str(tmp_path / "sweep"),
                    str(tmp_path / "sweep.c"), "-lm"], check=True, capture_output=True, text=True)
    subprocess.run([str(tmp_path / "sweep")], check=True)
    problems = []
    for op in calls:
        graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "op",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20 if op == "Gelu" else 18)])
        model.ir_version = 9
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        want = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0]
        got = np.fromfile(tmp_path / f"{op}.bin", np.float32)
        differ = (got.view(np.uint32) != want.view(np.uint32)) & ~(np.isnan(got) & np.isnan(want))
        if differ.any():
            i = int(np.flatnonzero(differ)[0])
            problems.append(f"{op}: {int(differ.sum())} differ, e.g. x = {x[i]!r}: {got[i]!r} vs {want[i]!r}")
    assert not problems, "; ".join(problems)


def test_softmax_of_infinite_rows_is_onnxruntimes() -> None:
    """Rows of -inf (GPT-2's masked scores behind an infinite scale: every code -128 dequantizes to -inf), a NaN
    and a +inf: onnxruntime returns NaN rows (its QuantizeLinear then the minimum code); Tileplan's maximum started
    from the lowest finite float, so a row of -inf came out uniform (1/128, two codes above). And x - max from -80
    to -inf: onnxruntime's exponentials reach the subnormals and 0 (clamped at -103.97, not -88.38)."""
    from onnx import TensorProto, helper, numpy_helper

    low = [0.0, -80, -88, -88.3, -88.4, -89, -90, -95, -100, -103, -103.9, -104, -110, -150, -np.inf, 0.0]
    rows = np.array([[-np.inf] * 128, [np.nan] + [1.0] * 127, [1.0] * 127 + [np.inf], low * 8], np.float32)
    consts = {"s": np.asarray(np.float32(0.05)), "z": np.asarray(np.int8(0)), "f": rows}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Mul", ["xd", "f"], ["xm"]), helper.make_node("Softmax", ["xm"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 128])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 128])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    problem = _differ(model.SerializeToString(), np.full((4, 128), 2.0, np.float32))
    assert not problem, problem
