"""`compile_model`: a quantized ONNX model -> one program for a GEMM accelerator and its host, plus the network
summary.  A pure function of its arguments, so every door (CLI, service, SDK) is a thin wrapper:

    result = compile_model(model_bytes, hw, CompileOptions(), input_shapes={"input": [1, 3, 224, 224]},
                           planner=make_plan, progress=lambda done, total: ...)
    result.summary     # dict, contracts.md "POST /compile" summary: ops, total, notes (JSON-serialisable)
    result.artifact    # bytes of the tar: kernels, host C, glue, weights, header, Makefile, README, manifest

Pipeline (one module per step, data flows one way):
  onnx_import (decode, shapes, QOperator -> QDQ, float refusal / quantization) -> Relax (to_relax)
  -> patterns.fuse (quantized conv / matmul composites; partition.offload_reason decides)
  -> per offloaded op: partition.kernel_spec -> planner (identical layers planned once) -> codegen.generate
     with the model's epilogue and the whole-model ABI (identical kernels generated once)
  -> host_ops (offload, LegalizeOps, FuseOps, FuseTIR, C) -> program (steps, arena, weights, files)
  -> runner (host build; one emulated run for per-op cycles) -> summary + tar.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field

from tileplan.errors import InputError, MappingInfeasible
from tileplan.frontend import dynamic, onnx_graph, recurrent
from tileplan.plan import Plan, ScheduleOptions, executor_for, make_plan

Planner = Callable[[Any, Any, ScheduleOptions], Plan]
Progress = Callable[[int, int], None]
ARTIFACT_FORMAT = 1


class CompileOptions(ScheduleOptions):
    """Options of a model compile (`tileplan compile`, POST /compile): the scheduling options of /schedule, which
    every offloaded op is planned with, plus what the compiler itself does."""

    quantize: bool = Field(default=False, description=(
        "Quantize a float model with onnxruntime's static quantizer (QDQ, int8, per-tensor) instead of refusing "
        "it; without given calibration data on seeded random inputs (the summary's notes say so)."))
    calibration_samples: int = Field(default=8, ge=1, le=1000, description="Random calibration inputs (quantize).")
    offload: bool = Field(default=True, description="False: every op on the host (a reference build).")
    emulate: bool = Field(default=True, description=(
        "Run the program once on the emulator at compile time (random input) for per-op emulated cycles."))
    einsum: Literal["host", "accelerator"] = Field(default="host", description=(
        "An Einsum of two int8 activations that is one batched matrix product with a quantized result: 'host' "
        "computes it in float as onnxruntime does (it has no integer Einsum; bit for bit its MLAS order); "
        "'accelerator' runs it as a MatMul, whose exact integer sums round apart from onnxruntime's float ones at "
        "a few results in 10,000, differences that grow through deep nets (MaxViT-T: 20.9% of its outputs equal "
        "to onnxruntime)."))
    fusion: Literal["auto", "off"] = Field(default="auto", description=(
        "Fused-layer groups (tileplan.fusion): 'auto' finds the chains of offloaded ops whose intermediates could "
        "stay on chip, plans each group's tile and budget and fuses it where that is bit-exact and pays (else the "
        "per-layer program is kept, with the reason in the summary's groups); 'off' plans no groups."))


@dataclass
class CompiledModel:
    summary: dict[str, Any]
    artifact: bytes
    notes: list[str] = field(default_factory=list)


@dataclass
class _Accel:
    """One offloaded op on its way to a program step."""

    qop: Any
    spec: Any
    plan: Plan | None = None
    art: Any = None  # codegen Artifact (shared by ops with the same kernel)
    reason: str = ""
    library_tiling: str = ""  # why the kernel runs the library's tiling instead of the plan's
    library_cycles: float | None = None  # the library's tiling, modelled with this op's epilogue and ABI

    @property
    def calls(self) -> int:
        """Kernel calls per run: an activation x activation matmul calls its kernel once per batch element (the
        artifact's and the library's modelled cycles are one call's), every other op once per site that calls it."""
        if getattr(self.spec, "act", None) is not None:
            return int(self.spec.act.batch)
        return 1 + len(getattr(self.qop, "twins", ()))  # an equal op elsewhere calls the same kernel (patterns.fuse)


def default_planner(layer: Any, hw: Any, options: ScheduleOptions) -> Plan:
    return make_plan(layer, hw, options)


class StorePlanner:
    """A planner that answers from a plan store (tileplan.store.Store) and stores what it solves: the same
    cache and keys as POST /schedule, so a compiled model's plans show up in GET /plans."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def lookup(self, layer: Any, hw: Any, options: ScheduleOptions) -> Plan | None:
        from tileplan.plan import plan_key
        from tileplan.problem import Problem

        cached = self.store.get_plan(plan_key(hw, Problem.from_layer(layer), options))
        return None if cached is None else Plan.model_validate_json(cached.to_json(cached=True, hardware=hw.name))

    def save(self, plan: Plan, hw: Any) -> None:
        self.store.put_plan(plan.model_dump(mode="json"), hw.model_dump(mode="json"))

    def __call__(self, layer: Any, hw: Any, options: ScheduleOptions) -> Plan:
        found = self.lookup(layer, hw, options)
        if found is not None:
            return found
        p = make_plan(layer, hw, options)
        self.save(p, hw)
        return p


def store_planner(store: Any) -> StorePlanner:
    return StorePlanner(store)


class NewStorePlanner(StorePlanner):
    """A StorePlanner for a plan store that does not exist yet (the SQLite file of a first or cold compile):
    it holds no plan to look up, so the store is opened (`open_store()`: SQLAlchemy, the models, Alembic and
    the migrations, 0.3-0.5 CPU s that were the CLI's serial start) only to save what was solved, by `flush`:
    the compile runs it among its deferred work (a thread, while the build and the emulated run hold no GIL),
    and the caller again once the compile is over (plans solved by a compile that failed later are kept too)."""

    def __init__(self, open_store: Callable[[], Any]) -> None:
        super().__init__(None)
        self._open = open_store
        self._pending: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._lock = threading.Lock()

    def lookup(self, layer: Any, hw: Any, options: ScheduleOptions) -> Plan | None:
        return None

    def save(self, plan: Plan, hw: Any) -> None:
        with self._lock:
            self._pending.append((plan.model_dump(mode="json"), hw.model_dump(mode="json")))

    def flush(self) -> None:
        """Open the store (once) and save every plan not saved yet."""
        with self._lock:
            pending, self._pending = self._pending, []
            if self.store is None:
                self.store = self._open()
            for plan, hw in pending:
                self.store.put_plan(plan, hw)

    def close(self) -> None:
        """`flush`, then close the store."""
        self.flush()
        self.store.close()


@dataclass
class KernelCode:
    """What a program needs of one generated kernel (a codegen Artifact, or the same from the kernel cache)."""

    name: str
    entry: str
    c_source: str
    workspace_bytes: int
    padded: dict[str, int]
    timing: Any  # TimingParams
    model_cycles: float
    notes: list[str]
    target: tuple[int, int, int]  # dim, scratchpad rows, accumulator rows
    pack: int = 1  # groups packed per group (Mapping.group_pack): W_p is block-diagonal
    local_rows: tuple[int, int] = (0, 0)  # scratchpad and accumulator rows the kernel uses (both halves)
    # the workspace's DRAM buffers, (byte offset, bytes) each (Emitted.workspace_pieces): the emulated run registers
    # each as a tensor, as it does the step's input and weights
    workspace_pieces: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def of(cls, art: Any) -> KernelCode:
        t = art.target
        return cls(art.name, art.entry, art.c_source, art.workspace_bytes, dict(art.layout.padded), art.timing,
                   float(art.model_cycles), list(art.notes), (t.dim, t.spad_rows, t.acc_rows), art.geometry.pack,
                   (art.spad_rows_used, art.acc_rows_used), [tuple(p) for p in art.workspace_pieces])

    def to_json(self) -> str:
        from dataclasses import asdict

        return json.dumps({**asdict(self), "timing": asdict(self.timing)})

    @classmethod
    def from_json(cls, text: str) -> KernelCode:
        from tileplan.codegen.emulator import TimingParams

        d = json.loads(text)
        d["timing"] = TimingParams(**d["timing"])
        d["target"] = tuple(d["target"])
        d["local_rows"] = tuple(d["local_rows"])  # (an entry written before a field existed is made again)
        d["workspace_pieces"] = [tuple(p) for p in d["workspace_pieces"]]
        return cls(**d)


def codegen_sources() -> list[Any]:
    """The sources a cached kernel depends on: the code generator's, and the cost model's (a kernel entry carries
    its modelled cycles, `codegen.schedule.model_cycles`, which the cost model computes)."""
    from pathlib import Path

    import tileplan.codegen as cg
    import tileplan.cost as cost

    files: list[Any] = []
    for pkg in (cg, cost):
        files += sorted(p for p in Path(str(pkg.__file__)).parent.rglob("*") if p.suffix in (".py", ".c", ".h"))
    return files


def _codegen_digest() -> str:
    """Identifies the code generator's version: a digest of its sources and the cost model's (a kernel cache
    entry made by other code is never reused)."""
    h = hashlib.sha256()
    for p in codegen_sources():
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def generate_kernel(spec: Any, hw: Any, mapping: Any, name: str, stream: str) -> KernelCode:
    """codegen.generate with the op's epilogue and ABI, cached on disk by everything the code depends on."""
    from tileplan.codegen.emulator.build import default_cache_dir
    from tileplan.codegen.pipeline import generate
    from tileplan.codegen.registry import CodegenError
    from tileplan.plan import hardware_fingerprint

    scale = float(spec.epilogue.scale)
    if not (scale > 0 and np.isfinite(scale)):
        # an output scale of inf (onnxruntime's quantizer writes one for a tensor past float32's range, e.g. from
        # calibration data near 3e38) makes the multiplier 0: TVM folded the kernel's accumulation away and the
        # schedule failed (a 500). The host computes it as ONNX defines it.
        raise CodegenError(f"the op's requantization multiplier is {scale:g} (its output's scale is inf or its "
                           "input's 0): it runs on the host")

    doc = {"layer": spec.layer.model_dump(mode="json", exclude={"count"}), "mapping": mapping.model_dump(mode="json"),
           "epilogue": [scale, spec.epilogue.zero_point, spec.epilogue.relu, spec.epilogue.bias],
           "abi": [spec.abi.layout, spec.abi.pad_value, spec.abi.prelaid, spec.abi.acc_output, spec.abi.b_in_place],
           "stream": stream,
           "name": name,
           "hw": hardware_fingerprint(hw), "codegen": _codegen_digest()}
    key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
    path = default_cache_dir() / "kernels" / f"{key}.json"
    if path.exists():
        try:
            return KernelCode.from_json(path.read_text())
        except (ValueError, KeyError, TypeError):
            pass  # a damaged entry is made again
    code = KernelCode.of(generate(spec.layer, hw, mapping, spec.epilogue, name=name, stream=stream, abi=spec.abi))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(code.to_json())
    os.replace(tmp, path)
    return code


def codegen_spec(spec: Any) -> Any:
    """`spec` as `generate_kernel` reads it: without its weights and bias (empty arrays in their place), which
    the kernel's code does not depend on (the program lays them out: `_prelay`). What a worker process is sent:
    ResNet-50's 50 tasks were 15.8 MB pickled with them, most of it weights."""
    from dataclasses import replace

    return replace(spec, weights=np.zeros((0, 0, 0, 0, 0), np.int8), bias=np.zeros(0, np.int32))


def kernel_cycles(spec: Any, hw: Any, mapping: Any, stream: str) -> float:
    """`generate_kernel(spec, hw, mapping, name, stream).model_cycles` without generating the kernel (the modelled
    cycles of the code, worked out from its realisation: `codegen.pipeline.model_cycles_of`)."""
    from tileplan.codegen.pipeline import model_cycles_of

    return float(model_cycles_of(spec.layer, hw, mapping, spec.epilogue, stream=stream, abi=spec.abi))


def _schedule_options(options: CompileOptions) -> ScheduleOptions:
    return ScheduleOptions(**options.model_dump(include=set(ScheduleOptions.model_fields)))


def compile_model(model: bytes, hw: Any, options: CompileOptions | None = None,
                  input_shapes: dict[str, list[int]] | None = None, planner: Planner | None = None,
                  progress: Progress | None = None,
                  calibration: list[dict[str, np.ndarray]] | None = None, workers: int = 1,
                  plan_budget_s: float | None = None) -> CompiledModel:
    """Compile a quantized ONNX model for `hw` (a HardwareDescriptor).  Raises InputError (naming the node or the
    field) for a model that cannot be compiled; every op that can run somewhere is compiled (on the host when
    the accelerator cannot run it, with the reason in the summary).  `workers` > 1 plans distinct layers and
    generates distinct kernels in that many processes (the result is the same). `plan_budget_s` (a service's
    compile_plan_budget_s; in-process planning only, `workers` 1): once planning has taken that long, the distinct
    layers not yet planned are planned by gemmini-auto (the library's hand-written tiling, milliseconds) instead of
    searched, and the summary's notes say which.

    While it runs, the garbage collector's full passes skip the heap as it was after the model was decoded, after
    TVM's import and after the model's import into Relax (`gc.freeze`, `_frozen_heap`): those objects live through
    the compile, and each full pass traversed all of them, in this process and again in each forked worker, which
    inherits them (ResNet-50: 6 + 2 x 2 full passes, 0.43 + 2 x 0.25 CPU s); the heap is handed back to the
    collector when the compile ends."""
    import gc

    try:
        return _compile_model(model, hw, options, input_shapes, planner, progress, calibration, workers,
                              plan_budget_s)
    finally:
        gc.unfreeze()


def _frozen_heap() -> None:
    """Every object the collector tracks now moves to its permanent generation, which its passes skip (until
    `compile_model` ends: gc.unfreeze)."""
    import gc

    gc.freeze()


def _compile_model(model: bytes, hw: Any, options: CompileOptions | None,
                   input_shapes: dict[str, list[int]] | None, planner: Planner | None, progress: Progress | None,
                   calibration: list[dict[str, np.ndarray]] | None, workers: int,
                   plan_budget_s: float | None) -> CompiledModel:
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    from tileplan.frontend import onnx_import

    options = options or CompileOptions()
    planner = planner or default_planner
    # the model is read (and a float or broken one refused) before TVM is imported: 1.5 s of the startup
    imported = onnx_import.load_model(model, input_shapes, options.quantize, calibration,
                                      options.calibration_samples, options.seed, einsum=options.einsum)
    _frozen_heap()  # (the decoded model: it lives through the compile)
    from tileplan.frontend import work

    work.check(imported.model, options.emulate)  # (a request's intake checked it; the CLI and resumed compiles here)
    phases: dict[str, float] = {"load": round(time.perf_counter() - t0, 3)}
    cpu_phases: dict[str, float] = {"load": round(_cpu_seconds() - cpu0, 3)}
    mark = [time.perf_counter(), _cpu_seconds()]
    from tileplan.frontend.runner import Prebuild

    # the host build's objects that are ready before the program is (the emulator now, while TVM is imported;
    # the kernels and host ops as they are made) compile in the background: the emulated run's build waits
    # for them and uses each whose key (command, source, headers) matches
    pre = Prebuild()
    model_name = imported.model.graph.name or "model"
    early = _early_params_header(hw) if options.emulate else None
    if early is not None:
        _prebuild(pre, model_name, hw, early, {"emulator/gemmini_emu.c": None})

    # TVM's device backends (CUDA with its PTX script namespace, Metal, ROCm, Vulkan, ...) register themselves at
    # its import unless told not to: nothing here targets them (kernels and host functions are printed as C by
    # Tileplan's emitter), and their registration was 0.1-0.15 of TVM's 0.85 CPU s import. (A process that
    # imported TVM before, or sets the variable, keeps what it has.)
    os.environ.setdefault("TVM_DEVICE_BACKEND_AUTOLOAD", "0")
    import tvm
    import tvm.relax.frontend.onnx  # noqa: F401

    _frozen_heap()  # (TVM's modules: they live through the compile)

    from tileplan.codegen.registry import CodegenError
    from tileplan.codegen.support import codegen_unsupported
    from tileplan.frontend import host_ops, partition, patterns
    from tileplan.frontend.program import Step, Tensor, build_program, pack, render, short_ident
    from tileplan.frontend.runner import NoToolchain, emulate_files

    def phase(name: str) -> None:  # wall and CPU seconds per compile phase (in the summary)
        now, cpu = time.perf_counter(), _cpu_seconds()
        phases[name] = round(phases.get(name, 0.0) + now - mark[0], 3)
        cpu_phases[name] = round(cpu_phases.get(name, 0.0) + cpu - mark[1], 3)
        mark[0], mark[1] = now, cpu

    phase("startup")
    notes = list(imported.notes)
    mod, onnx_nodes = onnx_import.to_relax(imported)

    # -- which quantized ops can run on the accelerator ------------------------------------------------------
    no_target = None if options.offload else "offload disabled (options.offload=false)"
    no_target = no_target or codegen_unsupported(hw)  # the one answer /schedule's codegen and the codegen give
    reasons: dict[str, str] = dict(imported.host_reasons)  # what the import left as it is, and why

    def decide(qop: Any) -> bool:
        if qop.name in imported.op_notes and imported.op_notes[qop.name] not in qop.notes:
            qop.notes.append(imported.op_notes[qop.name])
        r = no_target or partition.offload_reason(qop)
        if r:
            reasons[qop.name] = r
        return r is None

    fused, composites = patterns.fuse(mod, onnx_nodes, decide)
    _frozen_heap()  # (the Relax module and its composites, before the worker processes fork and inherit them)
    phase("import")

    # -- plan and generate every offloaded op (identical layers planned once, identical kernels made once) ----
    sched_opts = _schedule_options(options)
    stream = "baseline" if executor_for(options.mapper) == "library" else "tileplan"
    total = len(composites) + 1
    accel = {c: _Accel(q, partition.kernel_spec(q)) for c, q in composites.items()}
    global_pools = frozenset(v for v, n in onnx_nodes.items() if n.op_type == "GlobalAveragePool")

    deferred: list[Callable[[], None]] = []  # work off the critical path: run while the emulated run runs

    def host_part(fused_mod: Any, comps: dict[str, Any], emit_workers: int,
                  on_units: Callable[[list[str]], Callable[[str, str], None]] | None = None
                  ) -> tuple[list[str], HostPart]:
        """The host part of the program whose offloaded composites are `comps` (in step order, as `accel`):
        onnxruntime's arithmetic for the host ops, lowered, each host function's C (and the notes). `on_units`:
        see lower_host_cached."""
        symbols = {c: f"tp_accel_{i}" for i, c in enumerate(comps)}
        operands: dict[str, tuple[int, ...]] = {c: q.operands for c, q in comps.items()
                                                if isinstance(q, patterns.ActMatmul)}
        constants = {c: q.x_const for c, q in comps.items()
                     if isinstance(q, patterns.QuantOp) and q.x_const is not None}
        compat, compat_notes = host_ops.onnxruntime_compatible(
            host_ops.offload(fused_mod, symbols, operands, constants), global_pools, imported.uint8_activations)
        return compat_notes, lower_host_cached(compat, emit_workers, on_units, deferred)

    # The host part depends on which ops are offloaded, not on their plans: it is lowered in a thread while the
    # worker processes plan and generate kernels (TVM's passes release the GIL; this process only waits for the
    # workers meanwhile), started once they are forked (a fork while the thread runs TVM could copy a lock it
    # holds), and its C made in the thread itself (no further fork). Used unless an op then gets no code (the
    # model is fused again without it: the host part is made anew below, as without the thread).
    from concurrent.futures import Future, ThreadPoolExecutor

    early_host: list[Future[tuple[list[str], HostPart]]] = []
    host_thread = ThreadPoolExecutor(max_workers=1)

    def prebuild_units(stems: list[str]) -> Callable[[str, str], None]:  # each host file compiles once made
        if early is None:
            return lambda stem, text: None
        start = _prebuild_later(pre, model_name, hw, early, [f"host/{s}.c" for s in stems])
        return lambda stem, text: start(f"host/{stem}.c", text.encode())

    def start_host() -> None:
        early_host.append(host_thread.submit(host_part, fused, dict(composites), 1, prebuild_units))

    # each kernel's object compiles in the background as soon as a worker has made its C (the cores' gaps while
    # the last layers are planned), not after all of them: the build waited for those compiles at its start.
    # The kernels the program runs are known after _keep_library_tiling, which may swap one for the library's
    # tiling: those are compiled then (a compile of an object key already started is not repeated).
    started: dict[str, str] = {}  # kernel name -> the C its compile was started with
    kernel_start: list[Callable[[str, bytes], None]] = []
    kernel_lock = threading.Lock()

    def prebuild_kernel(code: KernelCode) -> None:
        assert early is not None
        with kernel_lock:
            if not kernel_start:  # (one temporary tree and one `make -n` for every kernel the program may have)
                stems = sorted({short_ident(a.qop.name, "tpk_") for a in accel.values()})
                kernel_start.append(_prebuild_later(pre, model_name, hw, early, [f"kernels/{k}.c" for k in stems]))
            if code.name in started:
                return
            started[code.name] = code.c_source
        kernel_start[0](f"kernels/{code.name}.c", code.c_source.encode())

    phase("other")
    try:
        plans = _plan_and_generate(list(accel.values()), hw, sched_opts, stream, planner, workers,
                                   lambda done: progress(done, total) if progress else None, phase, start_host,
                                   budget=(plan_budget_s, notes),
                                   on_kernel=prebuild_kernel if early is not None else None)
    finally:
        host_thread.shutdown(wait=True)  # (TVM is used by this thread only from here on)
    phase("host")
    if isinstance(planner, NewStorePlanner):
        deferred.append(planner.flush)
    _keep_library_tiling(list(accel.values()), hw, stream)
    if early is not None:
        with kernel_lock:
            rest = {f"kernels/{a.art.name}.c": a.art.c_source for a in accel.values()
                    if a.art is not None and started.get(a.art.name) != a.art.c_source}
        if rest:
            _prebuild(pre, model_name, hw, early, rest)
    phase("codegen")
    for a in accel.values():
        if a.reason:
            reasons[a.qop.name] = a.reason
    if any(a.reason for a in accel.values()):  # fuse again without the ops that got no code
        ok = {a.qop.name for a in accel.values() if not a.reason}
        fused, composites = patterns.fuse(mod, onnx_nodes, lambda q: q.name in ok)
        accel = {c: next(a for a in accel.values() if a.qop.name == q.name) for c, q in composites.items()}
        early_host.clear()

    phase("other")
    # -- the accelerator steps and the host part --------------------------------------------------------------
    timings: list[Any] = []
    templates: dict[str, Step] = {}
    for i, a in enumerate(accel.values()):
        sym = f"tp_accel_{i}"  # (the host part calls step i by this name: host_part)
        if a.art.timing not in timings:
            timings.append(a.art.timing)
        if a.spec.act is None:
            wp, bp = _prelay(a.spec, a.art.padded, a.art.pack)
            w_t: Any = _const_tensor(wp)
        else:  # B is the step's second input, read in place; the kernel's bias_p (never loaded: no bias) zeros
            w_t, bp = None, np.zeros((a.art.padded["G"], a.art.padded["K"]), np.int32)
        templates[sym] = Step("accel", a.qop.name, a.art.name, [], [],
                              Tensor(0, "uint8", (a.art.workspace_bytes,), "workspace") if a.art.workspace_bytes
                              else None, w_t, _const_tensor(bp), a.spec.clamp,
                              timings.index(a.art.timing), a.qop.nodes, a.spec.tag, a.spec.requant,
                              act=a.spec.act, workspace_pieces=list(a.art.workspace_pieces))
    compat_notes, host = early_host[0].result() if early_host else host_part(fused, composites, workers)
    notes += compat_notes
    host_sources, host_ws, host_names = host_units(host.sources), host.workspace, host.names
    if early is not None:
        _prebuild(pre, model_name, hw, early, {f"host/{k}.c": v for k, v in host_sources.items()})
    decls = list(host.decls)
    prog = build_program(host.main, templates, host_ws, host_names)
    phase("host")
    groups = _plan_groups(imported.model, accel, hw, options)
    fused_kernels = _fuse_program(prog, groups, accel, hw) if any(g.fused for g in groups) else []
    kernel_sources: dict[str, str] = {}
    for a in {id(a.art): a for a in accel.values()}.values():
        if not any(st.function == a.art.name for st in prog.steps):
            continue  # every op it ran is in a fused group now
        art = a.art
        if kernel_sources.get(art.name, art.c_source) != art.c_source:  # (name_nodes makes the names distinct)
            raise InputError(("model", a.qop.name), f"its kernel's C name {art.name} is another node's too: rename one")
        kernel_sources[art.name] = art.c_source
        out_t = "int32_t" if a.spec.abi.acc_output else "int8_t"
        decls.append(f"void {art.name}(const int8_t *I, const int8_t *W_p, const int32_t *bias_p, {out_t} *out, "
                     "uint8_t *workspace);")
        decls.append(f"void {art.entry}(void **args);")
    for fk in fused_kernels:
        kernel_sources[fk.name] = fk.source
        decls.append(f"void {fk.name}(const int8_t *I, const int8_t *W_p, const int32_t *bias_p, int8_t *out, "
                     "uint8_t *workspace);")
        decls.append(f"void {fk.name}_entry(void **args);")

    # -- files, one emulated run, summary -------------------------------------------------------------------
    from tileplan.codegen.pipeline import target_spec

    dim = hw.pe_array.rows
    if accel:
        from tileplan.codegen.targets.gemmini import max_block_len

        tdim, spad, acc_rows = next(iter(accel.values())).art.target
        emu_dims = (tdim, spad, acc_rows, max_block_len(tdim))
    else:
        try:
            t = target_spec(hw)
            from tileplan.codegen.targets.gemmini import max_block_len

            emu_dims = (t.dim, t.spad_rows, t.acc_rows, max_block_len(t.dim))
        except (CodegenError, StopIteration, ValueError):  # no Gemmini here: the default configuration's emulator
            emu_dims = (16, 16384, 1024, 4)
    from tileplan.codegen.pipeline import gemmini_config
    from tileplan.codegen.schedule import TargetSpec

    params_header = gemmini_config(TargetSpec(*emu_dims[:3])).params_header()
    in_names = [i.name for i in imported.inputs]
    out_names = [o.name for o in imported.outputs]
    summary = _summary(imported, accel, reasons, onnx_nodes, prog, plans, hw, options)
    _add_groups(summary, imported.model, accel, groups, options)
    phase("fusion")
    summary["notes"] = notes + summary["notes"]

    def manifest_of(summary_doc: dict[str, Any]) -> str:
        return json.dumps({"format": ARTIFACT_FORMAT, "model": model_name, "hardware": hw.name,
                           "inputs": [i.doc() for i in imported.inputs],
                           "outputs": [o.doc() for o in imported.outputs],
                           "steps": [{"name": s.name, "kind": s.kind, "function": s.function, "op": s.op,
                                      "onnx_nodes": s.onnx_nodes} for s in prog.steps],
                           "summary": summary_doc}, indent=1)

    def files_with(summary_doc: dict[str, Any]) -> dict[str, bytes]:
        """`files` with the manifest and README of `summary_doc` (the only files the summary is in)."""
        return {**files, "tileplan.json": manifest_of(summary_doc).encode(),
                "README.md": _readme(model_name, hw.name, prog, imported, summary_doc).encode()}

    files = render(prog, model_name=model_name, hardware=hw.name, dim=dim, timings=timings, emu_dims=emu_dims,
                   kernels=kernel_sources, host_sources=host_sources, decls=decls, manifest=manifest_of(summary),
                   readme=_readme(model_name, hw.name, prog, imported, summary), input_names=in_names,
                   output_names=out_names, params_header=params_header)
    phase("other")
    # the deferred work (cache entries) runs in a thread while this one waits for the build and the emulated run,
    # which hold no GIL (make's processes, the ctypes call)
    later = ThreadPoolExecutor(max_workers=1)
    later_done = [later.submit(task) for task in deferred]
    later.shutdown(wait=False)
    if options.emulate:
        try:
            feeds = _random_feeds(imported.inputs, options.seed + 1)
            run = emulate_files(files, feeds, cache=True, pre=pre)
            step_cycles = _add_cycles(summary, prog, run.cycles, run.dram_bytes)
            _add_group_cycles(summary, step_cycles)
        except NoToolchain as exc:
            summary["notes"].append(f"not emulated: {exc}")
        files = files_with(summary)
        phase("build_and_emulate")
    pre.wait()
    for done in later_done:
        done.result()
    summary["total"]["compile_seconds"] = round(time.perf_counter() - t0, 3)
    summary["total"]["phase_seconds"] = phases
    summary["total"]["phase_cpu_seconds"] = cpu_phases
    if progress:
        progress(total, total)
    return CompiledModel(summary, pack(files, short_ident(model_name)), summary["notes"])


def _cpu_seconds() -> float:
    """User + system seconds of this process and of its children waited for so far (the C compiler; worker
    processes once their pool has shut down)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _early_params_header(hw: Any) -> str | None:
    """gemmini_params.h of the emulator `hw`'s program will most likely run on (codegen.pipeline.target_spec's
    configuration), known before TVM is imported; None without a Gemmini target.  Only a guess for the
    background build: the artifact's own header is made later, and an object compiled against another one is
    not used (its key differs)."""
    from tileplan.codegen.emulator import GemminiConfig
    from tileplan.codegen.support import codegen_unsupported
    from tileplan.cost.gemmini import REQUEST_BYTES
    from tileplan.emittable import memory_rows

    if codegen_unsupported(hw):
        return None
    rows = memory_rows(hw.resolve())
    if rows is None:
        return None
    return GemminiConfig(dim=rows.dim, spad_rows=rows.spad_rows, acc_rows=rows.acc_rows,
                         max_bytes=int(REQUEST_BYTES)).params_header()


def _prebuild_later(pre: Any, model_name: str, hw: Any, params_header: str,
                    sources: list[str]) -> Callable[[str, bytes], None]:
    """runner.prebuild_later of `sources` (paths), with the artifact's Makefile, emulator and header files."""
    from tileplan.frontend.program import build_files
    from tileplan.frontend.runner import prebuild_later

    base = build_files(model_name, hw.name, params_header, [], [])
    return prebuild_later({k: v.encode() for k, v in base.items()}, sources, pre)


def _prebuild(pre: Any, model_name: str, hw: Any, params_header: str, sources: dict[str, str | None]) -> None:
    """runner.prebuild of `sources` (path -> C source; None: one of build_files'), with the artifact's
    Makefile, emulator and header files."""
    from tileplan.frontend.program import build_files
    from tileplan.frontend.runner import prebuild

    base = build_files(model_name, hw.name, params_header, [], [])
    files = {k: v.encode() for k, v in {**base, **{k: v for k, v in sources.items() if v is not None}}.items()}
    prebuild(files, list(sources), pre)


@dataclass
class HostPart:
    """The lowered host part of a program: its `main` (host calls and accelerator steps, in order) and each host
    function's C source (by C name), workspace bytes and C name (by Relax function name), prototypes."""

    main: Any
    sources: dict[str, str]
    workspace: dict[str, int]
    names: dict[str, str]
    decls: list[str]


def _host_digest() -> str:
    """Identifies the host lowering's code: its modules' sources, TVM's version and the MLAS Exp variant."""
    from pathlib import Path

    import tvm

    import tileplan.codegen.emit_c as emit_c
    import tileplan.frontend.host_ops as host_ops
    import tileplan.frontend.ort_math as ort_math

    h = hashlib.sha256(str(tvm.__version__).encode())
    for mod in (host_ops, emit_c, ort_math):
        h.update(Path(str(mod.__file__)).read_bytes())
    h.update(ort_math.exp_variant().encode())  # (which MLAS Exp kernel the C states: the compiling CPU's)
    h.update(b"C names: program.short_ident, 96, distinct")  # (the cached entries carry the host functions' C names)
    return h.hexdigest()[:16]


def _fault_ends_worker() -> None:
    """Initializer of the compile's forked pools: a fatal signal ends the worker at once, after Python's traceback.
    The worker inherits TVM's C++ backtrace handler for SIGSEGV (installed when libtvm loads); run in a child forked
    from a process with threads it can spin instead of ending (seen: a forked child spinning 18 minutes on a core),
    and a pool waits for a worker that neither answers nor dies, so a native fault (HiGHS, generated code) would hang
    the compile instead of failing it."""
    import faulthandler
    import signal

    faulthandler.disable()  # (enabled, it keeps the handler it found, TVM's, as the one to chain to)
    for sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT):
        signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(AttributeError, ValueError, OSError, RuntimeError):  # stderr without a file descriptor
        faulthandler.enable()


