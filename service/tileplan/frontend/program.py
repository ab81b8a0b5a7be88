"""The whole model as one program: steps in graph order, a static activation arena, the weights blob, and the
files of the artifact (C of every kernel and host op, the glue, header, Makefile, README, manifest).

    prog = build_program(lowered_mod, accel_steps, host_functions, model_inputs, model_outputs)
    files = render(prog, ...)          # {path: bytes}
    tar = pack(files)                  # the artifact

The glue (`model.c`, a Jinja2 template) calls the steps in order.  Every tensor is a pointer into one of four
places: the caller's inputs / outputs, the static arena (activations and each step's workspace, placed by
liveness: `plan_arena`) or `tp_weights` (the read-only weights blob `weights.bin`, pulled in by `weights.S` with
`.incbin`, so there are no megabyte C arrays).  Accelerator steps go through `TP_ACCEL(...)`: on the SoC a plain
call of the kernel; in the host build (`-DTILEPLAN_EMULATOR`, tp_emulate.c) a run of the kernel on Tileplan's
Gemmini emulator that records the step's emulated cycles.
"""

from __future__ import annotations

import io
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ALIGN = 64
TEMPLATES = Path(__file__).resolve().parent / "templates"
CTYPE = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t",
         "uint16": "uint16_t", "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t",
         "bool": "_Bool"}


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass
class Tensor:
    id: int
    dtype: str
    shape: tuple[int, ...]
    kind: str  # "input" | "output" | "arena" | "const" | "workspace"
    index: int = 0  # input / output position
    offset: int = 0  # arena / weights byte offset
    data: np.ndarray | None = None  # const
    name: str = ""

    @property
    def nbytes(self) -> int:
        item = np.dtype(self.dtype if self.dtype != "bool" else "uint8").itemsize
        return int(np.prod(self.shape, dtype=np.int64)) * item

    @property
    def ctype(self) -> str:
        return CTYPE[self.dtype]

    def pointer(self, const: bool = False) -> str:
        """The C expression of a pointer to this tensor in the glue."""
        q = "const " if const else ""
        base = {"input": f"tp_in[{self.index}]", "output": f"tp_out[{self.index}]", "arena": "tp_arena",
                "workspace": "tp_arena", "const": "tp_weights"}[self.kind]
        if self.kind in ("input", "output"):
            return f"(({q}{self.ctype} *){base})"
        return f"(({q}{self.ctype} *)({base} + {self.offset}))"


@dataclass
class Step:
    kind: str  # "host" | "accel"
    name: str  # ONNX node (accelerator) or host function
    function: str  # C symbol called
    inputs: list[Tensor]
    outputs: list[Tensor]
    workspace: Tensor | None = None
    weights: Tensor | None = None  # accel: W_p
    bias: Tensor | None = None  # accel: bias_p
    clamp: tuple[int, int] | None = None  # accel: host post-op on the int8 output
    timing: int = 0  # accel: index into the program's emulator timings
    onnx_nodes: list[str] = field(default_factory=list)
    op: str = ""  # what it computes (relax op names / accelerator kernel tag)
    requant: Any = None  # accel: partition.Requant when the kernel stores int32 accumulators
    multipliers: Tensor | None = None  # accel + requant: float32 [channels]
    acc: Tensor | None = None  # accel + requant: the int32 accumulators (arena, this step only)
    float_bias: Tensor | None = None  # accel + float-output requant: float32 [channels] added after the scaling
    act: Any = None  # accel: partition.ActGlue when both operands are activations (inputs A, B; a batch loop)
    # accel: the kernel's DRAM buffers in its workspace, (byte offset, bytes) each (KernelCode.workspace_pieces)
    workspace_pieces: list[tuple[int, int]] = field(default_factory=list)

    def temporaries(self) -> list[Tensor]:
        return [t for t in (self.workspace, self.acc) if t is not None]


