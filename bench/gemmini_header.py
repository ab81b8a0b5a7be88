"""The generated C against Gemmini's own gemmini.h (ucb-bar/gemmini-rocc-tests), not Tileplan's stand-in.

    python bench/gemmini_header.py --gemmini-rocc-tests PATH      # a checkout; writes bench/results/gemmini_header.md
    python bench/gemmini_header.py --gemmini-rocc-tests PATH --random 20 --no-bench-set --out -   # a quick look

The header is not shipped with Tileplan; point the script at a checkout (its `rocc-software` submodule may be
missing: a shim of its xcustom.h with the RoCC encoding is written here). For every kernel of the test set (the
random shapes of tests/codegen/test_codegen.py), of random grouped and depthwise layers whose plans pack groups onto
the array (tests/codegen/test_packed_groups_code.py's generator) and of the benchmark set (bench/codegen.py, both
plans), generated for gemmini-16x16, whose configuration is the checkout's default gemmini_params.h:

1. RISC-V: `riscv64-linux-gnu-gcc -c -O2 -Wall` against the checkout's include/gemmini.h and gemmini_params.h.  It
   must build with no diagnostic in the kernel's own lines (the header warns about its own unused functions), and
   the object holds Gemmini's RoCC custom-3 instructions.
2. Host: gcc against the same header, with its one RoCC macro (ROCC_INSTRUCTION_0_R_R, from xcustom.h) routed to
   `emu_rocc(funct7, rs1, rs2)` and gemmini_fence() to `emu_fence()`, i.e. Tileplan's emulator decodes the words
   Gemmini's header packs.  The outputs must be bit-exact against NumPy, and the instruction counts and cycles
   equal to those of the same kernel built against the stand-in: the two headers send the same instructions.
3. Whole programs: models of Tileplan's zoo compiled by `tileplan compile` (`compile_model`), built by their own
   `make riscv GEMMINI_INCLUDE=DIR` with the Makefile's own flags (today `-O2 -std=gnu11 -Wall -ffp-contract=off`),
   the tar's stand-in headers made unusable.  With DIR the checkout's include/ (its default gemmini_params.h has
   no ACC_READ_FULL_WIDTH) the kernels that store int32 accumulators must stop the build (#error), and only they;
   with DIR a copy whose gemmini_params.h adds ACC_READ_FULL_WIDTH (a Gemmini built with acc_read_full_width),
   every object must build with no diagnostic in the program's own files (main.c, model.c, kernels/, host/), the
   kernels' objects hold the RoCC instructions, and they link with main.c into build/riscv/model.riscv.
"""

from __future__ import annotations

import argparse
import io
import platform
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "service"))
sys.path.insert(0, str(ROOT / "tests" / "codegen"))

from plans import random_case, random_packed_case  # noqa: E402

from tileplan.codegen.emulator.build import (  # noqa: E402
    EMU_SONAME,
    compiler,
    emulator_library,
    riscv_compiler,
    rocc_words,
)
from tileplan.codegen.pipeline import (  # noqa: E402
    Epilogue,
    build_module,
    emulator_for,
    generate,
    random_inputs,
    reference,
    run,
)
from tileplan.hardware.catalog import get_hardware  # noqa: E402