_EMIT_JOBS: list[tuple[Any, str, int]] = []  # what forked workers of _emit_host_functions read


def _emit_one(i: int) -> Any:
    from tileplan.frontend import host_ops

    return host_ops.emit_host_function(*_EMIT_JOBS[i])


def _emit_host_functions(jobs: list[tuple[Any, str, int]], workers: int) -> list[Any]:
    """host_ops.emit_host_function of every (PrimFunc, C name, outputs), in order; with `workers` > 1 in that
    many forked processes (each function's C is made alone: the same text either way)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _EMIT_JOBS
    if workers < 2 or len(jobs) < 8 or "fork" not in multiprocessing.get_all_start_methods():
        from tileplan.frontend import host_ops

        return [host_ops.emit_host_function(*j) for j in jobs]
    _EMIT_JOBS = jobs
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                                initializer=_fault_ends_worker) as pool:
            return list(pool.map(_emit_one, range(len(jobs)), chunksize=max(1, len(jobs) // (4 * workers))))
    finally:
        _EMIT_JOBS = []


def lower_host_cached(compat: Any, workers: int = 1,
                      on_units: Callable[[list[str]], Callable[[str, str], None]] | None = None,
                      defer: list[Callable[[], None]] | None = None) -> HostPart:
    """host_ops.lower_host and the C of every host function, cached on disk by the module it starts from (TVM's
    JSON of it) and the lowering's code: a warm compile of a transformer spends most of its time here
    otherwise (bert_layer: 26 s of lowering on the shared machine, 0.3 s to key it).  `workers` > 1: the host
    functions' C is made in that many forked processes (the same text).

    `on_units(stems)`: called once with the stems of every file of `host_units(part.sources)` (known from the
    functions' names, before any C is printed); the function it returns is called with each file (stem, C) as soon
    as its functions' C is made (they are printed file by file, in `host_unit_groups` order), so the C compiler can
    start on it while the rest are printed; on a cache hit, with every file at once.  `defer`: the cache entry's writing
    (TVM's JSON of the lowered module, ~0.2 s of ViT-B/16's host thread) is appended there for the caller to run
    later, off the compile's critical path; without it the entry is written here."""
    import tvm

    from tileplan.codegen.emulator.build import default_cache_dir
    from tileplan.frontend import host_ops
    from tileplan.frontend.program import short_ident

    key = hashlib.sha256(tvm.ir.save_json(compat).encode() + _host_digest().encode()).hexdigest()[:32]
    path = default_cache_dir() / "host" / f"{key}.json"
    if path.exists():
        try:
            d = json.loads(path.read_text())
            part = HostPart(tvm.ir.load_json(d["main"]), d["sources"], d["workspace"], d["names"], d["decls"])
        except (ValueError, KeyError, TypeError, RuntimeError):
            pass  # a damaged entry is made again
        else:
            if on_units is not None:
                files = host_units(part.sources)
                each = on_units(list(files))
                for stem, text in files.items():
                    each(stem, text)
            return part
    from tvm import tirx

    lowered = host_ops.lower_host(compat)
    main = lowered["main"]
    part = HostPart(main, {}, {}, {}, [])
    n_outputs = _output_counts(main)
    jobs, used = [], set()
    for gv, func in lowered.functions.items():
        if isinstance(func, tirx.PrimFunc):  # (C names distinct: `a.b` and `a_b` are both tp_host_a_b)
            cname, k = short_ident(gv.name_hint, "tp_host_"), 1
            while cname in used:
                k += 1
                cname = short_ident(f"{gv.name_hint}_{k}", "tp_host_")
            used.add(cname)
            jobs.append((gv.name_hint, func, cname, n_outputs.get(gv.name_hint, 1)))
    # printed file by file (each function's C is made alone: the order changes no text); the part's dicts and
    # prototypes keep the lowered module's order
    # (without `on_unit`, all at once: one pool of `workers` processes)
    by_cname = {j[2]: i for i, j in enumerate(jobs)}
    made: list[Any] = [None] * len(jobs)
    units = host_unit_groups(by_cname) if on_units is not None else [("", list(by_cname))]
    on_unit = on_units([stem for stem, _ in units]) if on_units is not None else None
    for stem, group in units:
        idx = [by_cname[c] for c in group]
        for i, fn in zip(idx, _emit_host_functions([jobs[i][1:] for i in idx], workers)):
            made[i] = fn
        if on_unit is not None:
            on_unit(stem, host_unit_text(stem, group, {jobs[i][2]: made[i].source for i in idx}))
    for (hint, _, cname, n_out), fn in zip(jobs, made):
        part.sources[cname], part.workspace[hint], part.names[hint] = fn.source, fn.workspace_bytes, cname
        part.decls.append(_host_decl(fn, n_out))

    def write_entry() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"main": tvm.ir.save_json(main), "sources": part.sources,
                                   "workspace": part.workspace, "names": part.names, "decls": part.decls}))
        os.replace(tmp, path)

    if defer is None:
        write_entry()
    else:
        defer.append(write_entry)
    return part


