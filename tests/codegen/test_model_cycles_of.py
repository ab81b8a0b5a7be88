"""`model_cycles_of`: a kernel's modelled cycles without generating it (what a whole-model compile asks of the
library's tiling of each op) equal the generated kernel's, or both refuse the layer."""

from __future__ import annotations

import random

import pytest
from plans import random_case

from tileplan.codegen.pipeline import Epilogue, generate, model_cycles_of
from tileplan.codegen.registry import CodegenError
from tileplan.codegen.targets.gemmini import KernelABI
from tileplan.hardware.catalog import get_hardware
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.workload import parse_layer_spec

HW = get_hardware("gemmini-16x16")

ABIS = [KernelABI(), KernelABI(layout="NCHW", pad_value=-3, prelaid=True), KernelABI(prelaid=True, acc_output=True),
        KernelABI(prelaid=True, b_in_place=True)]


def _both(layer, mapping, epi, stream, abi):
    try:
        gen = generate(layer, HW, mapping, epi, name="k", stream=stream, abi=abi).model_cycles
    except CodegenError as exc:
        gen = exc
    try:
        only = model_cycles_of(layer, HW, mapping, epi, stream=stream, abi=abi)
    except CodegenError as exc:
        only = exc
    return gen, only


@pytest.mark.parametrize("seed", range(16))
def test_random_mappings_cost_alike(seed):
    layer, mapping, epi = random_case(seed)
    rng = random.Random(seed)
    for stream in ("tileplan", "baseline"):
        abi = rng.choice(ABIS[:3] + (ABIS[3:] if layer.dims()["Q"] == 1 else []))
        gen, only = _both(layer, mapping, epi, stream, abi)
        if isinstance(gen, Exception):
            assert isinstance(only, Exception), (gen, only)
        else:
            assert only == gen, (stream, abi)


@pytest.mark.parametrize("spec", [
    "conv2d:in_channels=64,out_channels=64,in_h=56,in_w=56,kernel=3,padding=1",
    "conv2d:in_channels=256,out_channels=128,in_h=28,in_w=28,kernel=1,stride=2",
    "conv2d:in_channels=32,out_channels=32,in_h=28,in_w=28,kernel=3,padding=1,groups=32",
    "matmul:M=197,K=768,N=768",
])
def test_planned_and_library_mappings_cost_alike(spec):
    """The plan's mapping and the library's (its baseline), in both instruction streams, with a whole-model ABI."""
    layer = parse_layer_spec(spec)
    plan = make_plan(layer, HW, ScheduleOptions())
    assert plan.baseline is not None
    abi = KernelABI(layout="NCHW", pad_value=5, prelaid=True) if spec.startswith("conv") else KernelABI(prelaid=True)
    for mapping in (plan.mapping, plan.baseline.mapping):
        for stream in ("tileplan", "baseline"):
            gen, only = _both(layer, mapping, Epilogue(scale=0.01, relu=True), stream, abi)
            assert not isinstance(gen, Exception), gen
            assert only == gen
