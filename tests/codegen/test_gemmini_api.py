"""The Gemmini API the generated C relies on, as facts of Gemmini's own include/gemmini.h (ucb-bar/gemmini-rocc-tests):
names, parameter lists, RoCC funct7 codes and bit layouts.  The stand-in header (codegen/emulator/gemmini.h) must
declare exactly these, the generated kernels may use nothing else, and on RISC-V the stand-in must emit Gemmini's
custom-3 instructions.  (bench/gemmini_header.py checks the same kernels against the real header itself.)"""

from __future__ import annotations

import random
import re
import struct
import subprocess

import pytest
from plans import random_layer, random_mapping

from tileplan.codegen.emulator import HEADER_DIR, GemminiConfig
from tileplan.codegen.emulator.build import (
    BuildError,
    NoCompiler,
    compile_object,
    compiler,
    cross_compile_object,
    include_dir,
    riscv_compiler,
    riscv_objdump,
    rocc_words,
)
from tileplan.codegen.pipeline import Epilogue, generate
from tileplan.hardware.catalog import get_hardware
from tileplan.workload import parse_layer

HW16 = get_hardware("gemmini-16x16")

# (name, parameters, what it does) -- Gemmini's include/gemmini.h
API = [
    ("gemmini_extended_mvin", ("dram_addr", "spad_addr", "cols", "rows"), "DRAM -> local, load channel 0 (k_MVIN)"),
    ("gemmini_extended_mvin2", ("dram_addr", "spad_addr", "cols", "rows"), "load channel 1 (k_MVIN2)"),
    ("gemmini_extended_mvin3", ("dram_addr", "spad_addr", "cols", "rows"), "load channel 2 (k_MVIN3)"),
    ("gemmini_block_mvin", ("dram_addr", "spad_addr", "len"), "mvin of len DIM-wide blocks, DIM rows"),
    ("gemmini_mvin", ("dram_addr", "spad_addr"), "mvin of DIM x DIM"),
    ("gemmini_extended_mvout", ("dram_addr", "spad_addr", "cols", "rows"), "local -> DRAM (k_MVOUT)"),
    ("gemmini_mvout", ("dram_addr", "spad_addr"), "mvout of DIM x DIM"),
    ("gemmini_extended_compute_preloaded", ("A", "BD", "A_cols", "A_rows", "BD_cols", "BD_rows"),
     "compute with the preloaded B / D (k_COMPUTE_PRELOADED)"),
    ("gemmini_extended_compute_accumulated", ("A", "BD", "A_cols", "A_rows", "BD_cols", "BD_rows"),
     "compute on the weights in the array (k_COMPUTE_ACCUMULATE)"),
    ("gemmini_compute_preloaded", ("A", "BD"), "DIM x DIM blocks"),
    ("gemmini_compute_accumulated", ("A", "BD"), "DIM x DIM blocks"),
    ("gemmini_extended_preload", ("BD", "C", "BD_cols", "BD_rows", "C_cols", "C_rows"),
     "B (WS) or D (OS), and where the next compute writes C (k_PRELOAD)"),
    ("gemmini_preload", ("BD", "C"), "DIM x DIM blocks"),
    ("gemmini_preload_zeros", ("C",), "no B / D operand"),
    ("gemmini_extended3_config_ex", ("dataflow", "sys_act", "sys_shift", "sys_acc_scale", "C_stride", "A_stride",
                                     "A_transpose", "B_transpose", "set_only_strides"), "execute configuration"),
    ("gemmini_extended2_config_ex", ("dataflow", "sys_act", "sys_shift", "A_stride", "A_transpose", "B_transpose"),
     "acc scale identity, C_stride 1"),
    ("gemmini_extended_config_ex", ("dataflow", "sys_act", "sys_shift", "A_stride", "A_transpose", "B_transpose"),
     "= extended2"),
    ("gemmini_config_ex", ("dataflow", "sys_act", "sys_shift"), "A_stride 1, no transposes"),
    ("gemmini_extended5_config_ld", ("stride", "scale", "shrunk", "block_mvin_stride", "pixel_repeats", "id"),
     "load channel configuration"),
    ("gemmini_extended4_config_ld", ("stride", "scale", "shrunk", "block_mvin_stride", "id"), "pixel_repeats 1"),
    ("gemmini_extended3_config_ld", ("stride", "scale", "shrunk", "id"), "block_mvin_stride DIM"),
    ("gemmini_extended2_config_ld", ("stride", "scale", "shrunk"), "channel 0"),
    ("gemmini_extended_config_ld", ("stride", "scale"), "not shrunk"),
    ("gemmini_config_ld", ("stride",), "scale identity"),
    ("gemmini_extended2_config_st", ("stride", "acc_act", "acc_scale", "pool_stride", "pool_size", "pool_out_dim",
                                     "porows", "pocols", "orows", "ocols", "upad", "lpad"), "store configuration"),
    ("gemmini_extended_config_st", ("stride", "acc_act", "acc_scale"), "no pooling"),
    ("gemmini_config_st", ("stride",), "no activation, scale identity"),
    ("gemmini_flush", ("skip",), "TLB flush (k_FLUSH)"),
    ("gemmini_fence", (), "wait until every issued instruction completed"),
    ("ROCC_INSTRUCTION_RS1_RS2", ("x", "rs1", "rs2", "funct"), "one RoCC instruction on custom-x"),
]
ARITY = {name: len(params) for name, params, _ in API}
CONSTANTS = {
    "k_CONFIG": 0, "k_MVIN2": 1, "k_MVIN": 2, "k_MVOUT": 3, "k_COMPUTE_PRELOADED": 4, "k_COMPUTE_ACCUMULATE": 5,
    "k_PRELOAD": 6, "k_FLUSH": 7, "k_LOOP_WS": 8, "k_MVIN3": 14, "k_LOOP_CONV_WS": 15, "k_COUNTER": 126,
    "CONFIG_EX": 0, "CONFIG_LD": 1, "CONFIG_ST": 2, "CONFIG_BERT": 3, "OUTPUT_STATIONARY": 0, "WEIGHT_STATIONARY": 1,
    "NO_ACTIVATION": 0, "RELU": 1, "XCUSTOM_ACC": 3, "ADDR_LEN": 32,
}
# Names of gemmini_params.h (the configuration) a kernel may use besides the API.
PARAMS = {"DIM", "BANK_NUM", "BANK_ROWS", "ACC_ROWS", "MAX_BYTES", "MAX_BLOCK_LEN", "MAX_BLOCK_LEN_ACC", "ADDR_LEN",
          "MVIN_SCALE_IDENTITY", "ACC_SCALE_IDENTITY", "ELEM_T_IS_FLOAT", "ACC_SCALE_T_IS_FLOAT", "GARBAGE_ADDR",
          "elem_t", "acc_t", "acc_scale_t", "scale_t", "ACC_READ_FULL_WIDTH"}


