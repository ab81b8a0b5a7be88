"""Fused-layer groups (tileplan.fusion, option `fusion: auto | off`): which ops form a group, the group's tile and
halos, why a group keeps the per-layer program, and that `fusion: off` is today's program."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from typing import Any

import pytest
from frontend_helpers import OPTIONS, compile_bytes
from pydantic import ValidationError

from tileplan.frontend import zoo
from tileplan.frontend.compile import CompileOptions
from tileplan.fusion import tiling
from tileplan.workload import Conv2dLayer


def _chain(relu: str = "", k: int = 1) -> object:
    """expand 1x1 -> 3x3 depthwise -> project 1x1 with no activations between (a chain onnxruntime quantizes
    without host ops between, symmetric or not), then a dense layer.  k = 3: a 3x3 conv instead of the expand
    (MobileNetV2's stem before its first depthwise)."""
    g = zoo._Graph(3)
    y = g.conv("input", 8, 24, k=k, relu=relu, name="expand")
    y = g.conv(y, 24, 24, group=24, relu=relu, name="dw")
    y = g.conv(y, 24, 8, k=1, relu=relu, name="project")
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y], "gap")], "flatten")
    y = g.dense(y, 8, 4, name="fc")
    return g.model("chain", {"input": [1, 8, 8, 8]}, y, [1, 4])


@pytest.fixture(scope="module")
def chain_asymmetric() -> bytes:
    return zoo.quantize(_chain())


@pytest.fixture(scope="module")
def chain_symmetric() -> bytes:
    return zoo.quantize(_chain(), symmetric=True)


def _files(artifact: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(artifact)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]



def _same_outputs(on: Any, off: Any, shape: tuple[int, ...], seed: int) -> None:
    """The fused and the unfused program give the same bytes on three random inputs of growing range."""
    import numpy as np

    from tileplan.frontend.runner import run_artifact

    rng = np.random.default_rng(seed)
    for trial in range(3):
        x = (rng.standard_normal(shape) * (1 + trial)).astype(np.float32)
        a, b = run_artifact(on.artifact, {"input": x}), run_artifact(off.artifact, {"input": x})
        for k in b.outputs:
            np.testing.assert_array_equal(a.outputs[k], b.outputs[k])

def test_the_option_is_validated() -> None:
    assert CompileOptions().fusion == "auto"
    with pytest.raises(ValidationError) as exc:
        CompileOptions(fusion="on")  # type: ignore[arg-type]
    assert exc.value.errors()[0]["loc"] == ("fusion",)


