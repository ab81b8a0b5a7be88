"""Code for plans that pack groups onto the array (Mapping.group_pack): block-diagonal weight tiles, bit-exact
against NumPy and against the same layer run one group at a time, in the per-layer and the whole-model ABI."""

from __future__ import annotations

import random

import numpy as np
import pytest
from plans import random_packed_case

from tileplan.codegen.pipeline import Epilogue, emulator_for, generate, random_inputs, reference, run
from tileplan.codegen.targets.gemmini import KernelABI, pack_weights
from tileplan.hardware.catalog import get_hardware
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.workload import parse_layer

HW = get_hardware("gemmini-16x16")


def test_pack_weights_puts_each_group_on_the_diagonal():
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (12, 3, 3, 2, 3), dtype=np.int8)  # G=12 groups of C=2 -> K=3
    p = pack_weights(w, 4)
    assert p.shape == (3, 3, 3, 8, 12)
    for g in range(12):
        gp, i = divmod(g, 4)
        np.testing.assert_array_equal(p[gp, :, :, 2 * i:2 * i + 2, 3 * i:3 * i + 3], w[g])
    mask = np.zeros((8, 12), bool)
    for i in range(4):
        mask[2 * i:2 * i + 2, 3 * i:3 * i + 3] = True
    assert not p[..., ~mask].any()  # zeros off the diagonal
    assert pack_weights(w, 1) is w
    with pytest.raises(ValueError):
        pack_weights(w, 5)


def test_random_packed_layers_bit_exact():
    """Random grouped / depthwise layers under random packed mappings (C / K padding, strides, batches, edge
    tiles): the kernel takes the layer's own weights [G, R, S, C, K] and matches NumPy's grouped convolution."""
    rng = random.Random(27)
    for seed in range(10):
        layer, mapping = random_packed_case(rng)
        epi = Epilogue(scale=rng.choice([0.01, 0.0031, 0.5]), relu=rng.random() < 0.5)
        art = generate(layer, HW, mapping, epi)
        assert art.geometry.pack == mapping.group_pack and "W_p" in art.c_source
        inputs = random_inputs(art.geometry, seed)
        assert inputs["W"].shape == tuple(layer.dims()[d] for d in "GRSCK")
        res = run(art, inputs)
        want = reference(art.geometry, epi, **inputs)
        np.testing.assert_array_equal(res.buffers["out"], want, err_msg=f"{layer} | {mapping.describe()}")


def test_packed_plan_matches_the_group_by_group_program():
    """The planner's packed plan and the same layer planned group by group give identical outputs, in fewer
    emulated cycles."""
    layer = parse_layer(dict(op="conv2d", in_channels=64, out_channels=64, in_h=20, in_w=20, kernel=3, padding=1,
                             stride=1, groups=64, bias=True))
    packed = make_plan(layer, HW, ScheduleOptions(baseline=False, time_limit_s=5))
    assert packed.mapping.group_pack == 16
    plain = make_plan(layer, HW, ScheduleOptions(baseline=False, time_limit_s=5, mapper="gemmini-auto"))
    assert plain.mapping.group_pack is None
    epi = Epilogue(scale=0.004, relu=True)
    a_packed = generate(layer, HW, packed.mapping, epi)
    a_plain = generate(layer, HW, plain.mapping.model_copy(update={"executor": "tileplan"}), epi)
    inputs = random_inputs(a_plain.geometry, 5)
    r_packed, r_plain = run(a_packed, inputs), run(a_plain, inputs)
    np.testing.assert_array_equal(r_packed.buffers["out"], r_plain.buffers["out"])
    np.testing.assert_array_equal(r_packed.buffers["out"], reference(a_packed.geometry, epi, **inputs))
    assert r_packed.cycles * 3 < r_plain.cycles
    assert r_packed.macs == 16 * r_plain.macs  # the array multiplies the block-diagonal zeros too


def test_packed_whole_model_abi():
    """NCHW input with a non-zero padding value, prelaid block-diagonal weights, int32 accumulators out."""
    cin, size, groups = 32, 9, 16  # C = 2, K = 2 per group
    layer = parse_layer(dict(op="conv2d", in_channels=cin, out_channels=cin, in_h=size, in_w=size, kernel=3,
                             padding=1, stride=2, groups=groups))
    plan = make_plan(layer, HW, ScheduleOptions(baseline=False, time_limit_s=5))
    pack = plan.mapping.group_pack
    assert pack == 8
    art = generate(layer, HW, plan.mapping, Epilogue(scale=0.004), name="k",
                   abi=KernelABI("NCHW", pad_value=-7, prelaid=True, acc_output=True))
    rng = np.random.default_rng(1)
    I = rng.integers(-128, 128, (1, cin, size, size), dtype=np.int8)
    W = rng.integers(-128, 128, (cin, 2, 3, 3), dtype=np.int8)  # OIHW, 2 input channels per group
    bias = rng.integers(-3000, 3000, cin).astype(np.int32)
    wg = W.reshape(groups, 2, 2, 3, 3).transpose(0, 3, 4, 2, 1)  # [G, R, S, C, K]
    pd = art.layout.padded
    wp = np.zeros((pd["G"], pd["R"], pd["S"], pd["C"], pd["K"]), np.int8)
    packed = pack_weights(wg, pack)
    wp[:, :3, :3, :packed.shape[3], :packed.shape[4]] = packed
    bp = np.zeros((pd["G"], pd["K"]), np.int32)
    bp[:, :packed.shape[4]] = bias.reshape(pd["G"], -1)
    p = (size + 2 - 3) // 2 + 1
    out = np.zeros((1, cin, p, p), np.int32)
    res = emulator_for(art).run(art.c_source, {"I": I, "W_p": wp, "bias_p": bp, "out": out,
                                               "workspace": np.zeros(max(64, art.workspace_bytes), np.uint8)},
                                entry=art.entry, readonly=("I", "W_p", "bias_p"))
    x = np.pad(I.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-7)
    want = np.zeros((1, cin, p, p), np.int64)
    for k in range(cin):
        g = k // 2
        for dr in range(3):
            for ds in range(3):
                win = x[0, 2 * g:2 * g + 2, dr:dr + 2 * (p - 1) + 1:2, ds:ds + 2 * (p - 1) + 1:2]
                want[0, k] += np.einsum("chw,c->hw", win, W[k, :, dr, ds].astype(np.int64))
    want += bias[None, :, None, None]
    np.testing.assert_array_equal(res.buffers["out"], want.astype(np.int32))