@dataclass
class Program:
    steps: list[Step]
    inputs: list[Tensor]
    outputs: list[Tensor]
    consts: list[Tensor]
    arena_bytes: int = 0
    weights_bytes: int = 0
    copies: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # (dst output, src) copied at the end


class _Builder:
    def __init__(self) -> None:
        self.n = 0
        self.by_var: dict[int, Any] = {}  # relax var handle -> Tensor or tuple of Tensors
        self.consts: list[Tensor] = []

    def new(self, dtype: str, shape: tuple[int, ...], kind: str = "arena", name: str = "") -> Tensor:
        self.n += 1
        return Tensor(self.n, dtype, tuple(int(s) for s in shape), kind, name=name)

    def const(self, array: np.ndarray, name: str = "") -> Tensor:
        t = self.new(str(array.dtype), array.shape, "const", name)
        t.data = np.ascontiguousarray(array)
        self.consts.append(t)
        return t


def _ty_tensors(b: _Builder, ty: Any, name: str) -> list[Tensor]:
    from tvm import relax

    if isinstance(ty, relax.TupleType):
        return [b.new(str(f.dtype), tuple(int(d) for d in f.shape), name=f"{name}.{i}")
                for i, f in enumerate(ty.fields)]
    return [b.new(str(ty.dtype), tuple(int(d) for d in ty.shape), name=name)]