def _macros(text: str) -> dict[str, tuple[str, ...]]:
    """Function-like macros defined in a header: name -> parameter names."""
    out = {}
    text = re.sub(r"\\\n", " ", text)  # continuation lines
    for m in re.finditer(r"^#define\s+(\w+)\(([^)]*)\)", text, re.MULTILINE):
        out[m.group(1)] = tuple(p.strip() for p in m.group(2).split(",") if p.strip())
    return out


def test_stand_in_header_declares_exactly_the_api():
    macros = _macros((HEADER_DIR / "gemmini.h").read_text())
    api = {name: params for name, params, _ in API}
    for name, params in api.items():
        assert macros.get(name) == params, (name, macros.get(name), params)
    # nothing Gemmini-named that the real header lacks (helpers carry Tileplan's prefix or are the real helpers)
    invented = {n for n in macros if n not in api and not n.startswith("TILEPLAN_")
                and n not in ("scale_t_to_scale_t_bits",)}
    assert not invented, invented
    header = (HEADER_DIR / "gemmini.h").read_text() + (HEADER_DIR / "gemmini_params.h").read_text()
    for name, value in CONSTANTS.items():
        assert re.search(rf"^#define {name} {value}$", header, re.MULTILINE), name
    for name in ("ACC_ADDR_BIT", "ACC_ACCUMULATE_BIT", "ACC_READ_FULL_BIT"):  # invented by an earlier version
        assert name not in header