# rocc-software's xcustom.h, as far as gemmini.h uses it: on the host, Tileplan's emulator receives the words.
HOST_XCUSTOM = """\
/* Written by bench/gemmini_header.py: gemmini.h's RoCC macros call Tileplan's emulator on the host. */
#ifndef BENCH_XCUSTOM_H
#define BENCH_XCUSTOM_H
#include <stdint.h>
void emu_rocc(uint32_t funct, uint64_t rs1, uint64_t rs2);
#define ROCC_INSTRUCTION_0_R_R(x, rs1, rs2, func7) { emu_rocc((func7), (uint64_t)(rs1), (uint64_t)(rs2)); }
#define ROCC_INSTRUCTION(x, rd, rs1, rs2, func7) { (void)(rs1); (void)(rs2); rd = 0; }
#endif
"""
# The same for RISC-V, where the checkout has no rocc-software: RoCC R-type on custom-x, xd = 0 / xs1 = xs2 = 1.
RISCV_XCUSTOM = """\
/* Written by bench/gemmini_header.py (the checkout has no rocc-software): RoCC R-type instructions. */
#ifndef BENCH_XCUSTOM_H
#define BENCH_XCUSTOM_H
#define BENCH_STR1(x) #x
#define BENCH_STR(x) BENCH_STR1(x)
#define ROCC_INSTRUCTION_0_R_R(x, rs1, rs2, func7) \\
  { __asm__ volatile(".insn r CUSTOM_" BENCH_STR(x) ", 3, " BENCH_STR(func7) ", x0, %0, %1" :: "r"(rs1), "r"(rs2)); }
#define ROCC_INSTRUCTION(x, rd, rs1, rs2, func7) \\
  { __asm__ volatile(".insn r CUSTOM_" BENCH_STR(x) ", 7, " BENCH_STR(func7) ", %0, %1, %2" \\
                     : "=r"(rd) : "r"(rs1), "r"(rs2)); }
#endif
"""
# gemmini_fence() is RISC-V's `fence` instruction; on the host the emulator's fence.
HOST_OVERLAY = """\
#include_next "gemmini.h"
#undef gemmini_fence
void emu_fence(void);
#define gemmini_fence() emu_fence()
"""


def harness(repo: Path, work: Path) -> dict[str, list[str]]:
    """Include paths of the two builds (host: overlay, shim, checkout; RISC-V: shim unless the checkout has
    rocc-software, checkout)."""
    for f in ("include/gemmini.h", "include/gemmini_params.h"):
        if not (repo / f).is_file():
            raise SystemExit(f"{repo} is not a gemmini-rocc-tests checkout: no {f}")
    host, rv = work / "host", work / "riscv"
    for d, text in ((host, HOST_XCUSTOM), (rv, RISCV_XCUSTOM)):
        (d / "rocc-software" / "src").mkdir(parents=True)
        (d / "rocc-software" / "src" / "xcustom.h").write_text(text)
    (work / "overlay").mkdir()
    (work / "overlay" / "gemmini.h").write_text(HOST_OVERLAY)
    real_rocc = (repo / "rocc-software" / "src" / "xcustom.h").is_file()
    return {"host": ["-I", str(work / "overlay"), "-I", str(host), "-I", str(repo), "-I", str(repo / "include")],
            "riscv": ["-I", str(repo), "-I", str(repo / "include")] + ([] if real_rocc else ["-I", str(rv)])}


def check(art, inc: dict[str, list[str]], work: Path, seed: int) -> dict:
    src = work / f"{art.name}.c"
    src.write_text(art.c_source)
    # 1. RISC-V object against Gemmini's header
    obj = work / f"{art.name}.rv64.o"
    proc = subprocess.run([riscv_compiler(), "-c", "-O2", "-Wall", *inc["riscv"], "-o", str(obj), str(src)],
                          capture_output=True, text=True, check=False)
    own = [line for line in proc.stderr.splitlines() if line.startswith(str(src))]
    rv_ok = proc.returncode == 0 and not own
    words = rocc_words(obj) if proc.returncode == 0 else []
    # 2. host build against Gemmini's header, instructions into the emulator
    lib = work / f"lib{art.name}.so"
    emu_dir = work / "emu"
    subprocess.run([compiler(), "-O2", "-fPIC", "-shared", "-w", *inc["host"], "-o", str(lib), str(src),
                    f"-L{emu_dir}", "-lgemmini_emu", f"-Wl,-rpath,{emu_dir}", "-lm"], check=True,
                   capture_output=True, text=True)
    inputs = random_inputs(art.geometry, seed)
    want = reference(art.geometry, art.epilogue, **inputs)
    emu = emulator_for(art)
    real, ours = run(art, inputs, emulator=emu, program=lib), run(art, inputs, emulator=emu)
    return dict(name=art.name, tag=art.tag, rv_ok=rv_ok, rv_diag="; ".join(own or proc.stderr.splitlines()[-1:]),
                rocc=len(words), functs=sorted({w >> 25 for w in words}),
                exact=bool(np.array_equal(real.buffers["out"], want)),
                same=(real.counts, real.cycles) == (ours.counts, ours.cycles), instrs=real.instructions,
                cycles=real.cycles)


