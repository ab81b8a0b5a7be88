"""Lowered TIR (after tensorization) -> one C file that includes only gemmini.h and libc.

TVM's own `target="c"` output wraps kernels in the TVM packed-function ABI and includes TVM runtime headers; a
Gemmini program has to stand alone, so this emitter prints the lowered PrimFunc itself.  It understands the subset
the Gemmini schedules produce: loops, buffer stores / loads (host stages such as padding), local buffer
allocations and `call_extern` to the Gemmini API.  Scratchpad and accumulator buffers are not memory on the host:
each allocation gets a fixed range of rows, and `__tp_local_addr(access_ptr, flags)` becomes a row address.
DRAM buffers the function allocates become pieces of the caller's workspace (one that nothing reads or writes, such
as a padded output the stores bypass, gets none).  Everything but the kernel and its `<name>_entry` wrapper is
`static`, so several kernels (distinct names) link into one program.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import s_tir, tirx

from tileplan.codegen.registry import CodegenError

CTYPES = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
          "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t", "float32": "float", "float64": "double",
          "bool": "_Bool"}
# tirx math intrinsics -> C (float32 uses the `f` variant); `round` keeps TVM's meaning (half away from zero)
MATH = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10",
        "log1p": "log1p", "sqrt": "sqrt", "erf": "erf", "tanh": "tanh", "sin": "sin", "cos": "cos", "tan": "tan",
        "atan": "atan", "asin": "asin", "acos": "acos", "sinh": "sinh", "cosh": "cosh", "fabs": "fabs",
        "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
        "floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "round", "nearbyint": "nearbyint",
        "pow": "pow", "fmod": "fmod", "atan2": "atan2", "copysign": "copysign", "hypot": "hypot"}
# integer helpers every emitted file defines (static: one copy per translation unit)
_INT_HELPERS = [
    "static inline int32_t tp_floordiv(int32_t a, int32_t b) { int32_t q = a / b; "
    "return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }",
    "static inline int32_t tp_floormod(int32_t a, int32_t b) { int32_t m = a % b; "
    "return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }",
    "static inline int64_t tp_floordiv64(int64_t a, int64_t b) { int64_t q = a / b; "
    "return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }",
    "static inline int64_t tp_floormod64(int64_t a, int64_t b) { int64_t m = a % b; "
    "return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }",
]
BINOPS = {"Add": "+", "Sub": "-", "Mul": "*", "EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">=",
          "And": "&&", "Or": "||", "BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^", "ShiftLeft": "<<",
          "ShiftRight": ">>"}
LOCAL_SCOPES = ("global.spad", "global.acc")
LOCAL_ADDR = "__tp_local_addr"
DMA_ANNOTATION = "tileplan.dma"


def lower(mod: tvm.IRModule) -> tvm.IRModule:
    """The s_tir lowering passes a tensorized, pipelined Gemmini schedule needs, in TVM's default order."""
    passes = [
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerMatchBuffer(),
        s_tir.transform.StmtSimplify(),
        s_tir.transform.InjectSoftwarePipeline(),
        s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.StmtSimplify(),
        tirx.transform.RemoveNoOp(),
    ]
    with tvm.transform.PassContext(opt_level=3, config={"tirx.disable_storage_rewrite": True}):
        return tvm.ir.transform.Sequential(passes)(mod)


def _dt(e: Any) -> str:
    return str(e.ty)


def _key(v: Any) -> int:
    return v.__chandle__()


def _ctype(dtype: Any) -> str:
    s = str(dtype)
    if s not in CTYPES:
        raise CodegenError(f"C emitter: unsupported dtype {s}")
    return CTYPES[s]


@dataclass
class LocalBuffer:
    name: str
    scope: str
    base_row: int
    rows: int


