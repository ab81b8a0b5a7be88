"""Differential fuzzing of Tileplan's Timeloop semantics against real timeloop-model.

Random Timeloop v0.3 architectures (bench/timeloop_fuzz_gen.py), Timeloop's own example architectures (from a
checkout of its repositories, `--examples DIR ...`), random layers and, per (architecture, layer), cosa's plan
(also on the padded problem when it pads), Tileplan's random legal mappings and "wild" ones (random factors that may
overflow a buffer or a fan-out); every map is scored by `timeloop-model` and by Tileplan (verdict, cycles, energy,
per-level reads / fills / updates). Cases are recorded in bench/data/timeloop_fuzz (as the reference set's are, so
CI re-judges them without Timeloop: tests/timeloop_reference/test_fuzz_cases.py) and the table goes to
bench/results/timeloop_fuzz.md.

    python bench/timeloop_fuzz.py --timeloop-bin DIR [--examples REPO ...] [--archs 60 --layers 4 --seed 1]
    python bench/timeloop_fuzz.py --rejudge        # today's Tileplan on the recorded cases, no Timeloop needed

DIR holds timeloop-model (a build of NVlabs/timeloop at commit 019f107 without Accelergy, as the reference set);
its shared library is found in DIR/../lib unless LD_LIBRARY_PATH says otherwise. `--examples` takes git repositories
(a clone or the git directory of NVlabs/timeloop, Accelergy-Project/timeloop-accelergy-exercises): every distinct
architecture file in their histories joins the set, with its design's constraint files. Example architectures are
not committed (they are upstream files): their cases record Tileplan's re-export of the imported file, and the bench
checks that timeloop-model scores every such case the same on the re-export as on the original.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "service"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench/data/timeloop_reference/tools"))

import tlstats  # noqa: E402
from timeloop_fuzz_gen import (  # noqa: E402
    PROBES,
    extend_arch,
    extend_more,
    extend_net,
    extend_wide,
    probe,
    random_arch,
    random_layer,
    wild_factors,
)

from tileplan.errors import InputError, MappingInfeasible  # noqa: E402
from tileplan.hardware.catalog import load_descriptor  # noqa: E402
from tileplan.hardware.timeloop import dump_yaml, to_timeloop_arch  # noqa: E402
from tileplan.interop.timeloop_map import dump_mapping_yaml, to_timeloop_mapping, to_timeloop_problem  # noqa: E402
from tileplan.interop.timeloop_reference import access_mismatches, judge, load_cases  # noqa: E402
from tileplan.loop_constraints import conform  # noqa: E402
from tileplan.mappers.random_search import sample_mapping  # noqa: E402
from tileplan.mappers.space import MappingSpace  # noqa: E402
from tileplan.mapping import LevelMapping, Mapping  # noqa: E402
from tileplan.plan import ScheduleOptions, make_plan  # noqa: E402
from tileplan.problem import Problem  # noqa: E402
from tileplan.workload import parse_layer  # noqa: E402

DATA = REPO / "bench/data/timeloop_fuzz"
UPSTREAM_COMMIT = "019f107"


# ------------------------------------------------------------------------------------------------------------
# timeloop-model


class Timeloop:
    def __init__(self, bin_dir: str):
        self.bin = Path(bin_dir) / "timeloop-model"
        if not self.bin.exists():
            raise SystemExit(f"--timeloop-bin: no timeloop-model in {bin_dir}")
        self.env = dict(os.environ)
        lib = Path(bin_dir).resolve().parent / "lib"
        if lib.is_dir():
            self.env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(lib), os.environ.get("LD_LIBRARY_PATH")]))

    def run(self, arch_text: str, problem_text: str, map_text: str) -> dict[str, Any]:
        """timeloop-model's verdict and stats, in the reference set's `timeloop` form."""
        with tempfile.TemporaryDirectory() as d:
            for fname, text in (("arch.yaml", arch_text), ("prob.yaml", problem_text), ("map.yaml", map_text)):
                Path(d, fname).write_text(text)
            try:
                p = subprocess.run([str(self.bin), "arch.yaml", "prob.yaml", "map.yaml"], cwd=d, env=self.env,
                                   capture_output=True, text=True, timeout=600)
            except subprocess.TimeoutExpired:
                return {"accepted": False, "error": "timeout", "rc": None}
            stats = Path(d, "timeloop-model.stats.txt")
            if p.returncode == 0 and stats.exists():
                out = tlstats.parse(stats.read_text())
                return {"accepted": True, "error": None, "rc": 0, **out}
            err = next((ln.strip() for ln in (p.stdout + "\n" + p.stderr).splitlines() if "ERROR" in ln
                        or "Assertion" in ln), None)
            if err is None:
                tail = [ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
                err = tail[-1] if tail else f"rc {p.returncode}"
            return {"accepted": False, "error": err, "rc": p.returncode}


# ------------------------------------------------------------------------------------------------------------
# Cases


def problem_doc(problem: Problem) -> dict[str, Any]:
    return {**{d: problem.dims[d] for d in ("N", "G", "K", "C", "P", "Q", "R", "S")},
            "Wstride": problem.stride[0], "Hstride": problem.stride[1],
            "Wdilation": problem.dilation[0], "Hdilation": problem.dilation[1]}


def _wild_mapping(problem: Problem, hw, rng: random.Random) -> Mapping:  # type: ignore[no-untyped-def]
    arch = hw.resolve(rng.choice(hw.dataflow_names))
    fanouts = [lv.fanout if not lv.is_backing_store else 1 for lv in arch.levels]
    dims = {d: v for d, v in problem.dims.items() if v > 1}
    per_level = wild_factors(rng, dims, len(arch.levels), fanouts)
    return Mapping(levels=[LevelMapping(name=lv.name, temporal=t, spatial=s)  # type: ignore[arg-type]
                           for lv, (t, s) in zip(arch.levels, per_level)], dataflow=arch.dataflow)


def maps_for(problem: Problem, layer, hw, rng: random.Random, n_random: int, n_wild: int,  # type: ignore[no-untyped-def]
             cosa_time: float) -> list[tuple[str, Mapping]]:
    out: list[tuple[str, Mapping]] = []
    try:
        plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=cosa_time,
                                                   model="timeloop"))
        out.append(("cosa", plan.mapping))
    except (MappingInfeasible, InputError) as exc:
        print(f"  cosa: {exc}", file=sys.stderr)
    for k in range(n_random):
        name = rng.choice(hw.dataflow_names)
        try:
            sample = sample_mapping(MappingSpace(problem, hw.resolve(name)), rng)
            # (as the random mapper does: a sample moved to keep the file's loop constraints, where it can be)
            sample = conform(hw.resolve(name), sample, sample.bounds()) or sample
            out.append((f"random{k + 1}", sample))
        except (MappingInfeasible, InputError) as exc:
            print(f"  random: {exc}", file=sys.stderr)
    for k in range(n_wild):
        out.append((f"wild{k + 1}", _wild_mapping(problem, hw, rng)))
    return out


def make_cases(tl: Timeloop, arch_rel: str, arch_text: str, run_text: str, hw, layer_doc: dict[str, Any],  # type: ignore[no-untyped-def]
               rng: random.Random, args: argparse.Namespace, check_text: str | None = None) -> list[dict[str, Any]]:
    """Every map of one layer on one architecture, run by timeloop-model on `run_text` (the file Timeloop is given;
    `arch_text` is what the case records) and, with `check_text`, also on that file (must score the same)."""
    layer = parse_layer(layer_doc)
    problem = Problem.from_layer(layer)
    cases = []
    for source, mapping in maps_for(problem, layer, hw, rng, args.random_maps, args.wild_maps, args.cosa_time):
        try:
            map_text = dump_mapping_yaml(to_timeloop_mapping(mapping, hw))
        except InputError as exc:  # e.g. spatial factors that fit no X/Y split of a 2-D mesh
            print(f"  {source}: not exportable: {exc}", file=sys.stderr)
            continue
        variants = [(problem, False)]
        if mapping.padded_dims:
            padded = Problem(dims={**problem.dims, **mapping.padded_dims}, stride=problem.stride,
                             dilation=problem.dilation, name=problem.name)
            variants.append((padded, True))
        for prob, is_padded in variants:
            prob_text = yaml.safe_dump(to_timeloop_problem(prob), sort_keys=False)
            result = tl.run(run_text, prob_text, map_text)
            case = {
                "id": f"{Path(arch_rel).stem}/{layer.name}/{source}{'+padded' if is_padded else ''}",
                "arch": arch_rel, "layer": layer_doc, "problem": problem_doc(prob),
                "map_yaml": map_text, "source": source, "timeloop": result,
            }
            if is_padded:
                case["padded_problem"] = True
            if check_text is not None:
                again = tl.run(check_text, prob_text, map_text)
                keys = ("accepted", "cycles", "energy_pj")
                if any(again.get(k) != result.get(k) for k in keys):
                    case["reexport_differs"] = {k: again.get(k) for k in keys}
            cases.append(case)
    return cases


# ------------------------------------------------------------------------------------------------------------
# Timeloop's own example architectures


_NOT_ARCH = re.compile(r"ERT|ART|flattened|defined_input|ref-output|ref_output|outputs?/|\.map\.|map\.yaml|prob|problem|"
                       r"estimation|action_counts|components/|mapper|constraint|sparse_opt")


def extract_examples(repo: str, out: Path) -> None:
    """Every distinct architecture file (`architecture:` with a subtree) across the whole history of the git
    repository `repo`, each into a folder of `out` with its design's constraint files (same folder, or a
    `constraints/` folder beside or below) and a SOURCE line (repository/path@commit)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", repo, *a], capture_output=True, text=True, check=True).stdout

    name = Path(repo.rstrip("/")).name
    if name in ("repo", ".git"):
        name = Path(repo.rstrip("/")).parent.name.split("+")[-1]
    seen: set[str] = set()
    for commit in git("rev-list", "--all").split():
        files = [f for f in git("ls-tree", "-r", "--name-only", commit).splitlines() if f.endswith(".yaml")]
        for f in files:
            if _NOT_ARCH.search(f):
                continue
            blob = git("rev-parse", f"{commit}:{f}").strip()
            if blob in seen:
                continue
            seen.add(blob)
            text = git("cat-file", "-p", blob)
            if "subtree" not in text or "architecture" not in text:
                continue
            d, up = os.path.dirname(f), os.path.dirname(os.path.dirname(f))
            cons = [g for g in files if "constraint" in os.path.basename(g)
                    and os.path.dirname(g) in (d, os.path.join(up, "constraints"), os.path.join(d, "constraints"))]
            dest = out / f"{name}_{re.sub(r'[^A-Za-z0-9]+', '_', Path(f).stem)}_{blob[:7]}"
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "arch.yaml").write_text(text)
            for g in cons:
                (dest / f"constraints_{os.path.basename(g)}").write_text(git("show", f"{commit}:{g}"))
            (dest / "SOURCE").write_text(f"{name}/{f}@{commit[:7]}\n")


