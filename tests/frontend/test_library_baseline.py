"""Every offloaded op against the library's tiling of the same op (issue 24, item 5): the summary's ratio is
the true one (the library's tiling modelled with the op's own epilogue and ABI over the kernel the program
runs), never below 1 (the library's tiling is kept among the candidates), and `tileplan schedule --model` sees
the same layer as the compile (its bias included)."""

from __future__ import annotations

import pytest
from frontend_helpers import planner

from tileplan.frontend import zoo
from tileplan.frontend.compile import CompileOptions, compile_model
from tileplan.hardware.catalog import get_hardware
from tileplan.workload_onnx import load_onnx


@pytest.mark.parametrize("hw_name", ["gemmini-16x16", "gemmini-32x32"])
def test_no_op_is_modelled_slower_than_the_library_and_the_ratio_is_true(hw_name):
    data = zoo.build("cnn_small", "qdq")
    res = compile_model(data, get_hardware(hw_name), CompileOptions(time_limit_s=2.0, emulate=False),
                        planner=planner)
    acc = [o for o in res.summary["ops"] if o.get("kernel")]
    assert len(acc) == 3
    for o in acc:
        assert o["baseline_cycles_model"] is not None, o["name"]
        assert o["cycles_model"] <= o["baseline_cycles_model"] + 0.05, (o["name"], o["cycles_model"],
                                                                         o["baseline_cycles_model"])
        assert o["speedup"] == pytest.approx(o["baseline_cycles_model"] / o["cycles_model"], rel=1e-3)
    t = res.summary["total"]
    assert t["speedup_model"] == pytest.approx(t["baseline_cycles_model"] / t["cycles_model"], rel=1e-3)


@pytest.mark.parametrize("model", ["cnn_small", "attention"])
def test_schedule_model_and_compile_see_the_same_layers(model):
    data = zoo.build(model, "qdq")
    res = compile_model(data, get_hardware("gemmini-16x16"), CompileOptions(time_limit_s=2.0, emulate=False),
                        planner=planner)
    compiled = {o["name"]: o["layer"] for o in res.summary["ops"] if o.get("kernel")}
    scheduled = {layer.name: layer.model_dump(mode="json", exclude={"count"}) for layer in load_onnx(data).layers}
    assert compiled and set(compiled) <= set(scheduled)  # (schedule also plans what the compile leaves on the host)
    for name, layer in compiled.items():
        assert {k: v for k, v in layer.items() if k != "name"} == {k: v for k, v in scheduled[name].items()
                                                                   if k != "name"}, name