def test_host_library_runs_a_packed_kernel():
    """The module's host library (TVM's llvm build, its W_p stage laying the weights out block-diagonally on the
    host) gives the C kernel's outputs and instruction stream."""
    from plans import random_mapping

    from tileplan.codegen.host import run_host
    from tileplan.problem import Problem

    layer = parse_layer(dict(op="conv2d", in_channels=32, out_channels=32, groups=32, in_h=7, in_w=8, kernel=3,
                             padding=1, name="dwp"))
    packed = Problem.from_layer(layer).packed(16)
    mapping = random_mapping(packed.dims, random.Random(3)).model_copy(update={"group_pack": 16})
    art = generate(layer, HW, mapping, Epilogue(scale=0.02, relu=True), name="dwp")
    inputs = random_inputs(art.geometry, 1)
    want = reference(art.geometry, art.epilogue, **inputs)
    kernel, lib = run(art, inputs), run_host(art, inputs)
    np.testing.assert_array_equal(kernel.buffers["out"], want)
    np.testing.assert_array_equal(lib.buffers["out"], want)
    assert (lib.cycles, lib.counts) == (kernel.cycles, kernel.counts)


@pytest.mark.parametrize("channels,size,acc_output", [(58, 28, True), (116, 14, True), (58, 14, False)])
def test_packed_depthwise_nchw_emulated_as_modelled(channels, size, acc_output):
    """A packed depthwise convolution in the whole-model ABI (NCHW, as ShuffleNetV2's): the stores' rows are as far
    apart as the cost model counts (they land in an NHWC staging copy that the CPU transposes into NCHW), so the
    emulated cycles are within 10% of `model_cycles`; the output is bit-exact.  Before, the staging copy was the
    padded [G, P, Q, pack] out_p whose rows of `pack` channels share 64-byte blocks: 58 channels at 28x28 emulated
    194,633 cycles against 118,082 modelled."""
    layer = parse_layer(dict(op="conv2d", in_channels=channels, out_channels=channels, in_h=size, in_w=size,
                             kernel=3, padding=1, groups=channels))
    plan = make_plan(layer, HW, ScheduleOptions(baseline=False, time_limit_s=5))
    assert plan.mapping.group_pack > 1
    art = generate(layer, HW, plan.mapping, Epilogue(scale=0.004), name="k",
                   abi=KernelABI("NCHW", pad_value=5, prelaid=True, acc_output=acc_output))
    rng = np.random.default_rng(channels)
    I = rng.integers(-128, 128, (1, channels, size, size), dtype=np.int8)
    W = rng.integers(-128, 128, (channels, 1, 3, 3), dtype=np.int8)
    bias = rng.integers(-3000, 3000, channels).astype(np.int32)
    pd = art.layout.padded
    packed = pack_weights(W.reshape(channels, 1, 1, 3, 3).transpose(0, 3, 4, 2, 1), art.geometry.pack)
    wp = np.zeros((pd["G"], pd["R"], pd["S"], pd["C"], pd["K"]), np.int8)
    g, r, s, c, k = packed.shape
    wp[:g, :r, :s, :c, :k] = packed
    bp = np.zeros((pd["G"], pd["K"]), np.int32)
    bp[:g, :k] = bias.reshape(g, k)
    out = np.zeros((1, channels, size, size), np.int32 if acc_output else np.int8)
    res = emulator_for(art).run(art.c_source, {"I": I, "W_p": wp, "bias_p": bp, "out": out,
                                               "workspace": np.zeros(max(64, art.workspace_bytes), np.uint8)},
                                entry=art.entry, readonly=("I", "W_p", "bias_p"))
    x = np.pad(I.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=5)
    acc = np.zeros((1, channels, size, size), np.int64)
    for dr in range(3):
        for ds in range(3):
            acc += x[:, :, dr:dr + size, ds:ds + size] * W[None, :, 0, dr, ds, None, None].astype(np.int64)
    acc += bias[None, :, None, None]
    if acc_output:
        want = acc.astype(np.int32)
    else:
        want = np.clip(np.rint(acc.astype(np.int32).astype(np.float32) * np.float32(0.004)), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(res.buffers["out"], want)
    assert abs(res.cycles / art.model_cycles - 1) < 0.10, (res.cycles, art.model_cycles)