def test_a_call_with_the_wrong_arity_does_not_compile(tmp_path):
    """The API is function-like macros: one argument too many is a preprocessor error for every one of them."""
    calls = "\n".join(f"  {name}({', '.join(['0'] * (n + 1))});" for name, n in ARITY.items())
    src = f'#include "gemmini.h"\nvoid f(void) {{\n{calls}\n}}\n'
    with pytest.raises(BuildError) as info:
        compile_object(src, tmp_path)
    for name in ARITY:
        assert re.search(rf'macro "{name}" (passed|requires) \d+ arguments', str(info.value)), name
    ok = "\n".join(f"  {name}({', '.join(['0'] * n)});" for name, n in ARITY.items()
                   if name not in ("ROCC_INSTRUCTION_RS1_RS2",))
    compile_object(f'#include "gemmini.h"\nvoid f(void) {{\n{ok}\n}}\n', tmp_path / "ok")


def _f32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _rc(rows: int, cols: int, addr: int) -> int:
    return rows << 48 | cols << 32 | addr


# (call, funct7, rs1, rs2): the bit layouts of Gemmini's header
ENCODINGS = [
    ("gemmini_extended_mvin((void *)0x1000, 0x12, 33, 7)", 2, 0x1000, _rc(7, 33, 0x12)),
    ("gemmini_extended_mvin2((void *)0x2000, 0x80000005u, 16, 16)", 1, 0x2000, _rc(16, 16, 0x80000005)),
    ("gemmini_extended_mvin3(0, 0xC0000001u, 4, 3)", 14, 0, _rc(3, 4, 0xC0000001)),
    ("gemmini_extended_mvout((void *)0x3000, 0xA0000002u, 9, 11)", 3, 0x3000, _rc(11, 9, 0xA0000002)),
    ("gemmini_extended_compute_preloaded(5, GARBAGE_ADDR, 3, 4, 16, 16)", 4, _rc(4, 3, 5), _rc(16, 16, 0xFFFFFFFF)),
    ("gemmini_extended_compute_accumulated(6, 7, 1, 2, 3, 4)", 5, _rc(2, 1, 6), _rc(4, 3, 7)),
    ("gemmini_extended_preload(8, 0xC0000009u, 10, 11, 12, 13)", 6, _rc(11, 10, 8), _rc(13, 12, 0xC0000009)),
    ("gemmini_extended_config_ex(WEIGHT_STATIONARY, RELU, 3, 2, 1, 0)", 0,
     _f32(1.0) << 32 | 2 << 16 | 1 << 8 | 1 << 3 | 1 << 2 | 0, 1 << 48 | 3),
    ("gemmini_extended4_config_ld(100, 0.5, true, 24, 2)", 0,
     _f32(0.5) << 32 | 24 << 16 | 1 << 8 | 2 << 3 | 1 << 2 | 1, 100),
    ("gemmini_extended_config_ld(64, MVIN_SCALE_IDENTITY)", 0, _f32(1.0) << 32 | 16 << 16 | 1 << 8 | 1, 64),
    ("gemmini_extended_config_st(40, RELU, 0.25)", 0, 1 << 2 | 2, _f32(0.25) << 32 | 40),
    ("gemmini_flush(1)", 7, 1, 0),
]