MODELS = ["cnn_small", "resnet_block", "mobilenet_block", "mlp", "attention", "resnet18", "bert_encoder"]
FULL_SIZE = {"resnet18": dict(size=224, classes=1000, width=64),  # as bench/network.py compiles them
             "bert_encoder": dict(seq=128, d=768, heads=12, ffn=3072)}


def check_program(name: str, repo: Path, inc: dict[str, list[str]], work: Path) -> dict:
    """A zoo model compiled whole, its RISC-V program built by its own `make riscv GEMMINI_INCLUDE=...` against the
    checkout's headers: once with the checkout's default gemmini_params.h (which lacks ACC_READ_FULL_WIDTH: every
    kernel storing int32 accumulators must refuse it, and only those), once with that file plus
    ACC_READ_FULL_WIDTH (the configuration of a Gemmini built with acc_read_full_width), which must build clean and
    link model.riscv (main.c + tileplan_run, no unresolved symbol)."""
    from tileplan.frontend import zoo
    from tileplan.frontend.compile import compile_model

    compiled = compile_model(zoo.build(name, "qdq", **FULL_SIZE.get(name, {})), get_hardware("gemmini-16x16"))
    with tarfile.open(fileobj=io.BytesIO(compiled.artifact)) as tar:
        tar.extractall(work / f"prog-{name}", filter="data")
    root = next((work / f"prog-{name}").iterdir())
    acc_kernels = sorted(f.stem for f in (root / "kernels").glob("*.c") if "#define TP_ACC_OUT 1" in f.read_text())
    for f in ("gemmini.h", "gemmini_params.h"):  # the stand-ins must not be what the build finds
        (root / f).write_text("#error the build must take GEMMINI_INCLUDE's header\n")
    shutil.rmtree(root / "emulator")  # the RISC-V build must not need Tileplan's emulator
    full = work / "full-width" / "include"  # the checkout's include/, its configuration with full-width reads
    if not full.exists():
        shutil.copytree(repo / "include", full)
        params = (full / "gemmini_params.h").read_text()
        if "ACC_READ_FULL_WIDTH" not in params:  # after the include guard's #define, as Gemmini's generator puts it
            guard = "#define GEMMINI_PARAMS_H\n"
            assert guard in params, "gemmini_params.h without its include guard"
            params = params.replace(guard, guard + "#define ACC_READ_FULL_WIDTH\n", 1)
        (full / "gemmini_params.h").write_text(params)
    # only xcustom.h's shim (a checkout without rocc-software) rides on the compiler's name; the Makefile's own
    # CFLAGS and include order are the ones used
    cc = " ".join([riscv_compiler(), *(f"-I{p}" for p in inc["riscv"][1::2] if not Path(p).is_relative_to(repo))])
    default = subprocess.run(["make", "-s", "-k", "-j2", "riscv", f"RISCV_CC={cc}",
                              f"GEMMINI_INCLUDE={repo / 'include'}"], cwd=root, capture_output=True, text=True)
    refused = sorted({Path(m).stem for m in re.findall(r"^(kernels/\S+?\.c):\d+:\d+: error: #error .*"
                                                       r"ACC_READ_FULL_WIDTH", default.stderr, re.MULTILINE)})
    other_errors = [ln for ln in default.stderr.splitlines() if " error: " in ln and "ACC_READ_FULL_WIDTH" not in ln]
    subprocess.run(["make", "-s", "clean"], cwd=root, check=True)
    proc = subprocess.run(["make", "-s", "-j2", "riscv", f"RISCV_CC={cc}", f"GEMMINI_INCLUDE={full}"], cwd=root,
                          capture_output=True, text=True, check=False)
    own = [line for line in proc.stderr.splitlines()
           if line.startswith(("model.c:", "main.c:", "kernels/", "host/")) and ("warning:" in line or "error:" in line)]
    objs = sorted((root / "build" / "riscv").rglob("*.o")) if proc.returncode == 0 else []
    kernels = [o for o in objs if o.parent.name == "kernels"]
    per_kernel = [rocc_words(o) for o in kernels]  # (one objdump per object)
    exe = root / "build" / "riscv" / "model.riscv"
    return dict(name=name, ok=proc.returncode == 0 and not own, objects=len(objs), kernels=len(kernels),
                linked=exe.is_file(), rocc=sum(map(len, per_kernel)),
                kernels_with_rocc=sum(1 for w in per_kernel if w),
                acc_kernels=len(acc_kernels),
                refused_ok=default.returncode != 0 and refused == acc_kernels and not other_errors
                if acc_kernels else default.returncode == 0,
                diag="; ".join(own or proc.stderr.splitlines()[-1:]),
                steps=compiled.summary["total"].get("accelerator_ops", 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gemmini-rocc-tests", required=True, type=Path, help="a checkout of ucb-bar/gemmini-rocc-tests")
    ap.add_argument("--random", type=int, default=210, help="random shapes of the test set (default: all 210)")
    ap.add_argument("--packed", type=int, default=20,
                    help="random grouped / depthwise layers with their groups packed onto the array (default 20)")
    ap.add_argument("--no-bench-set", action="store_true", help="skip bench/codegen.py's layers (they need CoSA)")
    ap.add_argument("--cosa-time", type=float, default=10.0)
    ap.add_argument("--models", nargs="*", default=MODELS, help=f"zoo models built whole (default: {MODELS})")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gemmini_header.md"))
    args = ap.parse_args()
    repo = args.gemmini_rocc_tests.resolve()
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip() or "unknown"
    hw = get_hardware("gemmini-16x16")
    t0 = time.time()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        inc = harness(repo, work)
        (work / "emu").mkdir()
        (work / "emu" / EMU_SONAME).write_bytes(emulator_library().read_bytes())
        for seed in range(args.random):
            layer, mapping, epi = random_case(seed)
            rows.append(("test set", check(generate(layer, hw, mapping, epi, name=f"rand{seed}"), inc, work, seed)))
            print(rows[-1][1], flush=True)
        packed_rng = random.Random(27)
        for i in range(args.packed):
            layer, mapping = random_packed_case(packed_rng)
            art = generate(layer, hw, mapping, Epilogue(scale=0.01, relu=i % 2 == 0), name=f"packed{i}")
            rows.append(("packed groups", check(art, inc, work, i)))
            print(rows[-1][1], flush=True)
        if not args.no_bench_set:
            import codegen as bench  # bench/codegen.py: its layers and plans
            from tileplan.mappers.base import MapperOptions, get_mapper
            from tileplan.problem import Problem

            for layer in bench.benchmark_set():
                for mapper in bench.MAPPERS:
                    mapping = get_mapper(mapper).map(Problem.from_layer(layer), hw,
                                                     MapperOptions(time_limit_s=args.cosa_time)).mapping
                    art = build_module(mapping, layer, hw, epilogue=Epilogue(scale=0.0025, relu=True),
                                       name=f"{layer.name}_{mapper.replace('-', '_')}", stream=bench.STREAM[mapper])
                    rows.append(("benchmark set", check(art, inc, work, len(rows))))
                    print(rows[-1][1], flush=True)
        programs = []
        for name in args.models:
            programs.append(check_program(name, repo, inc, work))
            print(programs[-1], flush=True)
    total = time.time() - t0
    lines = ["# The generated C against Gemmini's own gemmini.h", "",
             f"Command: `python bench/gemmini_header.py --gemmini-rocc-tests PATH` with ucb-bar/gemmini-rocc-tests "
             f"at {commit[:12]} ({platform.machine()}, Python {platform.python_version()}, {total:.0f} s wall).", "",
             __doc__.split("\n\n", 2)[2].strip(), ""]
    groups = {g for g, _ in rows}
    for g in sorted(groups):
        rs = [r for gg, r in rows if gg == g]
        lines += [f"## {g}: {len(rs)} kernels", "",
                  f"- RISC-V, Gemmini's header, `-O2 -Wall`: {sum(r['rv_ok'] for r in rs)} / {len(rs)} build with no "
                  f"diagnostic in the kernel's lines; {sum(r['rocc'] > 0 for r in rs)} / {len(rs)} objects hold RoCC "
                  f"custom-3 instructions ({sum(r['rocc'] for r in rs):,} in all; funct7 codes seen: "
                  f"{sorted({f for r in rs for f in r['functs']})})",
                  f"- host, Gemmini's header into Tileplan's emulator: {sum(r['exact'] for r in rs)} / {len(rs)} "
                  f"bit-exact; {sum(r['same'] for r in rs)} / {len(rs)} with the instruction counts and cycles of "
                  f"the stand-in build ({sum(r['instrs'] for r in rs):,} instructions)", ""]
        bad = [r for r in rs if not (r["rv_ok"] and r["rocc"] and r["exact"] and r["same"])]
        if bad:
            lines += ["| kernel | RISC-V | RoCC instrs | bit-exact | same as stand-in | diagnostic |",
                      "|---|---|---:|---|---|---|"]
            lines += [f"| {r['name']} | {'ok' if r['rv_ok'] else 'FAIL'} | {r['rocc']} | {r['exact']} | {r['same']} "
                      f"| {r['rv_diag'][:120]} |" for r in bad] + [""]
    if "benchmark set" in groups:
        lines += ["| benchmark kernel | RoCC instrs in the RISC-V object | emulated instructions | cycles |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {r['name']} | {r['rocc']} | {r['instrs']:,} | {r['cycles']:,} |"
                  for g, r in rows if g == "benchmark set"] + [""]
    if programs:
        lines += [f"## whole programs: {len(programs)} models", "",
                  f"- RISC-V, Gemmini's header, the artifact's `make riscv`: {sum(p['ok'] for p in programs)} / "
                  f"{len(programs)} build with no diagnostic in the program's files; "
                  f"{sum(p['kernels_with_rocc'] for p in programs)} / {sum(p['kernels'] for p in programs)} kernel "
                  f"objects hold RoCC custom-3 instructions; {sum(p['linked'] for p in programs)} / "
                  f"{len(programs)} link into the static RISC-V program build/riscv/model.riscv (main.c, no "
                  "unresolved symbol), against the checkout's include/ with ACC_READ_FULL_WIDTH added to its "
                  "gemmini_params.h; against the checkout's default gemmini_params.h (no ACC_READ_FULL_WIDTH) "
                  f"{sum(p['refused_ok'] for p in programs)} / {len(programs)} builds stop in exactly the kernels "
                  f"that store int32 accumulators ({sum(p['acc_kernels'] for p in programs)} kernels), with the "
                  "#error naming the macro, or build when there are none", "",
                  "| model | builds clean | links | objects | kernel objects | int32-output kernels | default params "
                  "refused as expected | RoCC instrs | accelerator ops | diagnostic |",
                  "|---|---|---|---:|---:|---:|---|---:|---:|---|"]
        lines += [f"| {p['name']} | {'yes' if p['ok'] else 'NO'} | {'yes' if p['linked'] else 'NO'} | {p['objects']} | "
                  f"{p['kernels']} | {p['acc_kernels']} | {'yes' if p['refused_ok'] else 'NO'} | {p['rocc']} | "
                  f"{p['steps']} | {p['diag'][:120] if not p['ok'] else ''} |" for p in programs] + [""]
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