HOST_UNIT_FUNCTIONS = 24  # host functions per C file (translation unit) at most
HOST_UNITS_MAX = 8  # ... unless that makes more files than this (the build compiles them in parallel)


def host_units(sources: dict[str, str]) -> dict[str, str]:
    """The host functions' C (by C name) grouped into few files (file stem -> C): each file the C compiler runs on
    costs its start and headers again (ViT-B/16's 178 host functions one per file: 9.4 CPU s of gcc -O2, 5.4 s
    in one file).  A file holds the functions in C-name order with one copy of the includes and integer helpers
    every emitted function starts with; a lone function keeps its own name and text."""
    return {stem: host_unit_text(stem, group, sources) for stem, group in host_unit_groups(sources)}


def host_unit_groups(names: Iterable[str]) -> list[tuple[str, list[str]]]:
    """(file stem, the C names it holds, in order) of every file `host_units` makes of the host functions named
    `names`: which function goes to which file depends on the names alone (the lowering knows them before it
    prints any function's C, so a file can be compiled as soon as its own functions are printed)."""
    names = sorted(names)
    if len(names) < 2:
        return [(n, [n]) for n in names]
    units = max(1, min(HOST_UNITS_MAX, -(-len(names) // HOST_UNIT_FUNCTIONS)))
    per = -(-len(names) // units)
    taken = set(names)
    out = []
    for i in range(0, len(names), per):
        group = names[i:i + per]
        if len(group) == 1:
            out.append((group[0], group))
            continue
        stem = f"tp_host_unit{i // per}"
        while stem in taken:
            stem += "_"
        out.append((stem, group))
    return out


def host_unit_text(stem: str, group: list[str], sources: dict[str, str]) -> str:
    """The C of `host_units`' file `stem` holding the functions `group` (`host_unit_groups`)."""
    from tileplan.codegen.emit_c import _INT_HELPERS

    if len(group) == 1 and stem == group[0]:
        return sources[stem]
    shared = ["#include <math.h>", "#include <stdint.h>", *_INT_HELPERS]
    lines = [f"/* {stem}: the host functions", *[f"   {n}" for n in group], "*/", *shared, ""]
    for n in group:
        lines += [ln for ln in sources[n].splitlines() if ln not in shared]
    return "\n".join(lines) + "\n"


def _solve(layer: Any, hw: Any, options: ScheduleOptions) -> Plan:
    return make_plan(layer, hw, options)


def _plan_and_generate(ops: list[_Accel], hw: Any, options: ScheduleOptions, stream: str, planner: Planner,
                       workers: int, progress: Callable[[int], None], phase: Callable[[str], None],
                       forked: Callable[[], None] | None = None,
                       budget: tuple[float | None, list[str]] = (None, []),
                       on_kernel: Callable[[KernelCode], None] | None = None) -> dict[str, Plan]:
    """Plan every distinct layer of `ops` once and generate every distinct kernel once, filling each op's plan
    and kernel (or its reason for staying on the host).  With `workers` > 1 the solves and code generation run in
    forked processes: a planner that can `lookup` / `save` (StorePlanner) is asked in this process and only
    its misses are solved there; any other planner runs here, in parallel with code generation.  `forked` is
    called once the worker processes exist (after the first task was handed to them), while they work; never
    without workers. `on_kernel`: called with each distinct kernel the workers made, as it arrives (in the pool's
    result thread; never without workers)."""
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor, as_completed

    from tileplan.codegen.registry import CodegenError
    from tileplan.frontend import partition
    from tileplan.frontend.program import short_ident

    lkeys = [a.spec.layer.model_dump_json(exclude={"name", "count"}) for a in ops]
    firsts = {k: a for k, a in reversed(list(zip(lkeys, ops)))}  # the first op of each distinct layer
    plans: dict[str, Plan] = {}
    errors: dict[str, str] = {}
    pool = None
    if workers > 1 and len(ops) > 1 and "fork" in multiprocessing.get_all_start_methods():
        # What each worker imported for its first solve and kernel (the mappers with Pyomo and HiGHS, 0.14-0.18
        # CPU s; the code generator's pipeline) is imported here once, before the fork, and shared
        from tileplan.codegen import pipeline  # noqa: F401
        from tileplan.mappers.base import get_mapper

        get_mapper(options.mapper)
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                                initializer=_fault_ends_worker)
    if pool is None:  # in this process: op by op, so progress moves with every op planned and generated
        return _plan_and_generate_serially(ops, lkeys, hw, options, stream, planner, progress, phase, budget)
    ex = pool
    try:
        by_layer: dict[str, list[_Accel]] = {}
        for k, a in zip(lkeys, ops):
            by_layer.setdefault(k, []).append(a)
        kernels: dict[tuple[Any, ...], Any] = {}

        def generate_layer(k: str) -> None:
            """Submit the kernels of every op of layer `k` (planned): each distinct kernel once, named after its
            first op in program order (ops with one kernel key have one layer). (The library's tilings, which
            _keep_library_tiling compares them with, are costed there without generating them.)"""
            for a in by_layer[k]:
                a.plan = plans[k]
                kkey = (*partition.kernel_key(a.spec), a.plan.mapping.model_dump_json(), stream)
                if kkey not in kernels:
                    kernels[kkey] = ex.submit(generate_kernel, codegen_spec(a.spec), hw, a.plan.mapping,
                                              short_ident(a.qop.name, "tpk_"), stream)
                    if on_kernel is not None:
                        kernels[kkey].add_done_callback(_made(on_kernel))
                a.art = kernels[kkey]

        solving: dict[Future[Plan], str] = {}
        for k, a in firsts.items():
            cached = planner.lookup(a.spec.layer, hw, options) if isinstance(planner, StorePlanner) else None
            if cached is not None:
                plans[k] = cached
            elif isinstance(planner, StorePlanner) or planner is default_planner:
                solving[ex.submit(_solve, a.spec.layer, hw, options)] = k
            else:
                try:
                    plans[k] = planner(a.spec.layer, hw, options)
                except (MappingInfeasible, InputError) as exc:
                    errors[k] = f"no accelerator plan: {exc}"
        for k in firsts:
            if k in plans:
                generate_layer(k)
        if forked is not None and (solving or kernels):  # (the pool forks its workers at the first task)
            forked()
        # code generation starts as each layer's solve ends (no barrier between the phases)
        for fut in as_completed(solving):
            k = solving[fut]
            try:
                plans[k] = fut.result()
                if isinstance(planner, StorePlanner):
                    planner.save(plans[k], hw)
            except (MappingInfeasible, InputError) as exc:
                errors[k] = f"no accelerator plan: {exc}"
                continue
            generate_layer(k)
        phase("plan")
        for k, a in zip(lkeys, ops):
            if k in errors:
                a.reason = errors[k]
        for i, a in enumerate(ops):
            if a.plan is not None:
                try:
                    a.art = a.art.result() if isinstance(a.art, Future) else a.art
                    if isinstance(a.art, Exception):
                        raise a.art
                except (CodegenError, MappingInfeasible) as exc:
                    a.art, a.reason = None, f"no accelerator code: {exc}"
            progress(i + 1)
        phase("codegen")
        # the workers' CPU (their solves and kernels) is counted once they are waited for, here: a phase of its
        # own, not the next phase's (it read as the host part's 4.7 CPU s of ResNet-50's 11)
        ex.shutdown()
        phase("workers")
    finally:
        ex.shutdown()
    return plans


def _made(on_kernel: Callable[[KernelCode], None]) -> Callable[[Any], None]:
    """A future's done-callback: `on_kernel` of the kernel it made (nothing for a failed one, which the compile
    reports per op; an error of `on_kernel` itself is dropped: the build compiles that kernel then)."""

    def done(fut: Any) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        try:
            on_kernel(fut.result())
        except Exception:  # noqa: BLE001 (a background head start only)
            pass

    return done


def _plan_and_generate_serially(ops: list[_Accel], lkeys: list[str], hw: Any, options: ScheduleOptions, stream: str,
                                planner: Planner, progress: Callable[[int], None],
                                phase: Callable[[str], None],
                                budget: tuple[float | None, list[str]] = (None, [])) -> dict[str, Plan]:
    """`_plan_and_generate` without worker processes: each op in program order gets its layer's plan (planned
    at its first op) and its kernel (generated at its first op), then counts as done. `budget`: (seconds of
    planning after which the layers left are planned by gemmini-auto, the notes to say so in)."""
    from tileplan.codegen.registry import CodegenError
    from tileplan.frontend import partition
    from tileplan.frontend.program import short_ident

    plans: dict[str, Plan] = {}
    errors: dict[str, str] = {}
    kernels: dict[tuple[Any, ...], Any] = {}
    limit, notes = budget
    planning, heuristic = 0.0, []
    for i, (k, a) in enumerate(zip(lkeys, ops)):
        if k not in plans and k not in errors:
            t0 = time.perf_counter()
            spent = limit is not None and planning > limit and options.mapper != "gemmini-auto"
            try:
                if spent:  # the compile's planning budget is spent: the library's tiling, not a search
                    plans[k] = planner(a.spec.layer, hw, options.model_copy(update={"mapper": "gemmini-auto"}))
                    heuristic.append(a.qop.name)
                else:
                    plans[k] = planner(a.spec.layer, hw, options)
            except (MappingInfeasible, InputError) as exc:
                errors[k] = f"no accelerator plan: {exc}"
            planning += time.perf_counter() - t0
            phase("plan")
        if k in errors:
            a.reason = errors[k]
        else:
            a.plan = plans[k]
            kkey = (*partition.kernel_key(a.spec), a.plan.mapping.model_dump_json(), stream)
            if kkey not in kernels:
                kernels[kkey] = _try(generate_kernel, a.spec, hw, a.plan.mapping, short_ident(a.qop.name, "tpk_"), stream)
                phase("codegen")
            if isinstance(kernels[kkey], (CodegenError, MappingInfeasible)):
                a.art, a.reason = None, f"no accelerator code: {kernels[kkey]}"
            else:
                a.art = kernels[kkey]
        progress(i + 1)
    if heuristic:
        notes.append(f"planning budget spent ({limit:g} s, compile_plan_budget_s): {len(heuristic)} distinct layer(s) "
                     f"planned by gemmini-auto (Gemmini's hand-written tiling) instead of {options.mapper}, e.g. "
                     + ", ".join(heuristic[:4]) + (", ..." if len(heuristic) > 4 else ""))
    return plans


def _keep_library_tiling(ops: list[_Accel], hw: Any, stream: str) -> None:
    """What the library's tiling costs for each op as this program runs it, and no op slower than that.

    A program's kernel may do more than the bare layer its plan was costed for (int32 accumulators stored for
    the host's requantisation, padding rows read from memory for an input zero point), and the library would
    have to do the same to run the op; so the library's tiling (the plan's baseline mapping) is generated with
    the op's own epilogue and ABI in the library's load order, and its modelled cycles are the op's baseline
    (`library_cycles`).  Where that, or the library's tiling in Tileplan's instruction stream, is modelled
    faster than the plan's kernel (code generation may have had to shrink the plan's tiles), the faster kernel
    is the one the program runs (`library_tiling` says so)."""
    from tileplan.frontend import partition
    from tileplan.frontend.program import short_ident

    chosen: dict[tuple[Any, ...], tuple[Any, str, float]] = {}
    for a in ops:
        if a.art is None or a.plan is None or a.plan.baseline is None:
            continue
        key = (*partition.kernel_key(a.spec), a.plan.mapping.model_dump_json())
        if key not in chosen:
            chosen[key] = _fastest_of_plan_and_library(a, hw, stream, short_ident(a.qop.name, "tpk_"))
        a.art, how, a.library_cycles = chosen[key]
        if how:
            a.library_tiling = ("the library's tiling" + (" in the library's load order" if how == "baseline" else
                                                          " in Tileplan's instruction stream")
                                + ": the plan's own kernel was modelled slower")


def _fastest_of_plan_and_library(a: _Accel, hw: Any, stream: str, name: str) -> tuple[Any, str, float]:
    """(the kernel to run, how it differs from the plan's: "" / "baseline" / `stream`, the library tiling's modelled
    cycles) for one op. A kernel is generated only to be run: the library's tiling (and the same tiling in
    Tileplan's stream) is costed from its realisation (`kernel_cycles`, the modelled cycles its kernel would carry)
    and generated only where it is the faster."""
    assert a.plan is not None and a.plan.baseline is not None
    if stream == "baseline":  # the plan's kernel already runs in the library's load order
        return a.art, "", float(a.art.model_cycles)
    bmap = a.plan.baseline.mapping
    lib_cycles = _try(kernel_cycles, a.spec, hw, bmap, "baseline")
    if isinstance(lib_cycles, Exception):  # the library's tiling cannot be generated with this ABI
        return a.art, "", float(a.plan.baseline.metrics.cycles)
    if not lib_cycles < float(a.art.model_cycles):
        return a.art, "", lib_cycles
    lib = _try(generate_kernel, a.spec, hw, bmap, name, "baseline")
    if isinstance(lib, Exception):
        return a.art, "", float(a.plan.baseline.metrics.cycles)
    alt_cycles = _try(kernel_cycles, a.spec, hw, bmap, stream)
    if not isinstance(alt_cycles, Exception) and alt_cycles < float(lib.model_cycles):
        alt = _try(generate_kernel, a.spec, hw, bmap, name, stream)
        if not isinstance(alt, Exception):
            return alt, stream, lib_cycles
    return lib, "baseline", lib_cycles


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), or the CodegenError / MappingInfeasible it raised (reported per op by the caller)."""
    from tileplan.codegen.registry import CodegenError

    try:
        return fn(*args)
    except (CodegenError, MappingInfeasible) as exc:
        return exc


def _random_feeds(inputs: list[Any], seed: int) -> dict[str, np.ndarray]:
    """Inputs for the compile-time emulated run: standard normal floats; integers 0 or 1. An integer input is
    mostly an index (token ids into an embedding table, positions) or a mask: values from the dtype's whole range
    index far past any table, and the host's Gather (TVM's take, unchecked) would read there; 0 and 1 are valid
    ids, mask values and booleans alike (the run measures cycles, which do not depend on them)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in inputs:
        dt = np.dtype(i.dtype)
        if np.issubdtype(dt, np.integer):
            feeds[i.name] = rng.integers(0, 2, size=i.shape, dtype=dt)
        elif dt == np.bool_:
            feeds[i.name] = rng.integers(0, 2, size=i.shape).astype(bool)
        else:
            feeds[i.name] = rng.standard_normal(i.shape).astype(dt)
    return feeds


def _output_counts(main: Any) -> dict[str, int]:
    """Outputs of each PrimFunc `main` calls (by name; its first call_tir's), read in one walk over `main` (a
    walk per function was quadratic: ViT-B/16's 161 host functions, 0.11 CPU s against 0.002)."""
    from tvm import relax

    out: dict[str, int] = {}
    for block in main.body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call) and v.op.name == "relax.call_tir" and v.args[0].name_hint not in out:
                out[v.args[0].name_hint] = len(v.ty.fields) if isinstance(v.ty, relax.TupleType) else 1
    return out


