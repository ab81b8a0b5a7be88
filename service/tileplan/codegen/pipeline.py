"""Plan -> artifacts: TVMScript of the scheduled module, standalone C against gemmini.h, and an emulator run.

    art = generate(layer, hardware, mapping, Epilogue(scale=0.02, relu=True))
    art.tvmscript, art.c_source
    res = run(art, inputs)            # bit-exact outputs, cycles and instruction counts from the emulator

The C uses only names and arities of Gemmini's own include/gemmini.h; it compiles against that header (with a
gemmini_params.h of the configuration it was generated for: `art.config`, checked by the preprocessor) or against
Tileplan's stand-in (emulator/gemmini.h), which emits Gemmini's RoCC instructions on RISC-V and drives the
emulator elsewhere.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tileplan.codegen.emit_c import CEmitter, lower
from tileplan.codegen.emulator import Emulator, GemminiConfig, RunResult, TimingParams
from tileplan.codegen.registry import CodegenError
from tileplan.codegen.schedule import Realization, TargetSpec, realise_layer, schedule_layer
from tileplan.codegen.support import codegen_unsupported
from tileplan.codegen.targets import gemmini as G

__all__ = ["Artifact", "Epilogue", "build_module", "generate", "run", "target_spec", "timing_for", "reference",
           "random_inputs"]
Epilogue = G.Epilogue


@dataclass
class Artifact:
    name: str
    tag: str
    geometry: G.ConvGeometry
    epilogue: G.Epilogue
    realization: Realization
    target: TargetSpec
    tvmscript: str
    c_source: str
    entry: str
    param_names: list[str]
    workspace_bytes: int
    spad_rows_used: int
    acc_rows_used: int
    notes: list[str] = field(default_factory=list)
    hardware: str = ""
    timing: TimingParams | None = None  # the emulator timing of the target (timing_for(hw))
    model_cycles: float = float("nan")  # the cost model's cycles for the realised tiles
    layout: G.CallLayout | None = None  # what the per-call support code is generated from
    prologue: list[str] = field(default_factory=list)  # the kernel's configuration, before its body
    acc_base_row: int = 0  # first accumulator row of the kernel's accumulator buffer
    inputs: tuple = field(default=(), repr=False)  # (layer, mapping, arch, double_buffer, stream): host build
    _host: dict[str, bytes] | None = field(default=None, repr=False)
    host_missing: str = ""  # why the host library could not be built here (no C compiler), else empty
    config: GemminiConfig = field(default_factory=GemminiConfig)  # the gemmini_params.h the C is built for
    abi: G.KernelABI = field(default_factory=G.KernelABI)  # how the kernel meets its caller
    workspace_pieces: list[tuple[int, int]] = field(default_factory=list)  # Emitted.workspace_pieces

    def files(self) -> dict[str, bytes]:
        """The artifact as files (for a tar download): the C kernel, the stand-in gemmini.h and the gemmini_params.h
        of the configuration it was generated for, the TVMScript, the host library with the emulator library it
        links against (and the emulator's C interface), the build note."""
        from tileplan.codegen.emulator import HEADER_DIR

        host = self.host_files()  # first: the build note says whether it is there
        text = {f"{self.name}.c": self.c_source, "gemmini.h": (HEADER_DIR / "gemmini.h").read_text(),
                "gemmini_params.h": self.config.params_header(), f"{self.name}.tvmscript.py": self.tvmscript,
                "gemmini_emu.h": (HEADER_DIR / "gemmini_emu.h").read_text(), "BUILD.md": self.build_note()}
        return {**{k: v.encode() for k, v in text.items()}, **host}

    def host_files(self) -> dict[str, bytes]:
        """lib<name>_host.so (TVM's llvm build of the module, linked against the emulator) and libgemmini_emu.so;
        built on first use (tileplan.codegen.host)."""
        if self._host is None and self.abi != G.KernelABI():
            self._host, self.host_missing = {}, "the host library is built for the default kernel ABI only"
        if self._host is None:
            import tempfile

            from tileplan.codegen.emulator.build import NoCompiler
            from tileplan.codegen.host import build_host_library

            try:
                with tempfile.TemporaryDirectory() as tmp:
                    lib = build_host_library(self, Path(tmp))
                    self._host = {f.name: f.read_bytes() for f in sorted(lib.parent.iterdir())}
            except NoCompiler as exc:  # the C, TVMScript and note still make a useful archive; the note says why
                self._host, self.host_missing = {}, str(exc)
        return self._host

    def build_note(self) -> str:
        note = _BUILD_NOTE.format(**self._note_fields())
        if self.host_missing:
            note += ("\n**This archive has no host library**: it could not be built where it was made "
                     f"({self.host_missing}).\n")
        return note

    def _note_fields(self) -> dict[str, Any]:
        g, lay = self.geometry, self.layout
        c = self.config
        return dict(name=self.name, upper=self.name.upper(), hw=self.hardware or "a Gemmini-like target",
                    machine=platform.machine(), tag=self.tag, calls=self.realization.calls,
                    dim=c.dim, bank_num=c.bank_num, bank_rows=c.bank_rows, spad_rows=c.spad_rows,
                    acc_rows=c.acc_rows, max_bytes=c.max_bytes,
                    store=(("into an NHWC workspace copy that the CPU transposes into the NCHW `out` after the fence"
                            if self.abi.layout == "NCHW" and not self.realization.matmul else
                            "straight into `out` (no CPU copy)") if lay and lay.store_direct else
                           "into a padded workspace copy that the CPU copies into `out` after the fence"),
                    i_shape=(g.N, g.H, g.W, g.G * g.C), w_shape=g.weight_shape, b_shape=(g.G * g.K,),
                    o_shape=(g.N, g.P, g.Q, g.G * g.K), bp_shape=(lay.padded["G"], lay.padded["K"]) if lay else "?",
                    notes="; ".join(self.notes) or "none")

    def tar_bytes(self) -> bytes:
        """The artifact as a tar archive of `files()` under `<name>/` (shared libraries executable)."""
        import io
        import tarfile

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for fname, data in self.files().items():
                info = tarfile.TarInfo(f"{self.name}/{fname}")
                info.size = len(data)
                info.mode = 0o755 if fname.endswith(".so") else 0o644
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()


_BUILD_NOTE = """# {name}

Generated by tileplan.codegen for {hw}: `{tag}`, {calls} library-style calls.
Realisation notes: {notes}

## The Gemmini it is built for
The kernel assumes this `gemmini_params.h` configuration (the file of that name here):

| DIM | scratchpad (BANK_NUM x BANK_ROWS) | accumulator (ACC_ROWS) | MAX_BYTES | elem_t / acc_t | scales |
|---|---|---|---|---|---|
| {dim} | {bank_num} x {bank_rows} = {spad_rows} rows | {acc_rows} rows | {max_bytes} | int8 / int32 | float |

It refuses to build (`#error` / `_Static_assert`) against a `gemmini_params.h` of another configuration.
Results are stored {store}; one `gemmini_fence()` at the end makes them visible to the CPU.

## Files
- `{name}.c`: the kernel, standalone C that includes only `gemmini.h` and the C standard library, and uses only
  macros of Gemmini's own `include/gemmini.h` (ucb-bar/gemmini-rocc-tests) with their arities.
  Entry `void {name}(const int8_t *I, const int8_t *W, const int32_t *bias, int8_t *out, uint8_t *workspace)`
  with `{upper}_WORKSPACE_BYTES` bytes of workspace; every other symbol is `static`, so kernels of several layers
  link into one program. Build it
  - for the chip, with Gemmini's own header and a `gemmini_params.h` of the configuration above:
    `riscv64-unknown-elf-gcc -O2 -I gemmini-rocc-tests -I gemmini-rocc-tests/include -c {name}.c`;
  - or with the stand-in `gemmini.h` + `gemmini_params.h` here: on RISC-V (`riscv64-linux-gnu-gcc -O2 -c {name}.c`)
    its macros emit Gemmini's RoCC custom-3 instructions; elsewhere they call Tileplan's emulator (link against
    `libgemmini_emu.so` and run the kernel inside `emu_run_entry`, see `gemmini_emu.h`).
- `gemmini.h`, `gemmini_params.h`: the stand-in API (Gemmini's macro names and parameter lists) and the configuration.
- `{name}.tvmscript.py`: the scheduled, tensorized TVM module.
- `lib{name}_host.so`: the host library, TVM's llvm build of that module ({machine} Linux). Its padding copies
  run on the host; its tile intrinsics call glue (`tp_host_*`) that runs the kernel's own per-call instruction
  stream on Tileplan's Gemmini emulator, so it gives the kernel's outputs and emulated cycles. It loads
  `libgemmini_emu.so` from its own directory (RUNPATH `$ORIGIN`): keep the two together.
- `libgemmini_emu.so`, `gemmini_emu.h`: Tileplan's Gemmini emulator (functional + timing) and its C interface.

## Run the host library
Needs the TVM runtime (`pip install apache-tvm==0.27.0.post1`) and numpy:
```python
import ctypes, numpy as np, tvm
lib = "./lib{name}_host.so"
main = tvm.runtime.load_module(lib)["main"]
rng = np.random.default_rng(0)
I = rng.integers(-128, 128, {i_shape}, dtype=np.int8)      # NHWC
W = rng.integers(-128, 128, {w_shape}, dtype=np.int8)      # [G, R, S, C, K]
bias = rng.integers(-5000, 5000, {b_shape}, dtype=np.int32)
out = np.zeros({o_shape}, np.int8)                          # NHWC
bias_p = np.zeros({bp_shape}, np.int32)                     # scratch
args = [tvm.runtime.tensor(a) for a in (I, W, bias, out, bias_p)]
main(*args)                                                 # args[3].numpy() is the output
glue = ctypes.CDLL(lib)
glue.tp_host_cycles.restype, glue.tp_host_trap.restype = ctypes.c_double, ctypes.c_char_p
print(glue.tp_host_cycles(), glue.tp_host_trap())          # emulated cycles; None unless the emulator trapped
```
Without `tp_host_attach(emu)` the first call creates an emulator with the timing the module was generated for;
`tp_host_attach` (an `emu_t *` from `emu_create`, `gemmini_emu.h`) runs it on another one.
"""


def target_spec(hw: Any) -> TargetSpec:
    """Array size and local memory rows of a Gemmini-like descriptor."""
    reason = codegen_unsupported(hw)
    if reason:
        raise CodegenError(reason)
    from tileplan.emittable import memory_rows

    rows = memory_rows(hw.resolve())
    if rows is None:
        raise CodegenError(f"no scratchpad and accumulator of known size on {hw.name}")
    return TargetSpec(dim=rows.dim, spad_rows=rows.spad_rows, acc_rows=rows.acc_rows)


def timing_for(hw: Any, matmul: bool = False, double_buffer: bool = True, library: bool = False) -> TimingParams:
    """The emulator's timing, derived from the calibrated cost model (one mapping, no other constants):

    | emulator (TimingParams)  | from                                                                   |
    |--------------------------|------------------------------------------------------------------------|
    | dram_bytes_per_cycle     | cost.gemmini.effective_dram_bandwidth: CostParams.dma_bytes_per_cycle x |
    |                          | dram_efficiency (the descriptor's nominal DRAM figure is not a cap)    |
    | dma_request_bytes        | 64 (Gemmini's largest DMA request, tileplan.cost.gemmini.REQUEST_BYTES) |
    | dma_request_cycles       | CostParams.dma_request_cycles                                           |
    | compute_row_cycles       | 1 (one row of A enters the array per cycle)                             |
    | compute_op_cycles        | CostParams.op_overhead_cycles                                           |
    | preload_cycles           | CostParams.preload_dims x DIM                                           |
    | call_cycles              | CostParams.call_overhead_cycles (config_ex opening each call)           |
    | call_floor_cycles        | CostParams.call_floor_matmul for a matmul, call_floor_cycles otherwise  |
    |                          | (config_ex dispatched no sooner than this after the previous one)       |
    | run_cycles               | CostParams.run_overhead_cycles (added once to the program's cycles)     |
    | compute_floor_cycles     | CostParams.compute_floor_dims x DIM (a compute of few rows)             |
    | overlap_loss             | DMA / array contention: CostParams.overlap_loss_matmul for a matmul     |
    |                          | (`matmul`, the library's loop_ws), CostParams.overlap_loss otherwise    |
    | dram_request_cycles      | CostParams.dram_request_cycles (strided rows of buffers beyond the L2)  |
    | block_wait_cycles        | CostParams.block_wait_cycles (stores behind others to one 64-B block)   |
    | l2_bytes                 | CostParams.l2_bytes                                                     |
    | llc_miss_cycles          | CostParams.llc_miss_cycles (the same requests on buffers beyond the LLC)|
    | llc_bytes                | CostParams.llc_bytes                                                    |
    | calls_overlap            | 1 when the code double buffers (`double_buffer`), else 0                |
    | dram_byte_cycles         | CostParams.dram_byte_cycles (loads from tensors larger than the LLC)    |
    | refill_cycles            | cost.gemmini.refill_cycles: 64 / CostParams.mem_bus_bytes (a block over |
    |                          | the memory bus, per strided request DRAM serves; a store's twice)       |
    | call_slots               | CostParams.call_slots for a convolution whose code follows the library's|
    |                          | calls (`library`: stream "baseline", costed as loop_conv_ws's calls,    |
    |                          | whose two call slots overlap a call's computes with the next call's DMA:|
    |                          | cost.gemmini._slot_loop), else 0                                        |
    | latencies, issue, config | 0 (the calibrated model has no such terms)                              |
    | queues                   | unbounded (the double-buffered halves bound the run-ahead)              |

    The emulator knows a tensor's size from emu_add_tensor (each buffer of a layer; each operand of a program's
    accelerator step), which `dram_byte_cycles` needs.
    """
    from tileplan.cost.gemmini import REQUEST_BYTES, effective_dram_bandwidth, nominal_dram_bandwidth, refill_cycles
    from tileplan.cost.params import CostParams

    p = CostParams.for_descriptor(hw)
    bw = float(effective_dram_bandwidth(nominal_dram_bandwidth(hw.resolve()), p.as_dict()))
    return TimingParams(
        dram_bytes_per_cycle=bw, dma_request_bytes=float(REQUEST_BYTES),
        dma_request_cycles=p.dma_request_cycles, compute_row_cycles=1.0, compute_op_cycles=p.op_overhead_cycles,
        preload_cycles=p.preload_dims * hw.pe_array.rows, call_cycles=p.call_overhead_cycles,
        overlap_loss=p.overlap_loss_matmul if matmul else p.overlap_loss, dma_latency=0.0, issue_cycles=0.0,
        config_cycles=0.0, compute_latency=0.0, queue_load=0.0, queue_exec=0.0, queue_store=0.0,
        call_floor_cycles=p.call_floor_matmul if matmul else p.call_floor_cycles, run_cycles=p.run_overhead_cycles,
        compute_floor_cycles=p.compute_floor_dims * hw.pe_array.rows, dram_request_cycles=p.dram_request_cycles,
        block_wait_cycles=p.block_wait_cycles, l2_bytes=p.l2_bytes, llc_miss_cycles=p.llc_miss_cycles,
        llc_bytes=p.llc_bytes, calls_overlap=1.0 if double_buffer else 0.0, dram_byte_cycles=p.dram_byte_cycles,
        refill_cycles=float(refill_cycles(p.as_dict())), call_slots=p.call_slots if library and not matmul else 0.0)


def _ident(name: str) -> str:
    s = re.sub(r"[^0-9a-zA-Z_]", "_", name) or "layer"
    return s if not s[0].isdigit() else "l_" + s


def gemmini_config(target: TargetSpec) -> GemminiConfig:
    """The gemmini_params.h configuration of a target: its DIM and local memory rows, Gemmini's 64-byte DMA
    requests (MAX_BYTES, which set how many DIM blocks one mvin row carries)."""
    from tileplan.cost.gemmini import REQUEST_BYTES

    return GemminiConfig(dim=target.dim, spad_rows=target.spad_rows, acc_rows=target.acc_rows,
                         max_bytes=int(REQUEST_BYTES))


def generate(layer: Any, hw: Any, mapping: Any, epilogue: G.Epilogue | None = None, name: str | None = None,
             double_buffer: bool = True, stream: str = "tileplan", direct_store: bool = True,
             abi: G.KernelABI | None = None) -> Artifact:
    """`double_buffer=False` runs one call at a time (for comparisons; the cost model assumes two in flight);
    `stream="baseline"` orders each call's loads the way benchmarks run Gemmini's own library (schedule_layer);
    `direct_store=False` stores into a padded workspace copy of the output that the CPU copies into `out` after
    the fence, even where the stores could write `out` themselves; `abi` (G.KernelABI): external layout, input
    padding value, prelaid weights (default: the per-layer ABI).

    The kernel is one translation unit: its entry `<name>` and `<name>_entry` (the emulator runner's calling
    convention) are its only external symbols, so kernels with distinct names link into one program."""
    epilogue = epilogue or G.Epilogue()
    abi = abi or G.KernelABI()
    target = target_spec(hw)
    config = gemmini_config(target)
    arch = hw.resolve(mapping.dataflow)
    sched = schedule_layer(layer, mapping, arch, epilogue, target, double_buffer, stream=stream,
                           direct_store=direct_store, abi=abi)
    tvmscript = sched.mod.script()
    low = lower(sched.mod)
    fname = _ident(name or getattr(layer, "name", "") or "tileplan_kernel")
    geo = sched.compute.geometry
    lay = sched.layout
    prologue = G.config_prologue(lay, epilogue)
    io = "row-major" if sched.realization.matmul else abi.layout
    if abi.prelaid:
        pd = lay.padded
        weights = (f"W_p [{pd['G']},{pd['R']},{pd['S']},{pd['C']},{pd['K']}] int8, bias_p [{pd['G']},{pd['K']}] "
                   "int32 (prelaid, zero-padded)")
        if abi.b_in_place:
            weights = (f"W_p = B [{geo.C},{geo.K}] int8 row-major, unpadded, read in place; bias_p "
                       f"[{pd['G']},{pd['K']}] int32 (prelaid, zero-padded)")
        names, workspace = ["I", "W_p", "bias_p", "out"], 0
    else:
        weights = "W [G,R,S,C,K] int8, bias [G*K] int32"
        names, workspace = ["I", "W", "bias", "out", "bias_p"], 1
    pad = f"; input padding value {abi.pad_value}" if abi.pad_value else ""
    odt = "int32 (accumulators, bias included)" if abi.acc_output else "int8"
    comment = (f"Generated by tileplan.codegen ({sched.tag}) for {hw.name}; mapping: {mapping.describe()}. "
               f"Layouts: I {io} int8, {weights}, out {io} {odt}{pad}.")
    from tileplan.cost.gemmini import runs_as_matmul
    from tileplan.problem import Problem

    # timed as the model costs it: a Q = R = S = 1 convolution runs as tiled_matmul calls there too
    matmul = sched.realization.matmul or runs_as_matmul(Problem.from_layer(layer))
    em = CEmitter(target.dim, target.spad_rows, target.acc_rows, spad_reserved=lay.halves * lay.spad_call_rows,
                  acc_copies=lay.halves, support=G.call_support_c(lay)).emit(
        low["main"], fname, names, workspace=workspace, prologue=prologue,
        epilogue=[], header_comment=comment.replace("*/", "* /"), preamble=config.kernel_checks(hw.name))
    return Artifact(fname, sched.tag, geo, epilogue, sched.realization, target, tvmscript, em.source, em.entry,
                    em.params, em.workspace_bytes, em.spad_rows_used, em.acc_rows_used,
                    list(sched.realization.deviations), hardware=hw.name,
                    timing=timing_for(hw, matmul=matmul,
                                      double_buffer=sched.realization.double_buffer, library=stream != "tileplan"),
                    model_cycles=sched.model_cycles, layout=lay, prologue=prologue,
                    acc_base_row=_acc_base_row(em.local),
                    inputs=(layer, mapping, arch, double_buffer, stream, direct_store), config=config, abi=abi,
                    workspace_pieces=em.workspace_pieces)


def model_cycles_of(layer: Any, hw: Any, mapping: Any, epilogue: G.Epilogue | None = None,
                    double_buffer: bool = True, stream: str = "tileplan", direct_store: bool = True,
                    abi: G.KernelABI | None = None) -> float:
    """`generate(...).model_cycles` (the same arguments but the name) without generating the kernel: the
    realisation and its call layout (`schedule.realise_layer`), no TVM schedule, lowering or C. Raises what
    `generate` raises before scheduling."""
    target = target_spec(hw)
    arch = hw.resolve(mapping.dataflow)
    return realise_layer(layer, mapping, arch, epilogue or G.Epilogue(), target, double_buffer, stream=stream,
                         direct_store=direct_store, abi=abi or G.KernelABI()).model_cycles


def _acc_base_row(local: list[Any]) -> int:
    """The accumulator row the kernel's (single) accumulator buffer starts at; the host glue addresses tiles
    from it as the C emitter does."""
    bases = {lb.base_row for lb in local if lb.scope == "global.acc"}
    if len(bases) != 1:
        raise CodegenError(f"expected one accumulator buffer, found {len(bases)}")
    return bases.pop()


def build_module(plan_or_mapping: Any, layer: Any, hw: Any, formats: tuple[str, ...] = ("tvmscript", "c"),
                 epilogue: G.Epilogue | None = None, name: str | None = None, stream: str = "tileplan",
                 direct_store: bool = True) -> Artifact:
    """Public entry point: the module of one plan.

    `plan_or_mapping`: a `tileplan.plan.Plan` (its `.mapping` is used) or a `Mapping`; `layer`: the workload layer;
    `hw`: its HardwareDescriptor.  `formats` names what the caller needs ("tvmscript", "c", "tar"); the Artifact
    always carries the TVMScript and C, and `Artifact.tar_bytes()` packs the "tar" form.  Raises CodegenError when
    the plan cannot be turned into code for this target."""
    mapping = getattr(plan_or_mapping, "mapping", plan_or_mapping)
    unknown = set(formats) - {"tvmscript", "c", "tar"}
    if unknown:
        raise CodegenError(f"unknown module format(s) {sorted(unknown)}; use tvmscript, c or tar")
    return generate(layer, hw, mapping, epilogue, name, stream=stream, direct_store=direct_store)


def random_inputs(geo: G.ConvGeometry, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "I": rng.integers(-128, 128, size=(geo.N, geo.H, geo.W, geo.G * geo.C), dtype=np.int8),
        "W": rng.integers(-128, 128, size=geo.weight_shape, dtype=np.int8),
        "bias": rng.integers(-5000, 5000, size=(geo.G * geo.K,), dtype=np.int32),
    }


def reference(geo: G.ConvGeometry, epi: G.Epilogue, I: np.ndarray, W: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """NumPy model of the layer: int32 grouped convolution + bias, then Gemmini's requantize (W in the layer's own
    grouping, `geo.weight_shape`)."""
    geo = geo.unpacked()
    sh, sw = geo.stride
    dh, dw = geo.dilation
    ph, pw = geo.padding
    x = np.zeros((geo.N, geo.H + 2 * ph, geo.W + 2 * pw, geo.G * geo.C), np.int64)
    x[:, ph:ph + geo.H, pw:pw + geo.W, :] = I
    acc = np.zeros((geo.N, geo.P, geo.Q, geo.G, geo.K), np.int64)
    for g in range(geo.G):
        xs = x[..., g * geo.C:(g + 1) * geo.C]
        for r in range(geo.R):
            for s in range(geo.S):
                win = xs[:, r * dh: r * dh + (geo.P - 1) * sh + 1: sh, s * dw: s * dw + (geo.Q - 1) * sw + 1: sw, :]
                acc[:, :, :, g, :] += np.einsum("npqc,ck->npqk", win, W[g, r, s].astype(np.int64))
    acc = acc.reshape(geo.N, geo.P, geo.Q, geo.G * geo.K) + (bias.astype(np.int64) if epi.bias else 0)
    acc32 = acc.astype(np.int32)  # wraps like the int32 accumulator
    y = np.rint(acc32.astype(np.float32) * np.float32(epi.scale)) + np.float32(epi.zero_point)
    return np.clip(y, epi.lo, 127).astype(np.int8)


_EMULATORS: dict[tuple, Emulator] = {}


def emulator_for(art: Artifact, timing: TimingParams | None = None) -> Emulator:
    """An emulator of the artifact's configuration (cached per configuration and timing)."""
    c = art.config
    timing = timing or art.timing or TimingParams.for_dim(c.dim)
    key = (c, timing)
    if key not in _EMULATORS:
        _EMULATORS[key] = Emulator(dim=c.dim, spad_rows=c.spad_rows, acc_rows=c.acc_rows,
                                   max_mvin_blocks=c.max_block_len, timing=timing)
    return _EMULATORS[key]


def run(art: Artifact, inputs: dict[str, np.ndarray], timing: TimingParams | None = None,
        emulator: Emulator | None = None, program: Path | None = None) -> RunResult:
    """Compile the artifact's C against the emulator and run it; `buffers["out"]` is the NHWC output.
    `program`: run this shared object instead (the artifact's C built some other way, e.g. against Gemmini's own
    gemmini.h with its instructions routed to the emulator: bench/gemmini_header.py)."""
    geo = art.geometry
    emu = emulator or emulator_for(art, timing)
    out = np.zeros((geo.N, geo.P, geo.Q, geo.G * geo.K), np.int8)
    bufs = {"I": inputs["I"], "W": inputs["W"], "bias": inputs["bias"], "out": out,
            "workspace": np.zeros(max(64, art.workspace_bytes), np.uint8)}
    return emu.run(program or art.c_source, bufs, entry=art.entry, readonly=("I", "W", "bias"))