def test_the_cli_flag_is_validated(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = tmp_path / "m.onnx"
    model.write_bytes(b"unused")
    proc = subprocess.run([sys.executable, "-m", "tileplan.cli", "compile", str(model), "--hw", "gemmini-16x16",
                           "--out", str(tmp_path / "out"), "--fusion", "sometimes"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--fusion" in proc.stderr and not (tmp_path / "out").exists()


def test_halos_walk_back_through_the_chain() -> None:
    convs = [Conv2dLayer(name=f"c{i}", in_channels=16, out_channels=16, in_h=32, in_w=32, kernel=(3, 3),
                         padding=(1, 1), stride=(2, 2) if i == 1 else (1, 1)) for i in range(3)]
    convs[2] = Conv2dLayer(name="c2", in_channels=16, out_channels=16, in_h=16, in_w=16, kernel=(3, 3),
                           padding=(1, 1))
    bs = tiling.bands(convs, 4)
    # the last op's band of 4 rows reads 6 of c1's output rows (advancing by 4: a halo of 2); c1 is strided, so
    # those 6 rows read 13 of c0's rows, advancing by 8 (a halo of 5)
    assert [(b.rows_needed, b.rows_advance, b.halo) for b in bs] == [(13, 8, 5), (6, 4, 2), (4, 4, 0)]


def test_a_small_budget_splits_the_output_into_bands_and_keeps_halos() -> None:
    convs = [Conv2dLayer(name=f"c{i}", in_channels=32, out_channels=32, in_h=32, in_w=32, kernel=(3, 3),
                         padding=(1, 1)) for i in range(2)]
    whole = tiling.choose(convs, 16, 256 * 1024, 64 * 1024)
    # the accumulator holds 2 halves x 16 rows x 32 columns x 16 channels x 4 B = 64 KiB: c0's 16 rows (a band of
    # 14 of the last op's rows and their halo of 2)
    assert whole is not None and whole.rows == 14 and whole.bands == 3 and whole.members[0].rows_needed == 16
    assert whole.spad_bytes <= 256 * 1024 and whole.acc_bytes == 64 * 1024
    assert whole.strategy == "keep" and whole.members[0].halo == 2 and "recomputing" in whole.notes[0]
    assert tiling.choose(convs, 16, 4 * 1024, 64 * 1024) is None  # the weights alone do not fit


def test_zero_points_keep_the_per_layer_program(chain_asymmetric: bytes) -> None:
    res = compile_bytes(chain_asymmetric, options=OPTIONS.model_copy(update={"emulate": False}))
    groups = res.summary["groups"]
    assert [g["members"] for g in groups] == [["expand", "dw", "project"]]
    g = groups[0]
    assert not g["fused"] and "zero point" in g["reason"] and g["kind"] == "inverted_residual"
    # per-layer: expand's and dw's int32 accumulators written, the host's int8 requantization of each read back
    assert g["intermediate_bytes"] == (24 * 64 * 4 + 24 * 64) * 2
    assert g["bytes_fused"] == g["bytes_unfused"] - g["intermediate_bytes"]
    assert g["cycles_model_fused"] < g["cycles_model_unfused"]
    by = {o["name"]: o for o in res.summary["ops"]}
    assert [by[n]["fusion_group"] for n in ("expand", "dw", "project", "fc")] == [0, 0, 0, None]
    assert res.summary["total"]["fusion"]["fused_groups"] == 0
    from tileplan.cli import _summary_table  # tileplan compile's per-op table lists the groups after the ops

    table = _summary_table(res.summary)
    assert "fused-layer groups: 1, fused 0" in table and "[0] expand -> dw -> project" in table


def test_a_symmetric_inverted_residual_is_one_fused_kernel(chain_symmetric: bytes) -> None:
    """Symmetric activations: expand -> depthwise -> project is one fused kernel (ir_kernel; each layer reads the
    previous one's accumulator rows through the scale unit).  Outputs equal to fusion off, fewer DRAM bytes and
    cycles."""


    on = compile_bytes(chain_symmetric)
    off = compile_bytes(chain_symmetric, options=OPTIONS.model_copy(update={"fusion": "off"}))
    (g,) = on.summary["groups"]
    assert g["members"] == ["expand", "dw", "project"] and g["fused"], g["reason"]
    assert g["intermediate_bytes"] == 2 * 24 * 64 * 2  # int8 out of two mvouts, each read once
    _same_outputs(on, off, (1, 8, 8, 8), seed=3)  # (its first input is the one these tests drew before)
    assert on.summary["total"]["dram_bytes_emulated"] < off.summary["total"]["dram_bytes_emulated"]
    assert on.summary["total"]["cycles_emulated"] < off.summary["total"]["cycles_emulated"]


def test_a_depthwise_after_a_3x3_conv_fuses_with_its_project() -> None:
    """A 3x3 conv before the depthwise (MobileNetV2's stem) is no expand: the depthwise -> project pair is one
    fused kernel (dw_kernel; the project reads the depthwise's accumulator rows through the scale unit), the conv
    keeps its per-layer kernel.  Outputs equal to fusion off, fewer DRAM bytes and cycles."""


    data = zoo.quantize(_chain(k=3), symmetric=True)
    on = compile_bytes(data)
    off = compile_bytes(data, options=OPTIONS.model_copy(update={"fusion": "off"}))
    (g,) = on.summary["groups"]
    assert g["members"] == ["dw", "project"] and g["fused"], g["reason"]
    assert g["intermediate_bytes"] == 24 * 64 * 2  # int8 out of the depthwise's mvout, read once
    _same_outputs(on, off, (1, 8, 8, 8), seed=3)  # (its first input is the one these tests drew before)
    assert on.summary["total"]["dram_bytes_emulated"] < off.summary["total"]["dram_bytes_emulated"]
    assert on.summary["total"]["cycles_emulated"] < off.summary["total"]["cycles_emulated"]


def test_an_exact_host_relu_between_symmetric_ops_is_absorbed() -> None:
    """With symmetric activations onnxruntime keeps each Relu between two quantize / dequantize pairs of one
    scale: max(q, 0) in int8, the producer's RELU, so the chain holds (and the fused pair runs it on chip)."""
    res = compile_bytes(zoo.quantize(_chain("relu"), symmetric=True),
                        options=OPTIONS.model_copy(update={"emulate": False}))
    hosts = {o["name"] for o in res.summary["ops"] if o["where"] == "host" and o["onnx_op"] == "Relu"}
    assert len(hosts) == 3  # (the summary lists them; the program runs the one between dw and project on chip)
    (g,) = res.summary["groups"]
    assert g["members"] == ["expand", "dw", "project"] and g["fused"], g["reason"]
    assert res.summary["total"]["fusion_blocked"] == []
    files = _files(res.artifact)
    glue = next(v for n, v in files.items() if n.endswith("model.c")).decode()
    assert "tpf_group_0" in glue and "tpk_dw" not in glue and "tpk_project" not in glue and "tpk_expand" not in glue


def test_host_ops_between_two_offloaded_ops_are_reported() -> None:
    """Relus kept with asymmetric activations (zero point -128) are not max(q, 0): the chain breaks there."""
    res = compile_bytes(zoo.quantize(_chain("relu"), keep_activations=True),
                        options=OPTIONS.model_copy(update={"emulate": False}))
    assert res.summary["groups"] == []
    blocked = res.summary["total"]["fusion_blocked"]
    assert {(b["from"], b["to"]) for b in blocked} == {("expand", "dw"), ("dw", "project")}
    assert all(b["host_ops"] == ["Relu"] for b in blocked)


def test_fusion_off_is_todays_program(chain_asymmetric: bytes) -> None:
    on = compile_bytes(chain_asymmetric)
    off = compile_bytes(chain_asymmetric, options=OPTIONS.model_copy(update={"fusion": "off"}))
    assert off.summary["groups"] == [] and off.summary["total"]["fusion"]["mode"] == "off"
    a, b = _files(on.artifact), _files(off.artifact)
    assert a.keys() == b.keys()
    # the same kernels, glue, weights and README: only the manifest's summary (groups, options) differs
    assert [n for n in a if a[n] != b[n]] == [n for n in a if n.endswith("tileplan.json")]
    assert on.summary["total"]["cycles_emulated"] == off.summary["total"]["cycles_emulated"]
    doc = json.loads(a[next(n for n in a if n.endswith("tileplan.json"))])
    assert doc["summary"]["groups"][0]["cycles_emulated_unfused"] == sum(
        o["cycles_emulated"] for o in on.summary["ops"] if o.get("fusion_group") == 0)


def _pointwise(relu: str = "relu") -> object:
    """Two 1x1 convs (widen, then narrow: one group) with a Relu each, then a dense layer."""
    g = zoo._Graph(5)
    y = g.conv("input", 16, 48, k=1, relu=relu, name="pw1")
    y = g.conv(y, 48, 24, k=1, relu=relu, name="pw2")
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y], "gap")], "flatten")
    y = g.dense(y, 24, 4, name="fc")
    return g.model("pw", {"input": [2, 16, 12, 12]}, y, [2, 4])