def _host_decl(fn: Any, outputs: int) -> str:
    from tileplan.frontend.program import CTYPE

    n_in = len(fn.params) - outputs
    args = [f"{'const ' if i < n_in else ''}{CTYPE[d]} *p{i}" for i, (d, _) in enumerate(fn.params)]
    return f"void {fn.name}({', '.join(args + ['uint8_t *workspace'])});"


def _const_tensor(a: np.ndarray) -> Any:
    from tileplan.frontend.program import Tensor

    t = Tensor(0, str(a.dtype), a.shape, "const")
    t.data = a
    return t


def _prelay(spec: Any, pd: dict[str, int], pack: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """W_p[G_p, R_p, S_p, C_p, K_p] int8 and bias_p[G_p, K_p] int32, zero-padded: what the kernel reads (`pack`
    groups packed per group: block-diagonal weights, the bias in the same order)."""
    from tileplan.codegen.targets.gemmini import pack_weights

    weights = pack_weights(spec.weights, pack)
    g, r, s, c, k = weights.shape
    wp = np.zeros((pd["G"], pd["R"], pd["S"], pd["C"], pd["K"]), np.int8)
    wp[:g, :r, :s, :c, :k] = weights
    bp = np.zeros((pd["G"], pd["K"]), np.int32)
    bp[:g, :k] = spec.bias.reshape(g, k)
    return wp, bp


QDQ_NODES = {"QuantizeLinear", "DequantizeLinear"}
MAC_NODES = {"Conv", "MatMul", "Gemm", "ConvInteger", "MatMulInteger", "ConvTranspose", "Einsum"}


def _node_macs(node: Any, shapes: dict[str, tuple[int, ...]]) -> int:
    """MACs of a Conv / ConvTranspose / MatMul / Gemm / Einsum / LSTM / GRU node from its inferred shapes (0 for
    other nodes)."""
    try:
        if node.op_type in ("Conv", "ConvInteger"):
            w = shapes[node.input[1]]
            return int(np.prod(shapes[node.output[0]])) * int(np.prod(w[1:]))
        if node.op_type in ("ConvTranspose", "ConvTransposeInteger"):
            # W is [C_in, C_out / group, k...]: each input element is multiplied by C_out / group x k... weights
            w = shapes[node.input[1]]
            return int(np.prod(shapes[node.input[0]])) * int(np.prod(w[1:]))
        if node.op_type == "Einsum":
            return _einsum_macs(node, shapes)
        if node.op_type in recurrent.RECURRENT_OPS:
            return recurrent.recurrent_macs(*(shapes[node.input[i]] for i in range(3)))
        if node.op_type in ("MatMul", "MatMulInteger", "Gemm"):
            a, y = shapes[node.input[0]], shapes[node.output[0]]
            trans_a = any(at.name == "transA" and at.i for at in node.attribute)
            k = a[-2] if trans_a and len(a) >= 2 else a[-1]
            return int(np.prod(y)) * int(k)
    except (KeyError, IndexError):
        return 0
    return 0


def _einsum_macs(node: Any, shapes: dict[str, tuple[int, ...]]) -> int:
    """An Einsum of two or more operands multiplies once per point of its whole index space (every letter of the
    equation, the ellipsis' dimensions included); one operand (a transpose, a sum) multiplies nothing."""
    eq = next((a.s.decode() for a in node.attribute if a.name == "equation"), "").replace(" ", "")
    terms = eq.split("->")[0].split(",")
    if len(terms) < 2 or len(terms) != len(node.input):
        return 0
    sizes: dict[str, int] = {}
    ellipsis: tuple[int, ...] = ()
    for term, name in zip(terms, node.input):
        shape = shapes[name]
        if "..." in term:
            head, tail = term.split("...")
            n_ell = len(shape) - len(head) - len(tail)
            ell = shape[len(head):len(head) + n_ell]
            if len(ell) > len(ellipsis) or (len(ell) == len(ellipsis) and np.prod(ell) > np.prod(ellipsis)):
                ellipsis = tuple(ell)  # broadcast: the larger operand's dimensions
            dims = list(zip(head, shape[:len(head)])) + list(zip(tail, shape[len(shape) - len(tail):]))
        else:
            dims = list(zip(term, shape))
        for letter, d in dims:
            sizes[letter] = max(sizes.get(letter, 1), int(d))
    return int(np.prod(list(sizes.values()), dtype=np.int64)) * int(np.prod(ellipsis, dtype=np.int64))


MOVES_DATA = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Concat", "Split", "Gather",
              "Expand", "Pad", "Identity", "Tile", "DepthToSpace", "SpaceToDepth", "Resize", "Upsample", "Cast",
              "ScatterND", "GatherElements", "Where", "CenterCropPad"}