def example_files(dirs: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, architecture text for timeloop-model, document for Tileplan) of every example under the given
    folders: a folder per architecture file with `arch.yaml`, its design's constraint files `constraints_*.yaml`
    (which say what each level keeps) and `SOURCE` (repository, path and commit). Timeloop is given the file's
    `architecture` section alone (a file that also holds a problem or mapper section would otherwise override
    ours); Tileplan the section with the constraints."""
    out = []
    tmp = Path(tempfile.mkdtemp(prefix="tl-examples-"))
    folders: list[Path] = []
    for d in dirs:
        if (Path(d) / "HEAD").exists() or (Path(d) / ".git").exists():  # a git repository: walk its history
            extract_examples(d, tmp)
        else:
            folders += [p for p in Path(d).iterdir() if (p / "arch.yaml").exists()]
    folders += [p for p in tmp.iterdir() if (p / "arch.yaml").exists()]
    for folder in sorted(folders):
        label = (folder / "SOURCE").read_text().strip() if (folder / "SOURCE").exists() else folder.name
        text = (folder / "arch.yaml").read_text()
        if re.search(r"!(Component|Container|Hierarchical|Parallel|Pipeline|includedir|include)\b", text):
            continue  # Timeloop v4 / templated inputs, not a v0.2-v0.3 tree this Timeloop reads
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            out.append((label, "", {"error": f"not YAML: {str(exc).splitlines()[0]}"}))
            continue
        if not isinstance(doc, dict) or not ({"architecture", "arch"} & set(doc)):
            continue
        key = "architecture" if "architecture" in doc else "arch"  # v0.2 / v0.3 tree, or the legacy form
        tl_text = yaml.safe_dump({key: doc[key]}, sort_keys=False)
        tp_doc: dict[str, Any] = {key: doc[key]}
        for key in ("architecture_constraints", "mapspace_constraints", "mapspace"):
            if key in doc:
                tp_doc[key] = doc[key]
        for c in sorted(folder.glob("constraints_*.yaml")):
            try:
                cdoc = yaml.safe_load(c.read_text()) or {}
            except yaml.YAMLError:
                continue
            for key in ("architecture_constraints", "mapspace_constraints"):
                if isinstance(cdoc, dict) and key in cdoc and key not in tp_doc:
                    tp_doc[key] = cdoc[key]
        model_block = next((tp_doc[k] for k in ("architecture_constraints",) if k in tp_doc), None)
        if model_block is not None:
            # timeloop-model checks maps against the design's architecture constraints too, as Tileplan reads them
            # (M, the exercises' output channels, as the K of the problem Tileplan writes)
            akey = "architecture" if "architecture" in doc else "arch"
            tl_text = yaml.safe_dump({akey: doc[akey], "architecture_constraints": _m_as_k(model_block)},
                                     sort_keys=False)
        out.append((label, tl_text, tp_doc))
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _m_as_k(node: Any) -> Any:
    """Constraints with the output channels' M written as K (the factors and permutation strings)."""
    if isinstance(node, dict):
        return {k: (re.sub(r"M", "K", v) if k in ("factors", "permutation") and isinstance(v, str) else _m_as_k(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_m_as_k(x) for x in node]
    return node


def timeloop_accepts_arch(tl: Timeloop, arch_text: str) -> str | None:
    """timeloop-model's own verdict on an architecture: None if it runs a 1x1 layer on it (every factor 1, every
    tensor kept only at the outermost level), else its error."""
    try:
        hw_doc = yaml.safe_load(arch_text)
        arch = hw_doc["arch" if "arch" in hw_doc else "architecture"]  # (timeloop-model reads `arch` first)
        if "storage" in arch:  # the legacy form: storage listed innermost first
            names = [str(st["name"]).split("[")[0] for st in arch["storage"]]
        else:
            names = _tree_storage_names(arch)
    except (yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        return f"unreadable: {exc}"
    if not names:
        return "no storage level"
    problem = Problem(dims=dict.fromkeys(("N", "G", "K", "C", "P", "Q", "R", "S"), 1), stride=(1, 1), dilation=(1, 1))
    entries: list[dict[str, Any]] = []
    for i, n in enumerate(names):
        entries.append({"target": n, "type": "temporal", "factors": "R=1 S=1 P=1 Q=1 C=1 K=1 N=1",
                        "permutation": "RSPQCKN"})
        top = i == len(names) - 1
        entries.append({"target": n, "type": "bypass", "keep": ["Weights", "Inputs", "Outputs"] if top else [],
                        "bypass": [] if top else ["Weights", "Inputs", "Outputs"]})
    r = tl.run(arch_text, yaml.safe_dump(to_timeloop_problem(problem), sort_keys=False),
               yaml.safe_dump({"mapping": entries}))
    return None if r["accepted"] else r["error"]


def _tree_storage_names(arch: dict[str, Any]) -> list[str]:
    """Storage names of a Timeloop tree, innermost first, by Timeloop's class rules (as the importer reads them)."""
    out: list[str] = []
    node = arch
    while isinstance(node, dict) and node.get("subtree"):
        node = node["subtree"][0]
        for comp in node.get("local") or []:
            cls = str(comp.get("class", ""))
            if any(k in cls for k in ("DRAM", "SRAM", "regfile", "smartbuffer", "storage")):
                out.append(str(comp["name"]).split("[")[0])
    return list(reversed(out))


# ------------------------------------------------------------------------------------------------------------
# Judging and the table


def judge_all(folder: Path, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        try:
            j = judge(folder, case)
        except InputError as exc:
            rows.append({"case": case, "error": str(exc)})
            continue
        row: dict[str, Any] = {"case": case, "agrees": j.agrees, "violations": j.violations,
                               "cycle_ratio": j.cycle_ratio, "energy_ratio": j.energy_ratio}
        if j.agrees and case["timeloop"]["accepted"]:
            row["access_mismatches"] = access_mismatches(folder, case)
        rows.append(row)
    return rows


def report(rows: list[dict[str, Any]], header: list[str]) -> str:
    archs = sorted({r["case"]["arch"] for r in rows})
    acc = [r for r in rows if r["case"]["timeloop"]["accepted"] and r.get("agrees")]
    cyc = [r["cycle_ratio"] for r in acc if r.get("cycle_ratio") is not None]
    en = [r["energy_ratio"] for r in acc if r.get("energy_ratio") is not None]
    agree = sum(bool(r.get("agrees")) for r in rows)
    lines = header + [
        "",
        "## Summary",
        "",
        "| cases | architectures | verdicts agree | accepted | cycles within 1% | energy within 5% | per-level counts exact |",
        "|--:|--:|--:|--:|--:|--:|--:|",
        f"| {len(rows)} | {len(archs)} | {agree}/{len(rows)} ({agree / max(1, len(rows)):.1%}) | {len(acc)} "
        f"| {sum(abs(r - 1) <= 0.01 for r in cyc)}/{len(cyc)} ({sum(abs(r - 1) <= 0.01 for r in cyc) / max(1, len(cyc)):.1%}) "
        f"| {sum(abs(r - 1) <= 0.05 for r in en)}/{len(en)} ({sum(abs(r - 1) <= 0.05 for r in en) / max(1, len(en)):.1%}) "
        f"| {sum(not r.get('access_mismatches') for r in acc)}/{len(acc)} |",
        "",
        "## By source",
        "",
        "| source | cases | accepted by Timeloop | verdicts agree | cycles within 1% | energy within 5% |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[re.sub(r"\d+$", "", r["case"]["source"]) + ("+padded" if r["case"].get("padded_problem") else "")].append(r)
    for src, rs in sorted(by.items()):
        a = [r for r in rs if r["case"]["timeloop"]["accepted"] and r.get("agrees")]
        c = [r["cycle_ratio"] for r in a if r.get("cycle_ratio") is not None]
        e = [r["energy_ratio"] for r in a if r.get("energy_ratio") is not None]
        lines.append(f"| {src} | {len(rs)} | {sum(r['case']['timeloop']['accepted'] for r in rs)} "
                     f"| {sum(bool(r.get('agrees')) for r in rs)} | {sum(abs(x - 1) <= 0.01 for x in c)}/{len(c)} "
                     f"| {sum(abs(x - 1) <= 0.05 for x in e)}/{len(e)} |")
    kinds = Counter(_error_kind(r["case"]["timeloop"]["error"]) for r in rows if not r["case"]["timeloop"]["accepted"])
    lines += ["", "## Timeloop's rejections", "", "| first ERROR | cases |", "|---|--:|"]
    lines += [f"| {k} | {v} |" for k, v in kinds.most_common()]
    bad = [r for r in rows if not r.get("agrees") or (r.get("cycle_ratio") is not None
                                                       and abs(r["cycle_ratio"] - 1) > 0.01)]
    lines += ["", f"## Disagreements ({len(bad)})", ""]
    if bad:
        lines += ["| case | Timeloop | Tileplan | cycles TP/TL | energy TP/TL |", "|---|---|---|--:|--:|"]
        for r in bad[:60]:
            tlr = r["case"]["timeloop"]
            ours = r.get("error") or ("; ".join(r.get("violations") or []) or "accepted")
            lines.append(f"| {r['case']['id']} | {'accepted' if tlr['accepted'] else tlr['error']} | {ours[:120]} "
                         f"| {_fmt(r.get('cycle_ratio'))} | {_fmt(r.get('energy_ratio'))} |")
    return "\n".join(lines) + "\n"


def examples_table(examples: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    if not examples:
        return ""
    by_arch: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_arch[r["case"]["arch"]].append(r)
    agree = sum((e.get("refused") is not None) == (e.get("timeloop_error") is not None) for e in examples)
    lines = ["", "## Timeloop's own example architectures", "",
             f"Every distinct architecture file (v0.2 / v0.3 tree, or the legacy form) of the `--examples` sources in "
             f"the command above (a repository's whole history, or a folder of files), with its design's constraint "
             f"files: {len(examples)} files; Tileplan imports a file exactly when timeloop-model runs a 1x1 layer on it on {agree}. Their cases "
             "record Tileplan's re-export of the file (the upstream file is not committed); timeloop-model ran on the "
             "original, and scored every case the same on the re-export unless noted.", "",
             "| file (repository/path@commit) | timeloop-model | Tileplan | cases | cycles within 1% |",
             "|---|---|---|--:|--:|"]
    for e in sorted(examples, key=lambda x: x["example"]):
        rs = by_arch.get(e.get("arch", ""), [])
        acc = [r for r in rs if r.get("cycle_ratio") is not None]
        within = sum(abs(r["cycle_ratio"] - 1) <= 0.01 for r in acc)
        differs = sum("reexport_differs" in r["case"] for r in rs)
        tl_v = "runs" if e.get("timeloop_error") is None else f"refuses: {_short(e['timeloop_error'])}"
        tp_v = "imports" if e.get("refused") is None else f"refuses: {_short(e['refused'])}"
        extra = f" ({differs} differ on the re-export)" if differs else ""
        lines.append(f"| {e['example']} | {tl_v} | {tp_v} | {len(rs)}{extra} | {within}/{len(acc)} |")
    return "\n".join(lines) + "\n"


def _short(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")[:110]


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.4f}"


def _error_kind(err: str | None) -> str:
    if err is None:
        return "?"
    err = re.sub(r"\d+", "N", err)
    return err[:100]


# ------------------------------------------------------------------------------------------------------------


def judge_probe(tl: Timeloop, label: str, kind: str, text: str) -> dict[str, Any]:
    """timeloop-model's verdict on a probe file (a 1x1 layer, as for the example files) and Tileplan's import."""
    record: dict[str, Any] = {"probe": label, "kind": kind, "expect": PROBES.get(kind, "refuse"),
                              "timeloop_error": timeloop_accepts_arch(tl, text), "arch_yaml": text}
    try:
        load_descriptor(text, name="probe")
        record["refused"] = None
    except InputError as exc:
        record["refused"] = str(exc)
    return record


def rejudge_probe(record: dict[str, Any]) -> dict[str, Any]:
    """A recorded probe with today's Tileplan import of its file."""
    try:
        load_descriptor(record["arch_yaml"], name="probe")
        refused = None
    except InputError as exc:
        refused = str(exc)
    return {**record, "refused": refused}


def probes_table(probes: list[dict[str, Any]]) -> str:
    """Per probe kind: how often timeloop-model and Tileplan refuse the file."""
    if not probes:
        return ""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in probes:
        by[p["kind"]].append(p)
    lines = ["", "## Probes", "",
             "One change to a generated file (`--wide`: timeloop_fuzz_gen.probe), and generated files Tileplan "
             "refused (`generated`), judged by timeloop-model (a 1x1 layer) and by Tileplan's import. `refuse`: "
             "timeloop-model stops, so must Tileplan; `unmodelled`: timeloop-model runs it, Tileplan refuses it by "
             "design, naming the field (never a silently wrong number).", "",
             "| probe | expected | files | both refuse | both accept | Timeloop runs, Tileplan refuses "
             "| Timeloop refuses, Tileplan imports |", "|---|---|--:|--:|--:|--:|--:|"]
    for kind, ps in sorted(by.items()):
        tl_ok = [p["timeloop_error"] is None for p in ps]
        tp_ok = [p["refused"] is None for p in ps]
        lines.append(f"| {kind} | {PROBES.get(kind, 'refuse')} | {len(ps)} "
                     f"| {sum(not a and not b for a, b in zip(tl_ok, tp_ok))} | {sum(a and b for a, b in zip(tl_ok, tp_ok))} "
                     f"| {sum(a and not b for a, b in zip(tl_ok, tp_ok))} | {sum(not a and b for a, b in zip(tl_ok, tp_ok))} |")
    odd = [p for p in probes if (p["timeloop_error"] is None) != (p["refused"] is None)
           and not (p["expect"] == "unmodelled" and p["refused"] is not None)]
    lines += ["", f"Probes where the two disagree other than by design: {len(odd)}", ""]
    for p in odd[:30]:
        lines.append(f"- {p['probe']}: timeloop-model {_short(p['timeloop_error'] or 'runs')}; Tileplan "
                     f"{_short(p['refused'] or 'imports')}")
    return "\n".join(lines) + "\n"


def generate(args: argparse.Namespace, examples: list[dict[str, Any]], probes: list[dict[str, Any]] | None = None
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cases on the random architectures, recorded under --data; cases on the example files, under
    --examples-data: re-exports of upstream files are never written into the repository)."""
    tl = Timeloop(args.timeloop_bin)
    probes = probes if probes is not None else []
    rng = random.Random(args.seed)
    data = Path(args.data)
    (data / "archs").mkdir(parents=True, exist_ok=True)
    cases: list[dict[str, Any]] = []
    ex_cases: list[dict[str, Any]] = []
    ex_data = Path(args.examples_data) if args.examples_data else None
    if ex_data is not None:
        (ex_data / "archs").mkdir(parents=True, exist_ok=True)
    for a in range(args.archs):
        name, doc = random_arch(rng, f"fuzz{args.seed}_{a:03d}")
        if args.extended:  # its own stream: the base architectures and everything after them are the seed's
            doc = extend_arch(doc, random.Random(f"extended-{args.seed}-{a}"))
        if args.more:  # its own stream too
            doc = extend_more(doc, random.Random(f"more-{args.seed}-{a}"), network=True)
        if args.net:  # its own stream too
            doc = extend_net(doc, random.Random(f"net-{args.seed}-{a}"))
        if args.wide:  # its own stream too
            prng = random.Random(f"probe-{args.seed}-{a}")
            for kind in prng.sample(sorted(PROBES), 2):  # (probes first: extend_wide changes the document)
                pdoc = probe(doc, kind)
                if pdoc is not None:
                    probes.append(judge_probe(tl, f"{name}:{kind}", kind, dump_yaml(pdoc)))
            doc = extend_wide(doc, random.Random(f"wide-{args.seed}-{a}"))
        text = dump_yaml(doc)
        try:
            hw = load_descriptor(text, name=name)
        except InputError as exc:
            print(f"{name}: Tileplan refuses the generated file: {exc}", file=sys.stderr)
            if args.wide:  # (recorded: timeloop-model must refuse it too)
                probes.append(judge_probe(tl, name, "generated", text))
            continue
        rel = f"archs/{name}.yaml"
        (data / rel).write_text(text)
        for k in range(args.layers):
            layer = random_layer(rng, f"L{k}")
            new = make_cases(tl, rel, text, text, hw, layer, rng, args)
            cases += new
            print(f"{name} {layer['name']}: {len(new)} cases "
                  f"({sum(c['timeloop']['accepted'] for c in new)} accepted)", flush=True)
    for label, tl_text, tp_doc in example_files(args.examples):
        name = "ex_" + re.sub(r"[^A-Za-z0-9]+", "_", label.split("@")[0].rsplit(".", 1)[0])[-48:] + "_" + label[-7:]
        record: dict[str, Any] = {"example": label}
        if "error" in tp_doc:
            record["refused"] = tp_doc["error"]
            examples.append(record)
            continue
        record["timeloop_error"] = timeloop_accepts_arch(tl, tl_text)
        try:
            hw = load_descriptor(tp_doc, name=name)
        except InputError as exc:
            record["refused"] = str(exc)
            examples.append(record)
            print(f"example {label}: refused: {exc}", file=sys.stderr)
            continue
        examples.append(record)
        if record["timeloop_error"] is not None:
            continue
        export = dump_yaml(to_timeloop_arch(hw, hint=True))
        rel = f"archs/{name}.yaml"
        record["arch"] = rel  # (the table finds the file's cases by it)
        assert ex_data is not None
        (ex_data / rel).write_text(f"# Tileplan's re-export of {label}\n" + export)
        for k in range(args.example_layers):
            layer = random_layer(rng, f"L{k}")
            new = make_cases(tl, rel, export, tl_text, hw, layer, rng, args, check_text=export)
            record["cases"] = record.get("cases", 0) + len(new)
            ex_cases += new
        print(f"example {label}: {record.get('cases', 0)} cases", flush=True)
    return cases, ex_cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeloop-bin", help="folder with timeloop-model (commit 019f107, no Accelergy)")
    ap.add_argument("--examples", nargs="*", default=[], help="checkouts whose architecture files join the set")
    ap.add_argument("--examples-data", help=(
        "where the example files' re-exports and cases go (with --examples; outside the repository: they derive "
        "from upstream files, which are not committed)"))
    ap.add_argument("--rejudge", action="store_true", help="judge the recorded cases only (no Timeloop)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--archs", type=int, default=60)
    ap.add_argument("--extended", action="store_true", help=(
        "also write what Timeloop files in the wild use and the base generator does not (timeloop_fuzz_gen."
        "extend_arch: per-datatype sibling buffers, stated instances, flat trees, the legacy v0.2 form, "
        "multiple-buffering, min-utilization, bank / port counts, technology strings, other spellings)"))
    ap.add_argument("--more", action="store_true", help=(
        "round 3 (seed 4 on; after --extended's changes, on its own stream): loop constraints in the block "
        "timeloop-model checks maps against (exact / largest factors, permutations, spatial splits) and storage "
        "levels' network and address-generation energies (timeloop_fuzz_gen.extend_more)"))
    ap.add_argument("--net", action="store_true", help=(
        "round 4 (seed 5 on; after --more, on its own stream): most storage levels state the inferred network's "
        "energies (energy-per-hop, router-energy, wire-energy with or without tile-width, network-word-bits) and "
        "the arithmetic an area, levels a cluster-area (timeloop_fuzz_gen.extend_net)"))
    ap.add_argument("--wide", action="store_true", help=(
        "round 5 (seed 7 on; after --net, on its own stream): the rest of what timeloop-model reads from an "
        "architecture file (the form by version under arch: or architecture:, inline attributes, variables, hex "
        "counts, per-target constraint lists, name / bypassing / attributes in constraints, utilization and "
        "max_overbooked_proportion constraints, unconnected networks, false sparse flags; "
        "timeloop_fuzz_gen.extend_wide), and probes: one change timeloop-model stops on or Tileplan refuses by "
        "design, judged by both (recorded in probes.jsonl)"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--example-layers", type=int, default=3)
    ap.add_argument("--random-maps", type=int, default=2)
    ap.add_argument("--wild-maps", type=int, default=2)
    ap.add_argument("--cosa-time", type=float, default=3.0)
    ap.add_argument("--out", default=str(REPO / "bench/results/timeloop_fuzz.md"))
    ap.add_argument("--data", default=str(DATA), help="where the cases are recorded (and read by --rejudge)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    load_start = " ".join(f"{x:.1f}" for x in os.getloadavg())
    examples: list[dict[str, Any]] = []
    data = Path(args.data)
    ex_data = Path(args.examples_data) if args.examples_data else None
    if args.examples and ex_data is None:
        ap.error("--examples needs --examples-data DIR (outside the repository)")
    ex_cases: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    if args.rejudge:
        cases = load_cases(data)
        if (data / "probes.jsonl").exists():
            probes = [rejudge_probe(json.loads(x)) for x in (data / "probes.jsonl").read_text().splitlines()
                      if x.strip()]
        if (data / "examples.jsonl").exists():
            examples = [json.loads(x) for x in (data / "examples.jsonl").read_text().splitlines() if x.strip()]
        if ex_data is not None and (ex_data / "cases.jsonl").exists():
            ex_cases = load_cases(ex_data)
    else:
        if not args.timeloop_bin:
            ap.error("--timeloop-bin is required unless --rejudge")
        cases, ex_cases = generate(args, examples, probes)
        if probes:
            with open(data / "probes.jsonl", "w") as f:
                for p in probes:
                    f.write(json.dumps(p, sort_keys=True) + "\n")
        for folder, recorded in ((data, cases), (ex_data, ex_cases)):
            if folder is None:
                continue
            with open(folder / "cases.jsonl", "w") as f:
                for c in recorded:
                    f.write(json.dumps(c, sort_keys=True) + "\n")
        with open(data / "examples.jsonl", "w") as f:
            for e in examples:
                f.write(json.dumps(e, sort_keys=True) + "\n")
    rows = judge_all(data, cases) + (judge_all(ex_data, ex_cases) if ex_data is not None else [])
    command = "--rejudge" if args.rejudge else (
        f"--timeloop-bin DIR --seed {args.seed} --archs {args.archs} --layers {args.layers} "
        f"{'--extended ' if args.extended else ''}{'--more ' if args.more else ''}{'--net ' if args.net else ''}"
        f"{'--wide ' if args.wide else ''}"
        f"--example-layers {args.example_layers}" + (" --examples " + " ".join(
            Path(e.rstrip("/")).parent.name if Path(e.rstrip("/")).name == "repo" else Path(e).name
            for e in args.examples) if args.examples else ""))
    header = [
        "# Tileplan against real timeloop-model: differential fuzzing",
        "",
        f"`python bench/timeloop_fuzz.py {command}` on "
        f"{platform.machine()} ({os.cpu_count()} cores, shared; load average {load_start} at the start, "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end), {time.strftime('%Y-%m-%d')}; timeloop-model "
        f"NVlabs/timeloop@{UPSTREAM_COMMIT} without Accelergy (built-in energy tables); data "
        f"`{Path(args.data).resolve().relative_to(REPO) if Path(args.data).resolve().is_relative_to(REPO) else args.data}`"
        f" (seed {args.seed}); {time.perf_counter() - t0:.0f} s.",
    ]
    text = report(rows, header) + probes_table(probes) + examples_table(examples, rows)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