def test_a_symmetric_pointwise_chain_is_fused_and_bit_identical() -> None:
    """Two 1x1 convs with symmetric activations: one fused kernel (the intermediate read by the second conv from
    the accumulator through the scale unit), the host Relu between absorbed; every output equal to the per-layer
    program's on random inputs, fewer DRAM bytes and cycles."""


    data = zoo.quantize(_pointwise(), symmetric=True)
    on = compile_bytes(data)
    off = compile_bytes(data, options=OPTIONS.model_copy(update={"fusion": "off"}))
    (g,) = on.summary["groups"]
    assert g["members"] == ["pw1", "pw2"] and g["fused"], g["reason"]
    files = _files(on.artifact)
    glue = next(v for n, v in files.items() if n.endswith("model.c")).decode()
    assert "tpf_group_0" in glue and "tpk_pw1" not in glue and "tpk_pw2" not in glue
    glue_off = _files(off.artifact)[next(n for n in files if n.endswith("model.c"))].decode()
    # pw1, the host Relu between and pw2 are one step: the Relu ran on chip
    assert glue_off.count("TP_MARK(") - glue.count("TP_MARK(") == 2
    _same_outputs(on, off, (2, 16, 12, 12), seed=0)
    assert g["dram_bytes_emulated_fused"] < sum(o["dram_bytes_emulated"] for o in off.summary["ops"]
                                                if o["name"] in ("pw1", "pw2"))
    assert on.summary["total"]["dram_bytes_emulated"] < off.summary["total"]["dram_bytes_emulated"]
    assert on.summary["total"]["cycles_emulated"] < off.summary["total"]["cycles_emulated"]
    # the program's modelled cycles count the fused kernel's, not its members' per-layer ones
    assert on.summary["total"]["cycles_model"] == pytest.approx(
        off.summary["total"]["cycles_model"] - g["cycles_model_unfused"] + g["cycles_model_fused"], abs=0.2)
    from tileplan.cli import _summary_table

    assert f"(emulated {g['cycles_emulated_fused']}, {g['dram_bytes_emulated_fused']} B)" in _summary_table(on.summary)
    g_off = {**g, "fused": False, "cycles_emulated_fused": None, "cycles_emulated_unfused": 7,
             "dram_bytes_emulated_unfused": 9}
    assert "(emulated per-layer 7, 9 B)" in _summary_table({**on.summary, "groups": [g_off]})