def build_program(main: Any, accel: dict[str, Step], host_workspace: dict[str, int],
                  host_names: dict[str, str]) -> Program:
    """Walk the lowered `main` (call_tir = host function, call_dps_packed = accelerator step) into steps.

    `accel`: symbol -> a Step template (kind "accel", function, weights, bias, clamp; inputs/outputs filled here);
    `host_workspace`: PrimFunc name -> workspace bytes; `host_names`: PrimFunc name -> C symbol."""
    from tvm import relax
    from tvm.ir.expr import GenericConst

    b = _Builder()
    inputs = []
    for i, p in enumerate(main.params):
        t = b.new(str(p.ty.dtype), tuple(int(d) for d in p.ty.shape), "input", str(p.name))
        t.index = i
        b.by_var[p.__chandle__()] = t
        inputs.append(t)

    def arg(e: Any) -> Tensor:
        if isinstance(e, GenericConst):
            return b.const(e.value.numpy())
        got = b.by_var.get(e.__chandle__())
        if got is None or isinstance(got, list):
            raise RuntimeError(f"program: unknown tensor {e}")
        return got

    steps: list[Step] = []
    for block in main.body.blocks:
        for bind in block.bindings:
            var, value = bind.var, bind.value
            key = var.__chandle__()
            if isinstance(value, relax.Call) and value.op.name == "relax.call_tir":
                prim = value.args[0].name_hint
                ins = [arg(a) for a in value.args[1].fields]
                outs = _ty_tensors(b, value.ty, str(var.name))
                ws = host_workspace.get(prim, 0)
                vname = str(var.name)
                label = vname if not re.fullmatch(r"(lv|gv)\d*(_\d+)?", vname) else prim
                step = Step("host", label, host_names[prim], ins, outs,
                            b.new("uint8", (ws,), "workspace") if ws else None, op=prim)
                steps.append(step)
                b.by_var[key] = outs if isinstance(value.ty, relax.TupleType) else outs[0]
            elif isinstance(value, relax.Call) and value.op.name == "relax.call_dps_packed":
                sym = str(value.args[0].global_symbol)
                tmpl = accel[sym]
                ins = [arg(a) for a in value.args[1].fields]
                outs = _ty_tensors(b, value.ty, str(var.name))
                w = bias = None
                if tmpl.weights is not None and tmpl.weights.data is not None:
                    w = b.const(tmpl.weights.data, f"{tmpl.name}.W_p")
                if tmpl.bias is not None and tmpl.bias.data is not None:
                    bias = b.const(tmpl.bias.data, f"{tmpl.name}.bias_p")
                ws = tmpl.workspace.nbytes if tmpl.workspace is not None else 0
                step = Step("accel", tmpl.name, tmpl.function, ins, outs,
                            b.new("uint8", (ws,), "workspace") if ws else None, w, bias, tmpl.clamp,
                            tmpl.timing, tmpl.onnx_nodes, tmpl.op, tmpl.requant, act=tmpl.act,
                            workspace_pieces=list(tmpl.workspace_pieces))
                if tmpl.requant is not None:
                    step.multipliers = b.const(np.asarray(tmpl.requant.multipliers, np.float32),
                                               f"{tmpl.name}.multipliers")
                    step.acc = b.new("int32", outs[0].shape, "workspace", f"{tmpl.name}.acc")
                    if getattr(tmpl.requant, "float_bias", None) is not None:
                        step.float_bias = b.const(np.asarray(tmpl.requant.float_bias, np.float32),
                                                  f"{tmpl.name}.float_bias")
                steps.append(step)
                b.by_var[key] = outs[0]
            elif isinstance(value, relax.TupleGetItem):
                tup = b.by_var[value.tuple_value.__chandle__()]
                b.by_var[key] = tup[int(value.index)]
            elif isinstance(value, relax.Tuple):
                b.by_var[key] = [arg(f) for f in value.fields]
            elif isinstance(value, GenericConst):
                b.by_var[key] = b.const(value.value.numpy(), str(var.name))
            elif isinstance(value, relax.Var):
                b.by_var[key] = b.by_var[value.__chandle__()]
            else:
                raise RuntimeError(f"program: unsupported binding {var.name} = {type(value).__name__}")
    body = main.body.body
    # a single output may be a constant itself (an output the model computes from shapes alone): arg reads both
    results = [arg(f) for f in body.fields] if isinstance(body, relax.Tuple) else (
        arg(body) if isinstance(body, GenericConst) else b.by_var[body.__chandle__()])
    results = results if isinstance(results, list) else [results]
    outputs: list[Tensor] = []
    copies: list[tuple[Tensor, Tensor]] = []
    for i, t in enumerate(results):
        produced_here = t.kind == "arena" and not any(t is o for o in outputs)
        if produced_here:
            t.kind, t.index = "output", i  # the producing step writes the caller's buffer directly
            outputs.append(t)
        else:  # an input, a constant or a tensor already returned: copied at the end
            o = b.new(t.dtype, t.shape, "output")
            o.index = i
            outputs.append(o)
            copies.append((o, t))
    prog = Program(steps, inputs, outputs, b.consts, copies=copies)
    plan_arena(prog)
    place_weights(prog)
    return prog


def plan_arena(prog: Program) -> None:
    """Offsets of arena tensors by liveness (first write .. last read; a step's workspace lives in its step):
    largest first, each at the lowest offset that no overlapping-in-time tensor occupies."""
    live: dict[int, list[int]] = {}
    tensors: dict[int, Tensor] = {}
    for i, st in enumerate(prog.steps):
        for t in [*st.inputs, *st.outputs, *st.temporaries()]:
            if t.kind in ("arena", "workspace"):
                tensors[t.id] = t
                span = live.setdefault(t.id, [i, i])
                span[0], span[1] = min(span[0], i), max(span[1], i)
    for _, src in prog.copies:
        if src.kind == "arena":
            live[src.id][1] = len(prog.steps)
    placed: list[tuple[int, int, int, int]] = []  # (start step, end step, offset, size)
    top = 0
    for tid in sorted(tensors, key=lambda k: (-_align(tensors[k].nbytes), live[k][0])):
        t, (a, z) = tensors[tid], live[tid]
        size = _align(max(1, t.nbytes))
        busy = sorted((off, off + sz) for (s0, s1, off, sz) in placed if not (s1 < a or z < s0))
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, hi)
        t.offset = off
        placed.append((a, z, off, size))
        top = max(top, off + size)
    prog.arena_bytes = max(top, ALIGN)