REDUCES = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "ReduceSum",
           "ReduceMin", "ArgMax", "TopK"}
ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Relu", "Clip", "Sigmoid", "Tanh", "Erf", "Sqrt", "Pow", "Exp", "Log",
               "HardSwish", "HardSigmoid", "LeakyRelu", "Gelu", "Abs", "Neg", "Max", "Min", "Reciprocal",
               "Softplus", "Elu", "Selu", "PRelu", "Not", "Equal", "Less", "Greater", "And", "Or", "Sign", "Floor",
               "Ceil", "Round"}
ROW_STATISTICS = {"Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
                  "GroupNormalization", "LpNormalization", "MeanVarianceNormalization"}
# ops whose result is a shape or a filled tensor: no input value enters any arithmetic
SHAPES_AND_FILLS = {"Shape", "Size", "ConstantOfShape", "Range", "EyeLike"}
# ops with boolean results, or that combine booleans: a mask's logic (attention masks, NaN guards)
LOGICAL = {"Not", "And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf"}
# reductions that square, take absolute values, roots, logarithms or exponentials: norms
NORMS = {"ReduceL2", "ReduceL1", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd"}


def _runtime_quantized(name: str, g: onnx_graph.GraphIndex) -> bool:
    """Whether `name` is (the dequantisation of) a DynamicQuantizeLinear's output: quantized at run time."""
    p = g.producer.get(name)
    if p is not None and p.op_type == "DequantizeLinear":
        p = g.producer.get(p.input[0])
    return p is not None and p.op_type == "DynamicQuantizeLinear"


def _float_uses(node: Any, g: onnx_graph.GraphIndex) -> list[str]:
    """The ops (or "a graph output") that use a product's float result, or that of the one Relu / Clip after it,
    other than a QuantizeLinear: why the quantized pattern cannot take it whole."""
    out = node.output[0]
    users = g.consumers.get(out, [])
    if len(users) == 1 and users[0].op_type in ("Relu", "Clip"):
        out = users[0].output[0]
        users = g.consumers.get(out, [])
    found = sorted({u.op_type for u in users if u.op_type != "QuantizeLinear"})
    if out in g.outputs:
        found.append("a graph output")
    return found


def _host_reason(node: Any, g: onnx_graph.GraphIndex, shapes: dict[str, tuple[int, ...]],
                 reasons: dict[str, str]) -> str:
    """Why `node` runs on the host: the partitioner's reason for a quantized conv / matmul it matched, else
    what the node is and what the accelerator (Gemmini's multiply-accumulate array) would need to run it."""
    if node.name in reasons:
        return reasons[node.name]
    split = dynamic.host_reason(node, g.producer)
    if split is not None:
        return split
    op = node.op_type
    if op == "Conv" and len(shapes.get(node.input[1], ())) == 5:
        return "a 3-D convolution: the accelerator's kernels are 1-D and 2-D"
    if op in ("MatMul", "Gemm", "Conv", "MatMulInteger", "ConvInteger") and _runtime_quantized(node.input[0], g):
        return (f"{op} of an input quantized at run time (DynamicQuantizeLinear: onnxruntime's quantize_dynamic): its "
                "scale and zero point exist only when the model runs, while an accelerator kernel takes the input "
                "zero point folded into its bias and padding, and its requantisation scale, at compile time; "
                "computed on the host (quantize statically, quantize_static, to offload it)")
    if op in ("MatMul", "Gemm", "Conv"):
        producers, inits = g.producer, g.inits
        consumers = g.consumers.get(node.output[0], [])

        def dequantized(name: str) -> bool:
            p = producers.get(name)
            return p is not None and p.op_type == "DequantizeLinear"

        def is_weight(name: str) -> bool:
            p = producers.get(name)
            return name in inits or (p is not None and p.op_type == "DequantizeLinear" and p.input[0] in inits)

        if not dequantized(node.input[0]):
            return (f"{op} on a float input (not DequantizeLinear of int8): the quantizer left it in float, so "
                    "there is no int8 operand for the accelerator")
        if not is_weight(node.input[1]):
            if op == "MatMul" and is_weight(node.input[0]) and dequantized(node.input[1]):
                return ("MatMul with the constant weight as its first operand (W @ X, e.g. Mamba's dt_proj.weight @ "
                        "x) and an activation as its second: the accelerator's patterns take a weight as the "
                        "second operand (X @ W) or two non-constant operands read at run time, and this one matched "
                        "neither; computed in float on the host between dequantize and quantize")
            if not dequantized(node.input[1]):
                return (f"{op} of two activations whose second operand is float (not DequantizeLinear of int8): "
                        "there is no int8 operand for the accelerator")
            if op != "MatMul":
                return (f"{op} of two activations: Tileplan offloads activation x activation products as "
                        "dequantize -> MatMul -> quantize only")
            if not consumers or not all(c.op_type == "QuantizeLinear" for c in consumers):
                used = sorted({c.op_type for c in consumers}) or ["a graph output"]
                return (f"MatMul of two activations whose float result feeds {', '.join(used)} before any "
                        "QuantizeLinear: the accelerator stores int8 (or int32 for the host's requantisation), "
                        "not float")
            return ("MatMul of two activations not matched as dequantize(a), dequantize(b) -> MatMul -> quantize "
                    "(its result goes through more than one consumer): computed in float on the host")
        if not dequantized(node.input[1]):
            return f"{op} with float weights (no DequantizeLinear): the accelerator multiplies int8 weights"
        if len(node.input) > 2 and node.input[2] and not dequantized(node.input[2]) \
                and node.input[2] not in inits:
            p = producers.get(node.input[2])
            if p is not None and p.op_type == "Identity" and p.input[0] in inits:
                return (f"{op} with a float bias through an Identity (torch.onnx's sharing of equal tensors): "
                        "onnxruntime's WeightBiasQuantization does not look through it and computes the "
                        f"{op} in float, so the host does too")
            return f"{op} whose bias is computed at run time: the kernel's bias is a constant"
        scaled = [a.name for a in node.attribute if a.name in ("alpha", "beta") and a.f != 1.0]
        if op == "Gemm" and scaled:
            return (f"Gemm with {' and '.join(scaled)} other than 1: Tileplan's patterns take a Gemm's plain "
                    "product and bias (dequantize -> Gemm -> [bias] -> [quantize]), so it is computed in float on "
                    "the host")
        if not consumers or not all(c.op_type in ("QuantizeLinear", "Relu", "Clip", "Add") for c in consumers):
            used = sorted({c.op_type for c in consumers}) or ["a graph output"]
            return (f"{op} whose float result feeds {', '.join(used)}, not matched as dequantize -> {op} -> "
                    "[bias] with a float result (the pattern Tileplan offloads with int32 accumulators out and the "
                    "host's float conversion): computed in float on the host")
        float_uses = _float_uses(node, g)
        if float_uses:
            return (f"{op} whose float result (before any QuantizeLinear) is used by {', '.join(float_uses)}: "
                    "the accelerator stores one result, quantized, and onnxruntime too computes this unit in float "
                    "(its QDQ fusion needs a lone QuantizeLinear after the op; a QAT export quantizes each layer's "
                    "input, not its output): computed in float on the host")
        return (f"{op} not matched as dequantize -> {op} -> [bias] -> [Relu/Clip] -> quantize (its result goes "
                "through more than one consumer or an op the pattern does not cover): computed in float on the host")
    if op in recurrent.RECURRENT_OPS:
        return (f"{op}: a recurrence (each step's products multiply the previous step's state, one small "
                "matrix-vector product after another) that onnxruntime's static quantizer leaves in float: no int8 "
                "operand for the accelerator; the host computes it in float32 as ONNX defines it")
    if op == "ConvTranspose" and node.input[1] in g.inits and not any(
            c.op_type == "QuantizeLinear" for c in g.consumers.get(node.output[0], [])):
        return ("ConvTranspose with float weights and a float result (onnxruntime's quantizer has no QLinear form "
                "of it and left it float; onnxruntime computes it in float with those weights, which the host "
                "reproduces): no int8 product for the accelerator")
    if op in ("ConvTranspose", "ConvTransposeInteger"):
        return ("transposed convolution not of the form Tileplan lowers to the accelerator (2-D, quantized int8 "
                "weights, its result quantized alone, no dilation, groups or output_shape: one stride-1 Conv per "
                "output phase + DepthToSpace); computed on the host")
    mode = onnx_graph.attr(node, "mode", b"nearest") if op in ("Resize", "Upsample") else b"nearest"
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "nearest":
        return (f"{op} ({mode}) interpolates: each output a weighted sum of neighbouring inputs with weights that "
                "depend on its position, not a product with one weight matrix the array holds; computed on the host")
    if op in MOVES_DATA:
        return (f"{op} moves or selects values without arithmetic: nothing for the multiply-accumulate array; "
                "the host copies them")
    if op in SHAPES_AND_FILLS:
        return (f"{op} reads a tensor's shape or fills a tensor with values that depend on no input value: no "
                "arithmetic for the multiply-accumulate array; the host writes it")
    if op in LOGICAL:
        return (f"{op} compares values or combines boolean masks (boolean results, e.g. an attention mask's logic): "
                "no multiply-accumulate; computed on the host")
    if op in NORMS:
        return (f"{op}: a norm per reduced row (squares, absolute values, a root, a logarithm or an exponential of "
                "its own input), no product with a second operand the array could hold; computed on the host")
    if op in REDUCES:
        return (f"{op} reduces or compares values without multiplying: the array only multiply-accumulates (its "
                "mvout pooling applies to a conv the accelerator runs, which this input is not fused into)")
    if op == "Add":
        return ("elementwise Add of activations: no matrix product for the array; Tileplan has no kernel for "
                "Gemmini's accumulator-based residual add, so the host computes it (float between dequantize and "
                "quantize, as onnxruntime does)")
    if op in ELEMENTWISE:
        from_dq = any(g.producer.get(i) is not None and g.producer[i].op_type == "DequantizeLinear"
                      for i in node.input if i)
        return (f"elementwise {op}: no matrix product for the array (Gemmini's activations are only ReLU and "
                "clipping on a result it computes); " + (
                    "the host computes it in float between dequantize and quantize" if from_dq else
                    "its inputs are not dequantized int8 (index, shape or mask arithmetic, or float the quantizer "
                    "left alone): the host computes it as ONNX defines it"))
    if op == "AffineGrid":
        return ("AffineGrid builds a sampling grid from theta (each output point its 2 x 3 (or 3 x 4) affine map of "
                "a normalised coordinate: 3 multiply-adds per coordinate, theta computed at run time; onnxruntime "
                "has no integer AffineGrid): no int8 product for the array; computed in float on the host")
    if op == "Col2Im":
        return ("Col2Im (torch's F.fold) adds overlapping patches back into an image: each pixel a sum of the "
                "column values that cover it, no product with a weight the array holds; computed in float on the "
                "host in onnxruntime's order")
    if op == "Det":
        return ("Det: each matrix's determinant by a pivoted LU factorisation (a row search for the pivot, "
                "divisions and a product of the diagonal: sequential, data-dependent, in float; onnxruntime has no "
                "integer Det): nothing for the multiply-accumulate array; computed on the host as onnxruntime's "
                "Eigen does")
    if op in ("DFT", "STFT"):
        return (f"{op}: a Fourier transform in float (onnxruntime's radix-2 FFT or Bluestein's algorithm, complex "
                "butterflies with cos / sin twiddles; a DFT as a product with an int8 matrix would round the "
                "twiddles, and onnxruntime has no quantized one): computed on the host as onnxruntime computes it")
    if op == "DeformConv":
        return ("DeformConv samples its input bilinearly at positions computed at run time (its offsets: a "
                "data-dependent gather and weighted sum per kernel tap), then multiplies the samples by its weights "
                "in float (onnxruntime has no integer DeformConv): computed on the host as onnxruntime computes it")
    if op == "GridSample":
        return ("GridSample reads its input at positions computed at run time (the grid) and interpolates between "
                "the neighbours it finds there: a data-dependent gather and weighted sum, not a product with a "
                "weight matrix the array holds; computed on the host")
    if op == "BatchNormalization":
        tensor = node.input[0]
        src = g.producer.get(tensor)
        while src is not None and src.op_type in QDQ_NODES and src.input:
            tensor = src.input[0]
            src = g.producer.get(tensor)
        after = (f"it follows a {src.op_type}" if src is not None else
                 "its input is a constant of the model" if tensor in g.inits else "its input is a graph input")
        if int(onnx_graph.attr(node, "training_mode", 0)):
            return ("BatchNormalization in training mode (training_mode=1: normalised by the mean and variance "
                    f"of its own input at every run, not by the running mean and variance it is given; {after}): per-channel statistics "
                    "and a division, not a multiply-accumulate, so not foldable into a convolution; the host "
                    "computes it as onnxruntime's kernel does")
        return (f"BatchNormalization not folded into a convolution ({after}; exporters fold it into a preceding "
                "Conv only): in inference mode, with its stored statistics, a per-channel scale and shift, "
                "elementwise, no matrix product for the array; the host computes it in float as onnxruntime does")
    if op in ROW_STATISTICS:
        return (f"{op} needs per-row statistics, exponentials or division: not a multiply-accumulate; computed on "
                "the host")
    if op == "Einsum":
        return (f"Einsum of {len(node.input)} operand(s): the accelerator runs an einsum of two int8 activations "
                "that is one (batched) matrix product (frontend/einsum.py rewrites those as MatMul); this one is "
                "computed in float on the host as onnxruntime computes it (it has no integer Einsum), with MLAS's "
                "SGEMM order where it is a matrix product")
    return (f"no accelerator op for {op}: the accelerator runs quantized Conv / MatMul / Gemm; {op} is compiled "
            "for the host CPU")


def _summary(imported: Any, accel: dict[str, _Accel], reasons: dict[str, str], onnx_nodes: dict[str, Any],
             prog: Any, plans: dict[str, Plan], hw: Any, options: CompileOptions) -> dict[str, Any]:
    """contracts.md's network summary: one entry per ONNX node that computes (Q/DQ nodes are counted in the
    totals), accelerator ops first in program order, then host nodes in graph order."""
    from tileplan.frontend import partition

    model = imported.model
    index = onnx_graph.index(model.graph)
    shapes = onnx_graph.tensor_shapes(model.graph)
    by_main = {a.qop.name: a for a in accel.values()}
    fused_into = {n: a.qop.name for a in accel.values() for n in a.qop.nodes}
    twin_of = {t.name: a for a in accel.values() for t in getattr(a.qop, "twins", ())}
    fused_into.update({n: t.name for a in accel.values() for t in getattr(a.qop, "twins", ()) for n in t.nodes
                       if n != t.name})
    ops: list[dict[str, Any]] = []
    qdq = {"accelerator": 0, "host": 0}
    macs_total = macs_acc = 0
    for node in model.graph.node:
        macs = _node_macs(node, shapes)
        macs_total += macs
        if node.op_type in QDQ_NODES or node.op_type == "Constant":
            qdq["accelerator" if node.name in fused_into else "host"] += node.op_type in QDQ_NODES
            continue
        if node.name in by_main:
            a = by_main[node.name]
            macs_acc += macs
            ops.append({
                "name": node.name, "op": a.spec.tag, "onnx_op": node.op_type, "where": "accelerator",
                "reason": partition.describe(a.qop, a.spec) + _packing(a.art.pack)
                + (f"; {a.library_tiling}" if a.library_tiling else ""),
                "plan_key": a.plan.key if a.plan else None,
                "kernel": a.art.name, "layer": a.spec.layer.model_dump(mode="json", exclude={"count"}),
                "group_pack": a.art.pack if a.art.pack > 1 else None,
                "scratchpad_bytes": a.art.local_rows[0] * a.art.target[0],
                "accumulator_bytes": a.art.local_rows[1] * a.art.target[0] * 4,
                "macs": macs, "cycles_emulated": None, "dram_bytes_emulated": None,
                "cycles_model": round(float(a.art.model_cycles) * a.calls, 1),
                "baseline_cycles_model": (round(a.library_cycles * a.calls, 1) if a.library_cycles is not None
                                          else None),
                # what runs (the kernel's modelled cycles) against the library's tiling of the same op, unclamped
                "speedup": (round(a.library_cycles / float(a.art.model_cycles), 4)
                            if a.library_cycles is not None and a.art.model_cycles else None),
                "library_tiling_kept": a.library_tiling or None,
                "fused": [n for n in a.qop.nodes if n != node.name]})
        elif node.name in twin_of:
            a = twin_of[node.name]
            macs_acc += macs
            ops.append({"name": node.name, "op": a.spec.tag, "onnx_op": node.op_type, "where": "accelerator",
                        "reason": f"the kernel of {a.qop.name}, called again on this op's input: its weights, bias, "
                        "shapes, scales and zero points equal that one's (TVM makes one composite function of equal "
                        "matches; the kernel's modelled cycles count every call)",
                        "plan_key": None, "macs": macs, "cycles_emulated": None, "cycles_model": None,
                        "speedup": None})
        elif node.name in fused_into:
            ops.append({"name": node.name, "op": node.op_type.lower(), "onnx_op": node.op_type,
                        "where": "accelerator", "reason": f"fused into {fused_into[node.name]}",
                        "plan_key": None, "macs": macs, "cycles_emulated": None, "cycles_model": None,
                        "speedup": None})
        else:
            ops.append({"name": node.name, "op": node.op_type.lower(), "onnx_op": node.op_type, "where": "host",
                        "reason": _host_reason(node, index, shapes, reasons), "plan_key": None, "macs": macs,
                        "cycles_emulated": None, "cycles_model": None, "speedup": None})
    acc_ops = [o for o in ops if o["where"] == "accelerator" and o.get("kernel")]
    model_cycles = sum(o["cycles_model"] for o in acc_ops)
    base = [o["baseline_cycles_model"] for o in acc_ops]
    host = [o for o in ops if o["where"] == "host"]
    notes = []
    if host:
        kinds: dict[str, int] = {}
        for o in host:
            kinds[o["onnx_op"]] = kinds.get(o["onnx_op"], 0) + 1
        notes.append("on the host: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    return {
        "model": imported.model.graph.name or "model", "hardware": hw.name,
        "inputs": [i.doc() for i in imported.inputs], "outputs": [o.doc() for o in imported.outputs],
        "options": options.model_dump(mode="json"),
        "ops": ops,
        "total": {
            "ops": len(ops), "accelerator_ops": len(acc_ops), "host_ops": len(host),
            "kernels": len({o["kernel"] for o in acc_ops}), "plans": len(plans),
            "qdq_nodes": qdq, "steps": len(prog.steps),
            "macs": macs_total, "accelerator_macs": macs_acc,
            "accelerator_mac_share": round(macs_acc / macs_total, 6) if macs_total else 0.0,
            "cycles_emulated": None, "dram_bytes_emulated": None, "cycles_model": round(model_cycles, 1),
            "baseline_cycles_model": round(sum(base), 1) if base and None not in base else None,
            "speedup_model": round(sum(base) / model_cycles, 4) if base and None not in base and model_cycles
            else None,
            "arena_bytes": prog.arena_bytes, "weights_bytes": prog.weights_bytes,
        },
        "notes": notes,
    }


def _plan_groups(model: Any, accel: dict[str, _Accel], hw: Any, options: CompileOptions) -> list[Any]:
    """The fused-layer planner's decision for every candidate group (none with `fusion: off`)."""
    from tileplan.frontend.patterns import QuantOp
    from tileplan.fusion.planner import plan_groups

    ops = [a for a in accel.values() if a.art is not None and isinstance(a.qop, QuantOp)]
    return (plan_groups(model, [a.qop for a in ops], [a.spec for a in ops],
                        [float(a.art.model_cycles) for a in ops], hw)
            if options.fusion == "auto" and ops else [])


def _fuse_program(prog: Any, groups: list[Any], accel: dict[str, _Accel], hw: Any) -> list[Any]:
    """Every fused group's steps in `prog` replaced by its fused kernel's step (tileplan.fusion.program)."""
    from tileplan.codegen.pipeline import gemmini_config, target_spec
    from tileplan.fusion import program as fusion_program

    target = target_spec(hw)
    specs = {a.qop.name: a.spec for a in accel.values()}
    return fusion_program.apply(prog, groups, specs, target, gemmini_config(target).max_bytes, hw.name)


def _add_groups(summary: dict[str, Any], model: Any, accel: dict[str, _Accel], groups: list[Any],
                options: CompileOptions) -> None:
    """The summary's fused-layer groups (`groups`, per op `fusion_group`, `total.fusion`); the program is the
    per-layer one for every group not fused."""
    from tileplan.frontend.patterns import QuantOp

    ops = [a for a in accel.values() if a.art is not None and isinstance(a.qop, QuantOp)]
    summary["groups"] = [g.doc() for g in groups]
    if options.fusion == "auto" and ops:
        from tileplan.fusion.chains import blocked, members

        summary["total"]["fusion_blocked"] = blocked(model, members(model, [a.qop for a in ops],
                                                                    [a.spec for a in ops]))
    member_of = {m: i for i, g in enumerate(groups) for m in g.members}
    for o in summary["ops"]:
        if o.get("kernel"):
            o["fusion_group"] = member_of.get(o["name"])
    fused = [g for g in groups if g.fused]
    if fused and summary["total"].get("cycles_model") is not None:  # the fused kernels' modelled cycles
        summary["total"]["cycles_model"] -= sum(g.cost.cycles_model_unfused - g.cost.cycles_model_fused
                                                for g in fused)
    summary["total"]["fusion"] = {
        "mode": options.fusion, "groups": len(groups), "fused_groups": sum(g.fused for g in groups),
        "intermediate_bytes": sum(g.cost.intermediate_bytes for g in groups),
        "intermediate_bytes_fused": sum(g.cost.intermediate_bytes for g in groups if g.fused)}
    if options.fusion == "auto" and groups and not any(g.fused for g in groups):
        summary["notes"].append(
            f"fusion: {len(groups)} candidate groups, none fused ({groups[0].reason}); the per-layer program runs")


def _add_group_cycles(summary: dict[str, Any], steps: dict[str, tuple[float, float]]) -> None:
    """Each group's emulated cycles and DRAM bytes: its fused step's (`steps`: accelerator step name -> cycles,
    bytes), or its members' summed (the per-layer program's)."""
    by_name = {o["name"]: o for o in summary["ops"] if o.get("kernel")}
    for g in summary.get("groups", []):
        if g["fused"] and "+".join(g["members"]) in steps:
            c, b = steps["+".join(g["members"])]
            g["cycles_emulated_fused"], g["dram_bytes_emulated_fused"] = int(round(c)), int(round(b))
            continue
        ms = [by_name[m] for m in g["members"] if m in by_name]
        if ms and all(m.get("cycles_emulated") is not None for m in ms):
            g["cycles_emulated_unfused"] = sum(m["cycles_emulated"] for m in ms)
            g["dram_bytes_emulated_unfused"] = sum(m["dram_bytes_emulated"] for m in ms)


def _packing(pack: int) -> str:
    return f"; {pack} groups per array pass (block-diagonal weight tiles)" if pack > 1 else ""


def _add_cycles(summary: dict[str, Any], prog: Any, cycles: list[float], dram: list[float]
                ) -> dict[str, tuple[float, float]]:
    by_name: dict[str, float] = {}
    bytes_by_name: dict[str, float] = {}
    for i, (st, c) in enumerate(zip(prog.steps, cycles)):
        if st.kind == "accel":
            by_name[st.name] = by_name.get(st.name, 0.0) + float(c)
            bytes_by_name[st.name] = bytes_by_name.get(st.name, 0.0) + (float(dram[i]) if i < len(dram) else 0.0)
    for o in summary["ops"]:
        if o["name"] in by_name and o.get("kernel"):
            o["cycles_emulated"] = int(round(by_name[o["name"]]))
            o["dram_bytes_emulated"] = int(round(bytes_by_name[o["name"]]))
    summary["total"]["cycles_emulated"] = int(round(sum(by_name.values())))
    summary["total"]["dram_bytes_emulated"] = int(round(sum(bytes_by_name.values())))
    return {k: (v, bytes_by_name[k]) for k, v in by_name.items()}


def _readme(model_name: str, hw: str, prog: Any, imported: Any, summary: dict[str, Any]) -> str:
    from tileplan.frontend.program import c_comment, c_ident

    t = summary["total"]
    sig = ", ".join([f"const {x.ctype} *{c_ident(i.name, 'in_')}" for x, i in zip(prog.inputs, imported.inputs)]
                    + [f"{x.ctype} *{c_ident(o.name, 'out_')}" for x, o in zip(prog.outputs, imported.outputs)])
    rows = "\n".join(f"| {c_comment(o['name'])} | {o['op']} | {o['where']} | {o.get('cycles_emulated') or ''} | "
                     f"{o['reason']} |" for o in summary["ops"])
    return f"""# {c_comment(model_name)} for {hw}

Compiled by Tileplan: {t['accelerator_ops']} of {t['ops']} ops on the accelerator
({t['accelerator_mac_share']:.1%} of the MACs), {t['host_ops']} on the host CPU; {len(prog.steps)} steps.

## Entry point (`tileplan_model.h`)
```c
int tileplan_run({sig});
```
Dense row-major tensors in the model's own dtypes and shapes (see the header); returns 0. Not reentrant: the
activations live in one static arena ({prog.arena_bytes} bytes); the weights ({prog.weights_bytes} bytes, already
in the layouts the kernels read) are read-only data linked in from `weights.bin` by `weights.S`.

## Build
- `make host`: `build/host/libtileplan_model.so` for this machine, the accelerator steps running on Tileplan's
  Gemmini emulator (`emulator/`); `tileplan run <this tar> --input in.npy --output out.npy` builds and runs it
  and prints every step's emulated cycles (`tileplan_emu_run` in `emulator/tp_emulate.c`).
- `make riscv`: `build/riscv/model.riscv`, a static RISC-V program (`riscv64-linux-gnu-gcc`) for Linux or the proxy
  kernel: `spike --extension=gemmini pk build/riscv/model.riscv in.bin out.bin`. `main.c` reads `in.bin` (every
  input's raw bytes, dense row-major in its dtype, little-endian, in the header's order, back to back:
  {sum(t.nbytes for t in prog.inputs)} bytes), runs `tileplan_run`, writes `out.bin` the same way
  ({sum(t.nbytes for t in prog.outputs)} bytes) and prints every step's cycles (`rdcycle`; `TILEPLAN_NO_RDCYCLE=1`
  leaves them out). `build/riscv/*.o` are the objects without `main.c`, to link into a program of your own.
  `GEMMINI_INCLUDE=DIR`: compile against Gemmini's own `gemmini.h` and your configuration's `gemmini_params.h` in
  DIR (`gemmini-rocc-tests/include`) instead of the stand-ins here; the kernels refuse (`#error`) a configuration
  that differs from {hw}'s or lacks a feature they use (kernels that store int32 accumulators need
  `ACC_READ_FULL_WIDTH`).
- `make host-main`: `build/host/model in.bin out.bin`, the same `main.c` on this machine over the emulator (it
  prints the emulated cycles).

## Files
- `model.c`: the glue, every step in graph order; `tp_ops.h`: prototypes; `main.c`: the program around it.
- `kernels/*.c`: one accelerator kernel per distinct op (Gemmini API calls, `gemmini.h`).
- `host/*.c`: the host ops (TVM-legalized TIR printed as C; float math between dequantize and quantize).
- `tileplan.json`: inputs, outputs, steps and the network summary.

## Ops
| op | kind | where | emulated cycles | why |
|---|---|---|---|---|
{rows}
"""


def model_digest(model: bytes, hw: Any, options: CompileOptions, input_shapes: dict[str, list[int]] | None) -> str:
    """What identifies a compile (for a cache or a job store): model bytes, hardware, options, input shapes."""
    from tileplan.plan import hardware_fingerprint, solver_version

    doc = {"model": hashlib.sha256(model).hexdigest(), "hardware": hardware_fingerprint(hw),
           "options": options.model_dump(mode="json"), "input_shapes": input_shapes or {},
           "solver": solver_version(), "format": ARTIFACT_FORMAT}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