def test_an_asymmetric_pointwise_chain_keeps_the_per_layer_program() -> None:
    """With onnxruntime's default zero points the intermediate is requantized on the host: not fused."""
    res = compile_bytes(zoo.quantize(_pointwise("")), options=OPTIONS.model_copy(update={"emulate": False}))
    (g,) = res.summary["groups"]
    assert not g["fused"] and "zero point" in g["reason"], g["reason"]


def test_a_relu6_clip_with_constant_node_bounds_is_absorbed() -> None:
    """torch's exporter gives Clip its bounds as Constant nodes, not initializers (torchvision's MobileNetV2: all 34
    ReLU6); a ReLU6 whose 6.0 quantizes to 127 is absorbed all the same, and the fused pair equals the per-layer
    program."""
    import onnx
    from onnx import helper, numpy_helper


    model = onnx.load_from_string(zoo.quantize(_chain("relu6"), symmetric=True))
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    bounds = {i for n in g.node if n.op_type == "Clip" for i in n.input[1:] if i in inits}
    assert bounds  # the zoo writes them as initializers: turn them into Constant nodes
    consts = [helper.make_node("Constant", [], [b], name=f"const_{b}", value=inits[b]) for b in sorted(bounds)]
    keep = [t for t in g.initializer if t.name not in bounds]
    del g.initializer[:]
    g.initializer.extend(keep)
    nodes = consts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    assert all(float(numpy_helper.to_array(c.attribute[0].t)) in (0.0, 6.0) for c in consts)
    data = model.SerializeToString()
    on = compile_bytes(data)
    off = compile_bytes(data, options=OPTIONS.model_copy(update={"fusion": "off"}))
    (grp,) = on.summary["groups"]
    assert grp["members"] == ["expand", "dw", "project"] and grp["fused"], grp["reason"]
    assert on.summary["total"]["fusion_blocked"] == []
    _same_outputs(on, off, (1, 8, 8, 8), seed=1)