def place_weights(prog: Program) -> None:
    off = 0
    for t in prog.consts:
        t.offset = off
        off += _align(max(1, t.nbytes))
    prog.weights_bytes = off


def weights_blob(prog: Program) -> bytes:
    buf = bytearray(prog.weights_bytes)
    for t in prog.consts:
        assert t.data is not None
        raw = np.ascontiguousarray(t.data).tobytes()
        buf[t.offset:t.offset + len(raw)] = raw
    return bytes(buf)


def c_ident(name: str, prefix: str = "") -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", name).strip("_") or "t"
    if s[0].isdigit():
        s = "t_" + s
    return prefix + s


def short_ident(name: str, prefix: str = "", limit: int = 96) -> str:
    """`c_ident(name, prefix)`, at most `limit` characters: a longer one keeps its start and ends in a hash of
    the whole name (TVM names a fused host function after every op in it: DenseNet's concatenations of a dozen
    dequantized inputs give names of 250+ characters, too long for the file `host/<name>.c`)."""
    import hashlib

    s = c_ident(name, prefix)
    if len(s) <= limit:
        return s
    digest = hashlib.sha1(s.encode()).hexdigest()[:12]
    return f"{s[:limit - len(digest) - 1]}_{digest}"


def c_string(text: str) -> str:
    """A C string literal of `text` (UTF-8; anything but printable ASCII, quotes, backslashes and `?`, which could
    start a trigraph, as octal escapes)."""
    out = []
    for b in text.encode():
        ch = chr(b)
        out.append(ch if 32 <= b < 127 and ch not in '"\\?' else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def c_comment(text: str, limit: int = 200) -> str:
    """`text` (a name the client chose: the graph's, an input's, a node's) as inert text inside a comment of the
    artifact's C, assembly or Makefile: printable ASCII only, every other character (newlines, and backslashes,
    which splice lines in C and continue a Makefile comment) an `_`, `*/` and `/*` broken apart, no `??` (a
    trigraph under -std=c11), at most `limit` characters. The server builds these files (`make host`), so a name
    that closed its comment would be code, a directive (`#include "/etc/passwd"`, which gcc's errors then echo) or
    a make line (`$(shell ...)`) run here."""
    s = "".join(ch if 32 <= ord(ch) < 127 and ch != "\\" else "_" for ch in text[: limit * 2])
    s = s.replace("*/", "*_/").replace("/*", "/_*")
    s = re.sub(r"\?(?=\?)", "?_", s)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _file_layout(prog: Program) -> dict[str, Any]:
    """Where main.c finds each input / output in the raw files it reads and writes (the tensors back to back, in
    order): byte offsets, totals, the C pointer each tensor is passed as, and which tensors sit at an offset that
    is not 64-byte aligned (main.c stages those in aligned buffers of their own)."""
    doc: dict[str, Any] = {}
    for side, tensors in (("in", prog.inputs), ("out", prog.outputs)):
        offsets, off = [], 0
        for t in tensors:
            offsets.append(off)
            off += t.nbytes
        misaligned = {i for i, o in enumerate(offsets) if o % 64}
        doc[f"{side}_offsets"] = offsets
        doc[f"{side}_total"] = off
        doc[f"{side}_elems"] = [max(1, int(np.prod(t.shape, dtype=np.int64))) for t in tensors]
        doc[f"{side}_misaligned"] = misaligned
        doc[f"{side}_ptrs"] = [f"(void *)tp_{side}{i}" if i in misaligned else f"(void *)(tp_{side}_file + {o})"
                               for i, o in enumerate(offsets)]
    return doc


def pack(files: dict[str, bytes], root: str = "tileplan_model") -> bytes:
    """A tar of `files` under `root/` (deterministic: sorted, mtime 0)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(files):
            data = files[path]
            info = tarfile.TarInfo(f"{root}/{path}")
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _env() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["comment"] = c_comment  # every name a client chose, wherever a template writes it in a comment
    return env


def build_files(model_name: str, hardware: str, params_header: str, kernel_files: list[str],
                host_files: list[str]) -> dict[str, str]:
    """The artifact's Makefile (its source list: `kernel_files`, `host_files`, sorted) and the files of the
    emulator and the Gemmini header it ships: what `render` writes of them, and all a compile of a kernel or host
    op in the host build needs besides its own source (runner.prebuild)."""
    from tileplan.codegen.emulator import HEADER_DIR

    return {
        "Makefile": _env().get_template("Makefile.j2").render(model_name=model_name, hardware=hardware,
                                                              kernel_files=sorted(kernel_files),
                                                              host_files=sorted(host_files)),
        "emulator/gemmini_emu.c": (HEADER_DIR / "gemmini_emu.c").read_text(),
        "emulator/gemmini_emu.h": (HEADER_DIR / "gemmini_emu.h").read_text(),
        "gemmini.h": (HEADER_DIR / "gemmini.h").read_text(),
        "gemmini_params.h": params_header,
    }


def render(prog: Program, *, model_name: str, hardware: str, dim: int, timings: list[Any], emu_dims: tuple[int, ...],
           kernels: dict[str, str], host_sources: dict[str, str], decls: list[str], manifest: str,
           readme: str, input_names: list[str], output_names: list[str], params_header: str) -> dict[str, bytes]:
    """The artifact's files.  `kernels` / `host_sources`: file stem -> C source; `decls`: C prototypes of every
    called function; `timings`: the emulator timing (TimingParams) of each timing index; `params_header`: the
    gemmini_params.h of the hardware's configuration (the kernels refuse to compile against another)."""
    from dataclasses import asdict

    env = _env()
    in_params = [f"const {t.ctype} *{c_ident(n, 'in_')}" for t, n in zip(prog.inputs, input_names)]
    out_params = [f"{t.ctype} *{c_ident(n, 'out_')}" for t, n in zip(prog.outputs, output_names)]
    ctx = dict(prog=prog, model_name=model_name, hardware=hardware, dim=dim, decls=decls,
               in_params=in_params, out_params=out_params, input_names=input_names, output_names=output_names,
               in_args=[c_ident(n, "in_") for n in input_names], out_args=[c_ident(n, "out_") for n in output_names],
               timings=[", ".join(repr(float(v)) for v in asdict(t).values()) for t in timings],
               emu_dims=", ".join(f"{d}u" for d in emu_dims), kernel_files=sorted(kernels),
               host_files=sorted(host_sources), shape=lambda t: "x".join(map(str, t.shape)) or "scalar")
    env.filters["c_string"] = c_string
    ctx.update(_file_layout(prog))
    files: dict[str, str] = {
        "model.c": env.get_template("model.c.j2").render(**ctx),
        "main.c": env.get_template("main.c.j2").render(**ctx),
        "tileplan_model.h": env.get_template("tileplan_model.h.j2").render(**ctx),
        "tp_ops.h": env.get_template("tp_ops.h.j2").render(**ctx),
        "weights.S": env.get_template("weights.S.j2").render(**ctx),
        "emulator/tp_emulate.c": env.get_template("tp_emulate.c.j2").render(**ctx),
        "emulator/tp_emulate.h": env.get_template("tp_emulate.h.j2").render(**ctx),
        **build_files(model_name, hardware, params_header, list(kernels), list(host_sources)),
        "README.md": readme,
        "tileplan.json": manifest,
    }
    for stem, src in kernels.items():
        files[f"kernels/{stem}.c"] = src
    for stem, src in host_sources.items():
        files[f"host/{stem}.c"] = src
    out = {k: v.encode() for k, v in files.items()}
    out["weights.bin"] = weights_blob(prog)
    return out