def test_instruction_encodings_are_gemminis(tmp_path):
    """On the host the stand-in passes each instruction to emu_rocc(funct7, rs1, rs2) with the words Gemmini's
    header gives the RoCC interface; a recorder in place of the emulator shows them."""
    body = "\n".join(f"  {call};" for call, *_ in ENCODINGS)
    src = ('#include "gemmini.h"\n#include <stdio.h>\n'
           'void emu_rocc(uint32_t f, uint64_t a, uint64_t b) {\n'
           '  printf("%u %llu %llu\\n", f, (unsigned long long)a, (unsigned long long)b);\n}\n'
           'void emu_fence(void) { printf("fence\\n"); }\n'
           f"int main(void) {{\n{body}\n  gemmini_fence();\n  return 0;\n}}\n")
    (tmp_path / "rec.c").write_text(src)
    exe = tmp_path / "rec"
    subprocess.run([compiler(), "-O2", "-Wall", "-Werror", "-I", str(include_dir()), "-o", str(exe),
                    str(tmp_path / "rec.c")], check=True, capture_output=True, text=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    got = [tuple(int(x) for x in line.split()) for line in lines[:len(ENCODINGS)]]
    assert got == [(f, a, b) for _, f, a, b in ENCODINGS]
    assert lines[len(ENCODINGS)] == "fence"


def _kernels() -> list:
    """Kernels of every shape class: convolutions (padded, strided, dilated, grouped, depthwise, with the
    kernel-column fold), matmuls, the copy-out variant, other array sizes."""
    arts = []
    rng = random.Random(5)
    for i in range(6):
        layer = parse_layer({**random_layer(rng, "conv" if i % 2 else "matmul"), "name": f"rnd{i}"})
        arts.append(generate(layer, HW16, random_mapping(layer.dims(), rng), Epilogue(scale=0.03, relu=i % 2 == 0),
                             name=f"rnd{i}"))
    fold = parse_layer({"op": "conv2d", "in_channels": 3, "out_channels": 20, "in_h": 21, "in_w": 23, "kernel": 7,
                        "stride": 2, "padding": 3})
    arts.append(generate(fold, HW16, random_mapping(fold.dims(), rng), Epilogue(scale=0.01), name="fold"))
    dw = parse_layer({"op": "conv2d", "in_channels": 6, "out_channels": 6, "groups": 6, "in_h": 7, "in_w": 8,
                      "kernel": 3, "padding": 1})
    arts.append(generate(dw, HW16, random_mapping(dw.dims(), rng), Epilogue(scale=0.02, relu=True), name="dw",
                         direct_store=False))
    for hw_name in ("gemmini-8x8", "gemmini-32x32", "gemmini-chip"):
        hw = get_hardware(hw_name)
        layer = parse_layer({"op": "conv2d", "in_channels": 40, "out_channels": 24, "in_h": 9, "in_w": 9,
                             "kernel": 3, "padding": 1})
        arts.append(generate(layer, hw, random_mapping(layer.dims(), rng, dim=hw.pe_array.rows),
                             Epilogue(scale=0.02), name="on_" + hw_name.replace("-", "_")))
    return arts


KERNELS = _kernels()


def _calls(src: str) -> list[tuple[str, int]]:
    """(name, number of arguments) of every call of a gemmini_* macro in C source."""
    out = []
    for m in re.finditer(r"\b(gemmini_\w+)\s*\(", src):
        depth, args, i, any_arg = 1, 1, m.end(), False
        while depth:
            ch = src[i]
            depth += ch == "("
            depth -= ch == ")"
            if depth == 1 and ch == ",":
                args += 1
            any_arg = any_arg or (depth >= 1 and not ch.isspace() and ch != ")")
            i += 1
        out.append((m.group(1), args if any_arg else 0))
    return out


@pytest.mark.parametrize("art", KERNELS, ids=lambda a: a.name)
def test_generated_kernels_use_only_the_api(art, tmp_path):
    """Every Gemmini name the kernel uses is one of the real header's, called with its arity; the only includes
    are gemmini.h and libc; the kernel builds against the stand-in for its own configuration, and its only
    external symbols are its entry points (what it leaves undefined is the emulator's two entry points on the
    host): kernels of several layers link into one program."""
    calls = _calls(art.c_source)
    assert calls and {name for name, _ in calls} <= set(ARITY)
    for name, n in calls:
        assert n == ARITY[name], (name, n)
    includes = re.findall(r"#include\s+[<\"]([^>\"]+)[>\"]", art.c_source)
    assert set(includes) <= {"gemmini.h", "stdint.h", "math.h"}
    for name in ("ACC_ADDR_BIT", "ACC_ACCUMULATE_BIT"):
        assert name not in art.c_source
    obj = compile_object(art.c_source, tmp_path, config=art.config)
    syms = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout.splitlines()
    undefined = {line.split()[-1] for line in syms if " U " in line}
    defined = {line.split()[-1] for line in syms if re.search(r" [A-TV-Z] ", line)}
    assert undefined <= {"emu_rocc", "emu_fence", "nearbyintf"}, undefined
    assert defined == {art.name, f"{art.name}_entry"}, defined
    assert "gemmini_fence" in art.c_source and art.c_source.count("tp_fence();") == 1


def test_riscv_cross_compiler_is_installed():
    """CI installs Debian's gcc-riscv64-linux-gnu (.ci/run); the RISC-V checks below must not pass by skipping."""
    try:
        riscv_compiler()
        riscv_objdump()
    except NoCompiler as exc:
        pytest.fail(str(exc))


@pytest.mark.parametrize("art", KERNELS, ids=lambda a: a.name)
def test_kernels_compile_for_riscv_into_gemmini_instructions(art, tmp_path):
    """riscv64-linux-gnu-gcc -c -O2 -Wall -Werror against the stand-in: the object holds Gemmini's RoCC
    instructions (custom-3, R-type, xd = 0 and rd = x0, xs1 = xs2 = 1) for config, loads, preloads, computes and
    stores, and a RISC-V fence."""
    obj = cross_compile_object(art.c_source, tmp_path, art.config)
    words = rocc_words(obj)
    assert words
    assert all((w >> 12) & 7 == 0b011 and (w >> 7) & 0x1F == 0 for w in words)
    functs = {w >> 25 for w in words}
    assert {0, 1, 2, 3, 6, 14} <= functs and functs & {4, 5}, sorted(functs)
    assert functs <= {0, 1, 2, 3, 4, 5, 6, 7, 14}
    dump = subprocess.run([riscv_objdump(), "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"\tfence\b", dump)


def test_riscv_words_carry_the_registers_of_the_operands(tmp_path):
    """One mvin in a function of its own: funct7 = k_MVIN, and rs1 / rs2 are the argument registers holding the
    DRAM address and the packed rows / cols / address (a0 = x10 and a register holding the constant)."""
    src = ('#include "gemmini.h"\nvoid f(const void *p, uint64_t local) {\n'
           '  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, p, local, k_MVIN);\n}\n')
    words = rocc_words(cross_compile_object(src, tmp_path))
    assert len(words) == 1
    w = words[0]
    assert w >> 25 == 2 and (w >> 15) & 0x1F == 10 and (w >> 20) & 0x1F == 11  # rs1 = a0, rs2 = a1


def test_kernel_refuses_another_configuration(tmp_path):
    """A kernel states the gemmini_params.h configuration it was generated for and does not build against
    another: a different DIM, scratchpad or accumulator size, or DMA request size."""
    art = KERNELS[0]
    assert art.config == GemminiConfig(dim=16, spad_rows=16384, acc_rows=1024, max_bytes=64)
    assert "DIM 16, scratchpad 4 x 4096 rows, accumulator 1024 rows" in art.c_source
    compile_object(art.c_source, tmp_path / "ok", config=art.config)
    for other in (GemminiConfig(dim=8, spad_rows=16384, acc_rows=1024), GemminiConfig(spad_rows=4096),
                  GemminiConfig(acc_rows=512), GemminiConfig(max_bytes=128)):
        with pytest.raises(BuildError, match="generated for gemmini-16x16"):
            compile_object(art.c_source, tmp_path / f"bad{other.dim}{other.spad_rows}{other.acc_rows}",
                           config=other)
    # types are checked too: a params header with another element type stops the build
    bad = art.config.params_header().replace("typedef int8_t elem_t;", "typedef int16_t elem_t;")
    d = tmp_path / "types"
    d.mkdir()
    (d / "gemmini.h").write_text((HEADER_DIR / "gemmini.h").read_text())
    (d / "gemmini_params.h").write_text(bad)
    proc = subprocess.run([compiler(), "-fsyntax-only", "-I", str(d), "-x", "c", "-"], input=art.c_source, check=False,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "elem_t must be int8" in proc.stderr


def _syntax_errors(src: str, gemmini_h: str, params_h: str, d) -> str:
    d.mkdir()
    (d / "gemmini.h").write_text(gemmini_h)
    (d / "gemmini_params.h").write_text(params_h)
    proc = subprocess.run([compiler(), "-fsyntax-only", "-I", str(d), "-x", "c", "-"], input=src, check=False,
                          capture_output=True, text=True)
    return proc.stderr if proc.returncode else ""


def test_kernel_checks_the_header_features_it_uses(tmp_path):
    """Beyond the configuration, a kernel checks at compile time what it takes from the header: full-width
    accumulator reads (ACC_READ_FULL_WIDTH, which Gemmini's own default gemmini_params.h does not define) when it
    stores int32 accumulators, and every instruction macro it calls.  Without them the build stops, naming what is
    missing; a kernel that stores int8 does not need full-width reads."""
    from tileplan.codegen.targets.gemmini import KernelABI

    layer = parse_layer({"op": "conv2d", "in_channels": 24, "out_channels": 20, "in_h": 7, "in_w": 7, "kernel": 3,
                         "padding": 1})
    mapping = random_mapping(layer.dims(), random.Random(3))
    acc = generate(layer, HW16, mapping, Epilogue(scale=0.01), name="acc",
                   abi=KernelABI("NCHW", prelaid=True, acc_output=True))
    i8 = generate(layer, HW16, mapping, Epilogue(scale=0.01), name="i8")
    header = (HEADER_DIR / "gemmini.h").read_text()
    params = acc.config.params_header()
    no_full = params.replace("#define ACC_READ_FULL_WIDTH\n", "")
    assert no_full != params
    assert _syntax_errors(acc.c_source, header, params, tmp_path / "ok") == ""
    err = _syntax_errors(acc.c_source, header, no_full, tmp_path / "acc")
    assert "#error" in err and "must define ACC_READ_FULL_WIDTH" in err
    assert _syntax_errors(i8.c_source, header, no_full, tmp_path / "i8") == ""
    no_mvin3 = re.sub(r"#define gemmini_extended_mvin3\(.*?\n(.*\\\n)*.*\n", "", header)
    assert "gemmini_extended_mvin3(" not in no_mvin3
    err = _syntax_errors(i8.c_source, no_mvin3, params, tmp_path / "api")
    assert "gemmini.h lacks an instruction macro this kernel calls" in err


def test_shipped_params_header_is_the_default_configuration():
    assert (HEADER_DIR / "gemmini_params.h").read_text() == GemminiConfig().params_header()
    assert include_dir() == HEADER_DIR
    chip = GemminiConfig(dim=16, spad_rows=4096, acc_rows=512)
    text = (include_dir(chip) / "gemmini_params.h").read_text()
    assert "#define BANK_NUM 4\n#define BANK_ROWS 1024\n#define ACC_ROWS 512" in text