def _inverted_residual(c1: int, c: int, k2: int, hw: int, stride: int, relu: str = "relu6", n: int = 1) -> object:
    """expand 1x1 (c1 -> c) -> 3x3 depthwise (stride) -> project 1x1 (c -> k2), ReLU6 after the first two (as
    MobileNetV2), then a dense layer."""
    g = zoo._Graph(11)
    y = g.conv("input", c1, c, k=1, relu=relu, name="expand")
    y = g.conv(y, c, c, stride=stride, group=c, relu=relu, name="dw")
    y = g.conv(y, c, k2, k=1, relu="", name="project")
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y], "gap")], "flatten")
    y = g.dense(y, k2, 4, name="fc")
    return g.model("ir", {"input": [n, c1, hw, hw]}, y, [n, 4])


@pytest.mark.parametrize("c1,c,k2,hw,stride", [(8, 40, 8, 40, 2), (24, 48, 24, 30, 1), (160, 960, 160, 7, 1)])
def test_a_symmetric_inverted_residual_fuses_all_three_convs(c1: int, c: int, k2: int, hw: int, stride: int
                                                            ) -> None:
    """expand -> depthwise -> project as one kernel (ir_kernel): the expanded tensor stays in the accumulator,
    read by the depthwise through windows of rows (padding rows zero, halo rows recomputed per band), its output
    read by the project.  Several bands, partial channel blocks; outputs equal to the per-layer program's, fewer
    DRAM bytes and cycles, and the cost model scores the fused kernel as the emulator runs it (within 10%)."""
    data = zoo.quantize(_inverted_residual(c1, c, k2, hw, stride), symmetric=True)
    on = compile_bytes(data)
    off = compile_bytes(data, options=OPTIONS.model_copy(update={"fusion": "off"}))
    (g,) = on.summary["groups"]
    assert g["members"] == ["expand", "dw", "project"] and g["fused"], g["reason"]
    if c != 960:  # more than one band: halos recomputed across bands
        assert g["band_output_rows"] < hw // stride
    else:  # the weights do not fit the scratchpad at once: each channel block's loaded per band (one band here)
        from tileplan.fusion import ir_kernel

        assert ir_kernel.footprint(ir_kernel.IrShape(1, c1, c, hw, hw, 3, 3, 1, 1, 1, hw, hw, k2), 16, 1, True,
                                   1)[0] > 16384
    _same_outputs(on, off, (1, c1, hw, hw), seed=stride)
    per_layer = sum(o["dram_bytes_emulated"] for o in off.summary["ops"] if o["name"] in g["members"])
    # (at 7x7 x 960 channels the weights dominate: the fused kernel's are padded to whole diagonal blocks)
    assert g["dram_bytes_emulated_fused"] < (0.6 if c != 960 else 0.8) * per_layer
    assert on.summary["total"]["cycles_emulated"] < off.summary["total"]["cycles_emulated"]
    assert g["cycles_model_fused"] == pytest.approx(g["cycles_emulated_fused"], rel=0.10)


def test_a_fused_inverted_residual_runs_a_batch() -> None:
    """Two images through the fused inverted residual (stride 2, odd size): equal to the per-layer program."""
    data = zoo.quantize(_inverted_residual(16, 32, 16, 15, 2, n=2), symmetric=True)
    on = compile_bytes(data)
    off = compile_bytes(data, options=OPTIONS.model_copy(update={"fusion": "off"}))
    (g,) = on.summary["groups"]
    assert g["members"] == ["expand", "dw", "project"] and g["fused"], g["reason"]
    _same_outputs(on, off, (2, 16, 15, 15), seed=5)
    assert g["cycles_model_fused"] == pytest.approx(g["cycles_emulated_fused"], rel=0.10)