@dataclass
class Emitted:
    source: str
    function: str
    entry: str
    params: list[str]
    local: list[LocalBuffer]
    spad_rows_used: int
    acc_rows_used: int
    workspace_bytes: int
    # the DRAM buffers carved from the workspace, (byte offset, bytes) each: the padded copies the kernel's DMA
    # reads and writes, each a tensor of its own to the emulator's timing (a program registers them)
    workspace_pieces: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _State:
    dim: int
    names: dict[int, str] = field(default_factory=dict)  # buffer var -> C pointer name
    dtypes: dict[int, str] = field(default_factory=dict)
    local: dict[int, LocalBuffer] = field(default_factory=dict)
    vars: dict[int, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    spad_next: int = 0
    acc_next: int = 0
    workspace: int = 0  # bytes of DRAM scratch carved so far (64-byte aligned pieces)
    pieces: list[tuple[int, int]] = field(default_factory=list)  # (offset, bytes) of each carved piece
    referenced: set[int] = field(default_factory=set)  # buffers the code names (see CEmitter.emit's dry run)
    global_allocs: dict[int, str] = field(default_factory=dict)  # DRAM buffers the function allocates
    aliases: dict[int, int] = field(default_factory=dict)  # a declared view -> the buffer it views
    unused: set[int] | None = None  # global allocations to leave out (None: keep all)

    def carve(self, nbytes: int) -> int:
        off = self.workspace
        self.workspace += -(-nbytes // 64) * 64
        self.pieces.append((off, nbytes))
        return off

    def fresh(self, base: str) -> str:
        base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in base) or "v"
        if base[0].isdigit():
            base = "v" + base
        name, i = base, 1
        while name in self.used or name in _RESERVED:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name


_RESERVED = {"int", "char", "float", "double", "for", "if", "else", "return", "void", "main", "DIM", "free", "malloc", "workspace"}


def _bind_param_offset(p: Any, st: _State) -> None:
    """A parameter buffer declared with a symbolic element offset (TOPI's scatter_nd declares its data and updates
    so, with an offset factor): every caller passes the tensor's own start, so the offset is 0."""
    off = getattr(p, "elem_offset", None)
    if off is not None and type(off).__name__ == "Var":
        st.vars[_key(off)] = "0"


class CEmitter:
    """`spad_reserved`: scratchpad rows [0, n) the target's support code addresses itself; `acc_copies`: how many
    copies of every accumulator buffer to reserve (2 when the support code alternates halves)."""

    def __init__(self, dim: int, spad_rows: int, acc_rows: int, spad_reserved: int = 0, acc_copies: int = 1,
                 support: str = "") -> None:
        self.dim, self.spad_rows, self.acc_rows = dim, spad_rows, acc_rows
        self.spad_reserved, self.acc_copies, self.support = spad_reserved, acc_copies, support

    def emit(self, func: tirx.PrimFunc, name: str, param_names: list[str], workspace: int,
             prologue: list[str], epilogue: list[str], header_comment: str,
             preamble: Sequence[str] = (), outputs: int = 1, includes: tuple[str, ...] = ('"gemmini.h"',),
             entry: bool = True) -> Emitted:
        """`param_names`: C names of the PrimFunc parameters; the last `workspace` of them are allocated here;
        the `outputs` parameters before those are written (the others are `const`).  `preamble`: lines after the
        includes (e.g. configuration checks); `includes` beyond math.h and stdint.h; `entry`: also define the
        emulator runner's `<name>_entry(void **args)`."""
        dry = _State(self.dim)  # a first pass finds the buffers the code names
        dry.spad_next = self.spad_reserved
        for p in func.params:
            dry.names[_key(p)] = dry.fresh("p")
            dry.dtypes[_key(p)] = str(p.dtype)
            _bind_param_offset(p, dry)
        self._stmt(func.body, dry, [], 1)
        used = {dry.aliases.get(k, k) for k in dry.referenced}
        st = _State(self.dim)
        st.unused = {k for k in dry.global_allocs if k not in used}
        st.spad_next = self.spad_reserved
        if st.spad_next > self.spad_rows:
            raise CodegenError(f"the support code needs {st.spad_next} scratchpad rows, have {self.spad_rows}")
        params = list(func.params)
        if len(params) != len(param_names):
            raise CodegenError("parameter names do not match the PrimFunc")
        sig, allocs = [], []
        for i, (p, pname) in enumerate(zip(params, param_names)):
            cname = st.fresh(pname)
            st.names[_key(p)] = cname
            _bind_param_offset(p, st)
            dtype = str(getattr(p, "dtype", None))  # "None": _ctype refuses it with the reason
            st.dtypes[_key(p)] = dtype
            ct = _ctype(dtype)
            if i >= len(params) - workspace:
                allocs.append(f"  {ct} *{cname} = ({ct} *)(workspace + {st.carve(_numel(p) * _size(dtype))});")
            else:
                const = "const " if i < len(params) - workspace - outputs else ""
                sig.append(f"{const}{ct} *{cname}")
        body: list[str] = []
        self._stmt(func.body, st, body, 1)
        lines = [f"/* {header_comment} */", "#include <math.h>", "#include <stdint.h>",
                 *[f"#include {inc}" for inc in includes], "", *preamble, "", *_INT_HELPERS, ""]
        if self.support:
            lines += [self.support, ""]
        if self.spad_reserved:
            lines.append(f"/* support code: global.spad rows 0..{self.spad_reserved - 1} */")
        for lb in st.local.values():
            lines.append(f"/* {lb.name}: {lb.scope} rows {lb.base_row}..{lb.base_row + lb.rows - 1} */")
        lines.append("")
        sig.append("uint8_t *workspace")
        lines.append(f"/* workspace: {st.workspace} bytes of DRAM scratch (padded copies of the operands) */")
        lines.append(f"#define {name.upper()}_WORKSPACE_BYTES {st.workspace}")
        lines.append(f"void {name}({', '.join(sig)}) {{")
        lines += allocs
        lines += ["  " + p for p in prologue]
        lines += body
        lines += ["  " + p for p in epilogue]
        lines.append("}")
        entry_name = f"{name}_entry"
        n_args = len(params) - workspace
        if entry:
            casts = ", ".join(f"({sig[i].rsplit('*', 1)[0].strip()} *)args[{i}]" for i in range(n_args + 1))
            lines += ["", "/* Calling convention of the emulator's runner: args[i] is the i-th buffer, the workspace "
                      "last. */", f"void {entry_name}(void **args) {{ {name}({casts}); }}"]
        lines.append("")
        return Emitted("\n".join(lines), name, entry_name if entry else "", param_names[: n_args],
                       list(st.local.values()), st.spad_next, st.acc_next, st.workspace, list(st.pieces))

    # -- statements ---------------------------------------------------------------------------------------------
    def _stmt(self, s: Any, st: _State, out: list[str], ind: int) -> None:
        pad = "  " * ind
        t = type(s).__name__
        if t == "SeqStmt":
            for x in s.seq:
                self._stmt(x, st, out, ind)
        elif t == "DeclBuffer":
            data = s.data
            if not (isinstance(data, tvm.ir.expr.Call) and data.op.name == "tirx.buffer_data"):
                raise CodegenError(f"C emitter: DeclBuffer over {data}")
            src = data.args[0]
            st.aliases[_key(s.buffer)] = st.aliases.get(_key(src), _key(src))
            st.names[_key(s.buffer)] = st.names[_key(src)] if _key(src) in st.names else self._name_of(src, st)
            st.dtypes[_key(s.buffer)] = str(s.buffer.dtype)
            if _key(src) in st.local:
                st.local[_key(s.buffer)] = st.local[_key(src)]
        elif t == "AllocBuffer":
            buf = s.buffer
            scope = buf.scope()
            n = _numel(buf)
            if scope in LOCAL_SCOPES:
                # a row holds DIM channels (last axis) of one pixel
                shape = [int(x) for x in buf.shape]
                rows = math.prod(shape[:-1]) * -(-shape[-1] // self.dim) if shape else 1
                if scope == "global.acc":
                    rows *= self.acc_copies
                if scope == "global.spad":
                    base, st.spad_next = st.spad_next, st.spad_next + rows
                    if st.spad_next > self.spad_rows:
                        raise CodegenError(f"scratchpad buffers need {st.spad_next} rows, have {self.spad_rows}")
                else:
                    base, st.acc_next = st.acc_next, st.acc_next + rows
                    if st.acc_next > self.acc_rows:
                        raise CodegenError(f"accumulator buffers need {st.acc_next} rows, have {self.acc_rows}")
                lb = LocalBuffer(str(buf.name), scope, base, rows)
                st.local[_key(buf)] = lb
                st.names[_key(buf)] = st.fresh(str(buf.name))
            elif scope in ("global", "local", ""):  # host memory: carved from the workspace
                st.global_allocs[_key(buf)] = str(buf.name)
                if st.unused is not None and _key(buf) in st.unused:
                    return  # nothing reads or writes it: no workspace
                cname = st.fresh(str(buf.name))
                ct = _ctype(buf.dtype)
                st.names[_key(buf)] = cname
                st.dtypes[_key(buf)] = str(buf.dtype)
                out.append(f"{pad}{ct} *{cname} = ({ct} *)(workspace + {st.carve(n * _size(str(buf.dtype)))});")
            else:
                raise CodegenError(f"C emitter: unsupported storage scope {scope}")
        elif t == "For" and DMA_ANNOTATION in s.annotations:
            out.append(pad + self._dma_copy(s, st))
        elif t == "For":
            v = st.fresh(str(s.loop_var.name))
            st.vars[_key(s.loop_var)] = v
            lo, ext = self._expr(s.min, st), self._expr(s.extent, st)
            out.append(f"{pad}for (int32_t {v} = {lo}; {v} < {lo} + {ext}; ++{v}) {{")
            self._stmt(s.body, st, out, ind + 1)
            out.append(f"{pad}}}")
        elif t == "Evaluate":
            out.append(f"{pad}{self._expr(s.value, st)};")
        elif t == "BufferStore":
            name = self._name_of(s.buffer, st)
            out.append(f"{pad}{name}[{self._index(s.indices)(self, st)}] = {self._expr(s.value, st)};")
        elif t == "IfThenElse":
            out.append(f"{pad}if ({self._expr(s.condition, st)}) {{")
            self._stmt(s.then_case, st, out, ind + 1)
            if s.else_case is not None:
                out.append(f"{pad}}} else {{")
                self._stmt(s.else_case, st, out, ind + 1)
            out.append(f"{pad}}}")
        elif t in ("LetStmt", "Bind"):
            v = st.fresh(str(s.var.name))
            st.vars[_key(s.var)] = v
            out.append(f"{pad}{_ctype(_dt(s.var))} {v} = {self._expr(s.value, st)};")
            if getattr(s, "body", None) is not None:
                self._stmt(s.body, st, out, ind)
        elif t == "AttrStmt":
            self._stmt(s.body, st, out, ind)
        elif t == "AssertStmt":
            if getattr(s, "body", None) is not None:
                self._stmt(s.body, st, out, ind)
        else:
            raise CodegenError(f"C emitter: unsupported statement {t}")

    def _dma_copy(self, loop: Any, st: _State) -> str:
        """`for i < rows: for j < DIM: spad[f(i, j)] = dram[g(i, j)]` (marked by the schedule) -> one mvin."""
        kind, channel, mode = (str(loop.annotations[DMA_ANNOTATION]).split(":") + ["", ""])[:3]
        if mode == "rowwise":  # for i: { for j < DIM: spad[..] = dram[..] }  ->  for i: one-row mvin
            v = st.fresh(str(loop.loop_var.name))
            st.vars[_key(loop.loop_var)] = v
            lo, ext = self._expr(loop.min, st), self._expr(loop.extent, st)
            one = self._dma_rows(loop.body, None, st, channel)
            return f"for (int32_t {v} = {lo}; {v} < {lo} + {ext}; ++{v}) {one}"
        return self._dma_rows(loop.body, loop, st, channel, kind)

    def _dma_rows(self, inner: Any, loop: Any, st: _State, channel: str, kind: str = "mvin") -> str:
        if kind != "mvin" or type(inner).__name__ != "For" or type(inner.body).__name__ != "BufferStore":
            raise CodegenError("C emitter: a marked DMA copy must be two loops around one store")
        store = inner.body
        load = store.value
        if type(load).__name__ != "TensorLoad":
            raise CodegenError("C emitter: a marked DMA copy must store a load")
        rows, cols = (int(loop.extent) if loop is not None else 1), int(inner.extent)
        if rows > self.dim or cols != self.dim:
            raise CodegenError(f"C emitter: a DMA copy of {rows}x{cols} is not rows<=DIM x DIM")
        lb = st.local.get(_key(store.buffer))
        if lb is None or lb.scope != "global.spad":
            raise CodegenError("C emitter: a marked DMA copy must write the scratchpad")
        i, j = (loop.loop_var if loop is not None else None), inner.loop_var
        dst, src = store.indices[0], load.indices[0]
        # The nest must be row-major in the scratchpad (rows of DIM) and row-strided in DRAM.
        d = [_affine(dst, i, j, a, b) for a, b in ((0, 0), (1, 0), (0, 1))]
        sgn = [_affine(src, i, j, a, b) for a, b in ((0, 0), (1, 0), (0, 1))]
        if (loop is not None and d[1] - d[0] != self.dim) or d[2] - d[0] != 1 or sgn[2] - sgn[0] != 1:
            raise CodegenError("C emitter: DMA copy is not row-contiguous")
        if i is not None:
            st.vars[_key(i)] = "0"
        st.vars[_key(j)] = "0"
        dst0, src0 = self._expr(dst, st), self._expr(src, st)
        fn = ("gemmini_extended_mvin", "gemmini_extended_mvin2", "gemmini_extended_mvin3")[int(channel or 0)]
        row = f"({lb.base_row}u + (uint32_t)tp_floordiv({dst0}, {self.dim}))"
        return f"{fn}(({self._name_of(load.source, st)} + {src0}), (uint32_t){row}, {cols}, {rows});"

    def _name_of(self, buf: Any, st: _State) -> str:
        k = _key(buf)
        st.referenced.add(k)
        if k not in st.names:
            raise CodegenError(f"C emitter: unknown buffer {buf}")
        if k in st.local:
            raise CodegenError(f"C emitter: host code touches local buffer {st.local[k].name}")
        return st.names[k]

    @staticmethod
    def _index(indices: Any) -> Any:
        if len(indices) != 1:
            raise CodegenError("C emitter: buffers must be flattened")
        return lambda self, st: self._expr(indices[0], st)

    # -- expressions --------------------------------------------------------------------------------------------
    def _expr(self, e: Any, st: _State) -> str:
        t = type(e).__name__
        if t == "IntImm":
            v = int(e.value)
            if _dt(e) == "bool":
                return "1" if v else "0"
            if _dt(e) in ("uint32", "uint64") or v > 2**31 - 1:
                return f"{v}u" if v < 2**32 else f"{v}ull"
            if v < -(2**31) + 1:
                return f"({v + 1}ll - 1)" if v == -(2**63) else f"({v}ll)"
            return str(v) if v >= 0 else f"({v})"
        if t == "FloatImm":
            return _float_literal(float(e.value), _dt(e))
        if t == "Var":
            k = _key(e)
            if k in st.vars:
                return st.vars[k]
            raise CodegenError(f"C emitter: unbound variable {e}")
        if t in BINOPS:
            return f"({self._expr(e.a, st)} {BINOPS[t]} {self._expr(e.b, st)})"
        if t == "Div" and "float" in _dt(e):
            return f"({self._expr(e.a, st)} / {self._expr(e.b, st)})"
        if t in ("FloorDiv", "Div", "FloorMod", "Mod"):
            # TIR's floordiv / floormod round towards -inf; its Div / Mod on integers truncate like C's
            if "float" in _dt(e):
                if t == "FloorDiv":
                    return f"floor({self._expr(e.a, st)} / {self._expr(e.b, st)})"
                return f"fmod({self._expr(e.a, st)}, {self._expr(e.b, st)})"
            a, b = self._expr(e.a, st), self._expr(e.b, st)
            if t == "Div":
                return f"({a} / {b})"
            if t == "Mod":
                return f"({a} % {b})"
            wide = "64" if _dt(e) in ("int64", "uint64") else ""
            return f"tp_floor{'div' if t == 'FloorDiv' else 'mod'}{wide}({a}, {b})"
        if t in ("Min", "Max"):
            a, b = self._expr(e.a, st), self._expr(e.b, st)
            op = "<" if t == "Min" else ">"
            return f"(({a}) {op} ({b}) ? ({a}) : ({b}))"
        if t == "Not":
            return f"(!{self._expr(e.a, st)})"
        if t in ("LShift", "RShift", "BitwiseNot"):
            # in the operand's type: C promotes narrower ones to int (a left shift past int's range is undefined
            # there), so a left shift is computed unsigned at 32 or 64 bits and every result cast back
            ty = _ctype(_dt(e))
            if t == "BitwiseNot":
                return f"(({ty})(~{self._expr(e.a, st)}))"
            a, b = self._expr(e.a, st), self._expr(e.b, st)
            if t == "RShift":
                return f"(({ty})({a} >> {b}))"
            wide = "uint64_t" if _dt(e) in ("int64", "uint64") else "uint32_t"
            return f"(({ty})(({wide})({a}) << {b}))"
        if t == "Select":
            return f"({self._expr(e.condition, st)} ? {self._expr(e.true_value, st)} : {self._expr(e.false_value, st)})"
        if t == "Cast":
            return f"(({_ctype(_dt(e))})({self._expr(e.value, st)}))"
        if t == "TensorLoad":
            name = self._name_of(e.source, st)
            return f"{name}[{self._expr(e.indices[0], st)}]" if len(e.indices) == 1 else _flat_err()
        if t == "Call":
            return self._call(e, st)
        raise CodegenError(f"C emitter: unsupported expression {t}: {e}")

    def _call(self, e: Any, st: _State) -> str:
        op = "tirx." + e.op.name.split(".")[-1]
        args = list(e.args)
        if op == "tirx.call_extern":
            fname = str(args[0].value)
            if fname == LOCAL_ADDR:
                return self._local_addr(args[1], args[2], st)
            return f"{fname}({', '.join(self._expr(a, st) for a in args[1:])})"
        if op == "tirx.tvm_access_ptr":
            data, offset = args[1], args[2]
            buf = data.args[0] if isinstance(data, tvm.ir.expr.Call) else data
            if _key(buf) in st.local:
                raise CodegenError("C emitter: a local buffer's pointer escaped (use __tp_local_addr)")
            return f"({self._name_of(buf, st)} + {self._expr(offset, st)})"
        if op == "tirx.if_then_else":
            return f"({self._expr(args[0], st)} ? {self._expr(args[1], st)} : {self._expr(args[2], st)})"
        short = op.split(".", 1)[1]
        if short in MATH:
            f = MATH[short] + ("f" if _dt(e) == "float32" else "")
            return f"{f}({', '.join(self._expr(a, st) for a in args)})"
        if short == "rsqrt":
            one = "1.0f" if _dt(e) == "float32" else "1.0"
            f = "sqrtf" if _dt(e) == "float32" else "sqrt"
            return f"({one} / {f}({self._expr(args[0], st)}))"
        if short == "sigmoid":
            one, f = ("1.0f", "expf") if _dt(e) == "float32" else ("1.0", "exp")
            return f"({one} / ({one} + {f}(-({self._expr(args[0], st)}))))"
        if short in ("isnan", "isinf", "isfinite"):
            return f"{short}({self._expr(args[0], st)})"
        if op == "tirx.likely":
            return self._expr(args[0], st)
        if op == "tirx.buffer_data":
            return self._name_of(args[0], st)
        raise CodegenError(f"C emitter: unsupported call {op}")

    def _local_addr(self, ptr: Any, flags: Any, st: _State) -> str:
        if not (isinstance(ptr, tvm.ir.expr.Call) and ptr.op.name == "tirx.tvm_access_ptr"):
            raise CodegenError(f"C emitter: {LOCAL_ADDR} expects an access pointer, got {ptr}")
        data, offset = ptr.args[1], ptr.args[2]
        buf = data.args[0] if isinstance(data, tvm.ir.expr.Call) else data
        lb = st.local.get(_key(buf))
        if lb is None:
            raise CodegenError(f"C emitter: {LOCAL_ADDR} of a non-local buffer {buf}")
        fl = int(flags.value)
        row = f"({lb.base_row}u + (uint32_t)tp_floordiv({self._expr(offset, st)}, {self.dim}))"
        return f"((uint32_t){fl}u | {row})" if fl else f"((uint32_t){row})"


def _float_literal(v: float, dtype: str) -> str:
    """An exact C literal (hexadecimal floating point; INFINITY / NAN from math.h)."""
    suffix = "f" if dtype == "float32" else ""
    if math.isnan(v):
        return "NAN" if suffix else "((double)NAN)"
    if math.isinf(v):
        inf = "INFINITY" if suffix else "((double)INFINITY)"
        return inf if v > 0 else f"(-{inf})"
    text = float.hex(v) + suffix
    return f"({text})" if v < 0 else text


def _affine(e: Any, i: Any, j: Any, vi: int, vj: int) -> int:
    """Evaluate an index with loop vars i, j set and every other variable 0 (a linearity probe)."""
    t = type(e).__name__
    if t == "IntImm":
        return int(e.value)
    if t == "Var":
        return vi if (i is not None and e.same_as(i)) else vj if e.same_as(j) else 0
    a = _affine(e.a, i, j, vi, vj)
    b = _affine(e.b, i, j, vi, vj)
    ops = {"Add": lambda: a + b, "Sub": lambda: a - b, "Mul": lambda: a * b, "FloorDiv": lambda: a // b,
           "FloorMod": lambda: a % b, "Min": lambda: min(a, b), "Max": lambda: max(a, b)}
    if t not in ops:
        raise CodegenError(f"C emitter: DMA index uses {t}")
    return ops[t]()


def _flat_err() -> str:
    raise CodegenError("C emitter: buffers must be flattened")


def _size(dtype: str) -> int:
    return {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "float32": 4,
            "int64": 8, "uint64": 8, "float64": 8}[dtype]


def _numel(buf: Any) -> int:
    n = 1
    for s in buf.shape:
        n *= int(s)
    return n
