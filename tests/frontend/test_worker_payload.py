"""What a compile sends its worker processes: a kernel's code generation gets the op's spec without its weights
and bias (`codegen_spec`), which the kernel's C does not depend on (the program lays them out itself)."""

from __future__ import annotations

import pickle

import numpy as np

from tileplan.frontend.compile import KernelCode, codegen_spec, generate_kernel
from tileplan.frontend.partition import kernel_spec
from tileplan.frontend.patterns import QuantOp
from tileplan.hardware.catalog import get_hardware
from tileplan.plan import ScheduleOptions, make_plan


def _spec():
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (32, 16, 3, 3)).astype(np.int8)
    b = rng.integers(-100, 100, 32).astype(np.int32)
    op = QuantOp(kind="conv2d", name="c", nodes=["c"], x_shape=(1, 16, 12, 12), y_shape=(1, 32, 12, 12),
                 x_dtype="int8", y_dtype="int8", x_scale=np.float32(0.1), x_zp=np.int8(-7), w=w,
                 w_scale=np.float32(0.01), w_zp=np.int8(0), bias=b, bias_scale=np.float32(0.001),
                 bias_zp=np.int32(0), y_scale=np.float32(0.05), y_zp=np.int8(3), padding=(1, 1, 1, 1), groups=1)
    return kernel_spec(op)


def test_codegen_spec_drops_only_the_arrays():
    spec = _spec()
    light = codegen_spec(spec)
    assert light.weights.size == 0 and light.bias.size == 0
    assert spec.weights.size == 32 * 16 * 9 and spec.bias.size == 32  # the original is left as it was
    assert (light.layer, light.epilogue, light.abi, light.clamp, light.multiplier, light.requant, light.act) == \
        (spec.layer, spec.epilogue, spec.abi, spec.clamp, spec.multiplier, spec.requant, spec.act)
    assert len(pickle.dumps(light)) < len(pickle.dumps(spec)) - spec.weights.nbytes


def test_a_kernel_made_without_the_weights_is_the_same(tmp_path, monkeypatch):
    import tileplan.codegen.emulator.build as build

    hw = get_hardware("gemmini-16x16")
    spec = _spec()
    plan = make_plan(spec.layer, hw, ScheduleOptions(mapper="gemmini-auto"))
    made: list[KernelCode] = []
    for sub, s in (("full", spec), ("light", codegen_spec(spec))):
        monkeypatch.setattr(build, "default_cache_dir", lambda sub=sub: tmp_path / sub)  # no shared kernel cache
        made.append(generate_kernel(s, hw, plan.mapping, "tpk_c", "tileplan"))
    assert (tmp_path / "full" / "kernels").is_dir() and (tmp_path / "light" / "kernels").is_dir()
    assert made[0] == made[1]


def test_the_workers_cpu_is_a_phase_of_its_own():
    """The worker processes' CPU (solves and kernels) is counted when the pool is waited for: the summary's
    `workers` phase, not the host part's (where it landed before: 4.7 of ResNet-50's 11 CPU s read as "host")."""
    from frontend_helpers import HW, OPTIONS

    from tileplan.frontend import zoo
    from tileplan.frontend.compile import compile_model

    data = zoo.build("cnn_small", "qdq")
    two = compile_model(data, HW, OPTIONS, workers=2)
    cpu = two.summary["total"]["phase_cpu_seconds"]
    assert cpu["workers"] > 0.05  # the layers were solved there (no plan store, no planner memo)
    assert cpu["workers"] > cpu.get("host", 0.0)
    one = compile_model(data, HW, OPTIONS, workers=1)
    assert "workers" not in one.summary["total"]["phase_cpu_seconds"]


def test_kernels_compile_in_the_background_as_the_workers_make_them(monkeypatch):
    """Each kernel's object is started (runner.prebuild_later) as its C arrives from a worker, not all at once
    after planning; the end of the compile starts none of them again; the program is the same as one compiled
    without workers."""
    from frontend_helpers import HW, OPTIONS

    import tileplan.frontend.compile as C
    from tileplan.frontend import zoo

    data = zoo.build("cnn_small", "qdq")
    early: list[str] = []
    late: list[str] = []
    real_later, real_now = C._prebuild_later, C._prebuild

    def later(pre, model_name, hw, header, sources):
        start = real_later(pre, model_name, hw, header, sources)

        def record(source, text):
            if source.startswith("kernels/"):
                early.append(source)
            start(source, text)
        return record

    def now(pre, model_name, hw, header, sources):
        late.extend(s for s in sources if s.startswith("kernels/"))
        real_now(pre, model_name, hw, header, sources)

    monkeypatch.setattr(C, "_prebuild_later", later)
    monkeypatch.setattr(C, "_prebuild", now)
    two = C.compile_model(data, HW, OPTIONS, workers=2)
    kernels = {s for s in early}
    assert kernels and len(early) == len(kernels)  # each once
    assert not late  # (no library tiling swapped a kernel in this model)
    monkeypatch.setattr(C, "_prebuild_later", real_later)
    monkeypatch.setattr(C, "_prebuild", real_now)
    one = C.compile_model(data, HW, OPTIONS, workers=1)
    assert two.artifact == one.artifact
