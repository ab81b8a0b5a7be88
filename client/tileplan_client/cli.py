"""`tileplan-client`: the service from a terminal or CI.

    tileplan-client schedule --hw gemmini-16x16 --workload layers.yaml --out plans.json
    tileplan-client module KEY --format tar --out conv1.tar
    tileplan-client compile model-int8.onnx --hw gemmini-16x16 --out build/

A table and a progress bar on a terminal (tqdm, from the `cli` extra), JSON otherwise or with `--json`; `--out
FILE` writes the result there. Notes and warnings of an answer go to stderr. Exit codes: 0 ok, 1 service error
(unreachable, 5xx, timed out, solver failure), 2 bad input (unreadable files, 4xx, infeasible layers), 3 a plan
is slower than its baseline (only with --fail-if-slower-than-baseline) or an evaluated mapping is invalid.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

from tileplan_client.client import ANSWER_ERRORS, TileplanClient, not_the_api
from tileplan_client.errors import BadInput, CompileFailed, JobFailed, ServiceError
from tileplan_client.models import Compile, Job, Plan, ScheduleResult
from tileplan_client.nest import legend, loop_nest_lines, side_by_side, used_dims

OK, SERVICE_ERROR, BAD_INPUT, SLOWER = 0, 1, 2, 3


class InputProblem(Exception):
    pass


# -- input ----------------------------------------------------------------------------------------------------


def _load(path: str, flag: str) -> Any:
    try:
        return yaml.safe_load(Path(path).read_text())  # YAML reads JSON too
    except OSError as exc:
        raise InputProblem(f"{flag}: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputProblem(f"{flag}: {path} is not valid YAML{where}") from None


def load_layers(path: str) -> list[dict[str, Any]]:
    data = _load(path, "--workload")
    if isinstance(data, dict):
        data = data.get("layers")
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise InputProblem(f"--workload: {path} needs a list of layers (or a mapping with 'layers:')")
    return data


def hardware_ref(value: str) -> str | dict[str, Any]:
    """A file (Tileplan or Timeloop YAML) is sent inline; anything else is a catalog/registered name."""
    p = Path(value)
    if value.endswith((".yaml", ".yml", ".json")) or os.sep in value:
        try:
            return {"name": p.stem, "source": p.read_text()}
        except OSError as exc:
            raise InputProblem(f"--hw: cannot read {value}: {exc.strerror}") from None
    return value


# -- output ---------------------------------------------------------------------------------------------------


def _emit(args: argparse.Namespace, text: str, doc: Any) -> None:
    """`doc` as JSON with --json (or when stdout is not a terminal and there is no `text` view), else `text`;
    to --out FILE when given."""
    as_json = getattr(args, "json", False) or not text
    body = json.dumps(doc, indent=1) if as_json else text
    out = getattr(args, "out", None)
    if out:
        try:
            Path(out).write_text(body + "\n")
        except OSError as exc:
            raise InputProblem(f"--out: cannot write {out}: {exc.strerror}") from None
        print(f"wrote {out}", file=sys.stderr)
    else:
        print(body)


def _tell(result: ScheduleResult) -> None:
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    for plan in result.plans:
        for note in plan.notes:
            print(f"note: {plan.name or plan.key[:12]}: {note}", file=sys.stderr)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)


def progress_bar(enabled: bool) -> tuple[Callable[[Job], None], Callable[[], None]]:
    """(on_progress, close): a tqdm bar of layers done on stderr (when enabled and tqdm is installed)."""
    try:
        from tqdm import tqdm
    except ImportError:  # the SDK alone (pip install tileplan-client, without [cli]): no bar
        enabled = False
    if not enabled:
        return (lambda job: None), (lambda: None)
    bar = tqdm(desc="layers", unit="", file=sys.stderr, leave=False, dynamic_ncols=True)

    def update(job: Job) -> None:
        if job.total:
            bar.total = job.total
            bar.set_postfix_str(job.status, refresh=False)
            bar.update(job.done - bar.n)
            bar.refresh()  # one line per poll (polls are far apart), whatever tqdm's own pacing

    return update, bar.close


def plan_table(result: ScheduleResult) -> str:
    bases = sorted({p.baseline.mapper for p in result.plans if p.baseline})
    rows = [f"{'layer':32} {'cycles':>14} {'baseline':>14} {'speedup':>8} cached"]
    for p in result.plans:
        base = f"{p.baseline.metrics.cycles:14.0f}" if p.baseline else f"{'-':>14}"
        sp = f"{p.speedup:8.2f}" if p.speedup else f"{'-':>8}"
        rows.append(f"{(p.name or p.key[:12])[:32]:32} {p.metrics.cycles:14.0f} {base} {sp} "
                    f"{'yes' if p.cached else 'no'}")
    s = result.summary
    vs = s.baseline_mapper or ", ".join(bases) or "the baseline"
    rows.append(f"{s.layers} layers ({s.cached} cached, {s.solved} solved): {s.cycles:.0f} cycles"
                + (f", {s.speedup:.2f}x {vs}" if s.speedup else "")
                + (f", {s.seconds:.2f} s" if s.seconds is not None else ""))
    if bases:
        rows.append("baseline: " + ", ".join(bases))
    return "\n".join(rows)


def nest_view(plan: Plan) -> str:
    """The plan's loop nest beside its baseline's, with a legend of the dimensions they use."""
    mine = loop_nest_lines(plan.mapping)
    if plan.baseline is None:
        text, dims = "\n".join(mine), used_dims(plan.mapping)
    else:
        theirs = loop_nest_lines(plan.baseline.mapping)
        text = side_by_side(mine, theirs, (f"plan: {plan.mapper}", f"baseline: {plan.baseline.mapper}"))
        dims = used_dims(plan.mapping, plan.baseline.mapping)
    return f"== {plan.name or plan.key[:12]} on {plan.hardware}\n{text}\nlegend: {legend(dims)}\n"


# -- commands -------------------------------------------------------------------------------------------------


def cmd_schedule(args: argparse.Namespace, client: TileplanClient) -> int:
    layers, model = None, None
    if bool(args.workload) == bool(args.model):
        raise InputProblem("give --workload FILE.yaml or --model FILE.onnx")
    if args.workload:
        layers = load_layers(args.workload)
    else:
        try:
            model = Path(args.model).read_bytes()
        except OSError as exc:
            raise InputProblem(f"--model: cannot read {args.model}: {exc.strerror}") from None
    hw = hardware_ref(args.hw)
    options: dict[str, Any] = {}
    if args.mapper:
        options["mapper"] = args.mapper
    if args.time_limit is not None:
        options["time_limit_s"] = args.time_limit
    if args.codegen:
        options["codegen"] = True
    tty = sys.stderr.isatty() and not args.quiet
    update, close = progress_bar(tty)
    try:
        # on a terminal, answer at once and show the job's progress; elsewhere let the service wait
        result = client.schedule(hw, layers, model=model, options=options, wait=not tty, timeout=args.timeout,
                                 on_progress=update)
    finally:
        close()
    _tell(result)
    doc = result.raw
    slower = [p for p in result.plans if p.slower_than_baseline]
    table = sys.stdout.isatty() and not args.quiet and not args.json
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    if table:
        print(plan_table(result))
        if args.nest:
            print("\n" + "\n".join(nest_view(p) for p in result.plans))
        if args.out:
            print(f"wrote {len(result.plans)} plans to {args.out}")
    elif args.nest and not args.json:
        print("\n".join(nest_view(p) for p in result.plans))
    else:
        out = {"id": result.id, "status": result.status, "summary": result.summary.raw}
        if args.fail_if_slower_than_baseline:
            out["slower_than_baseline"] = [p.name or p.key for p in slower]
        print(json.dumps(out if args.out else doc))
    if args.fail_if_slower_than_baseline and slower:
        names = ", ".join(p.name or p.key[:12] for p in slower)
        print(f"error: {len(slower)} plan(s) slower than the baseline: {names}", file=sys.stderr)
        return SLOWER
    return OK


def input_shapes(specs: list[str] | None) -> dict[str, list[int]]:
    """`--input-shape name=1x3x224x224` (repeatable) -> {name: [1, 3, 224, 224]}."""
    out: dict[str, list[int]] = {}
    for spec in specs or []:
        name, eq, dims = spec.rpartition("=")
        try:
            if not eq or not name:
                raise ValueError
            out[name] = [int(d) for d in dims.lower().replace(",", "x").split("x")]
        except ValueError:
            raise InputProblem(f"--input-shape: expected NAME=1x3x224x224, got {spec!r}") from None
    return out


def compile_table(c: Compile) -> str:
    head = f"{'op':28} {'kind':16} {'where':11} {'emulated':>10} {'model':>10} {'speedup':>8}  reason"
    rows = [head, "-" * len(head)]
    for o in c.ops:
        em = "-" if o.cycles_emulated is None else f"{o.cycles_emulated:.0f}"
        mo = "-" if o.cycles_model is None else f"{o.cycles_model:.0f}"
        sp = f"{o.speedup:.2f}x" if o.speedup else "-"
        rows.append(f"{o.name[:28]:28} {o.op[:16]:16} {o.where:11} {em:>10} {mo:>10} {sp:>8}  {o.reason[:70]}")
    t = c.total
    share = t.get("accelerator_mac_share")
    rows.append("-" * len(head))
    rows.append(f"{t.get('accelerator_ops', 0)} of {t.get('ops', 0)} ops on the accelerator"
                + (f" ({share:.1%} of the MACs)" if isinstance(share, (int, float)) else "")
                + f"; emulated {t.get('cycles_emulated')} cycles, modelled {t.get('cycles_model')}"
                + (f", {t['speedup_model']:.2f}x the library's tiling" if t.get("speedup_model") else ""))
    return "\n".join(rows)


def compile_progress(enabled: bool) -> tuple[Callable[[Compile], None], Callable[[], None]]:
    """(on_progress, close): a tqdm bar of ops planned and generated on stderr (when enabled and installed)."""
    try:
        from tqdm import tqdm
    except ImportError:
        enabled = False
    if not enabled:
        return (lambda c: None), (lambda: None)
    bar = tqdm(desc="ops", unit="", file=sys.stderr, leave=False, dynamic_ncols=True)

    def update(c: Compile) -> None:
        if c.ops_total:
            bar.total = c.ops_total
            bar.set_postfix_str(c.status, refresh=False)
            bar.update(c.ops_done - bar.n)
            bar.refresh()

    return update, bar.close


def cmd_compile(args: argparse.Namespace, client: TileplanClient) -> int:
    try:
        model = Path(args.model).read_bytes()
    except OSError as exc:
        raise InputProblem(f"model: cannot read {args.model}: {exc.strerror}") from None
    calibration = None
    if args.calibration:
        try:
            calibration = Path(args.calibration).read_bytes()
        except OSError as exc:
            raise InputProblem(f"--calibration: cannot read {args.calibration}: {exc.strerror}") from None
    options: dict[str, Any] = {}
    if args.time_limit is not None:
        options["time_limit_s"] = args.time_limit
    for flag, key in ((args.host_only, "offload"), (args.no_emulate, "emulate"), (args.no_baseline, "baseline")):
        if flag:
            options[key] = False
    if args.fusion is not None:
        options["fusion"] = args.fusion
    tty = sys.stderr.isatty() and not args.quiet
    update, close = compile_progress(tty)
    try:
        # on a terminal, answer at once and show the compile's progress; elsewhere let the service wait
        c = client.compile(hardware_ref(args.hw), model, input_shapes=input_shapes(args.input_shape),
                           mapper=args.mapper, quantize=args.quantize or None, options=options, wait=not tty,
                           timeout=args.timeout, on_progress=update, calibration=calibration)
    finally:
        close()
    out = Path(args.out)
    stem = Path(args.model).stem
    try:
        out.mkdir(parents=True, exist_ok=True)
        tar = client.save_artifact(c, out / f"{stem}.tar")
        (out / f"{stem}.summary.json").write_text(json.dumps(c.summary, indent=1) + "\n")
    except OSError as exc:
        raise InputProblem(f"--out: cannot write into {args.out}: {exc.strerror}") from None
    for note in c.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json or not sys.stdout.isatty():
        print(json.dumps({"id": c.id, "status": c.status, "summary": c.summary, "notes": c.notes,
                          "artifact": tar} if args.json else {"id": c.id, "status": c.status, "artifact": tar,
                                                              "total": c.total, "notes": c.notes}))
    else:
        print(compile_table(c))
        print(f"wrote {tar} and {out / (stem + '.summary.json')}")
    return OK


def _emit_page(args: argparse.Namespace, rows: list[str], kind: str, items: list[Any], cursor: str | None) -> int:
    """One page of a listing: the table on a terminal (with how to ask for the next page), else the JSON."""
    if cursor:
        rows.append(f"more: --cursor {cursor}")
    _emit(args, "\n".join(rows) if sys.stdout.isatty() else "", {kind: items, "next_cursor": cursor})
    return OK


def cmd_compiles(args: argparse.Namespace, client: TileplanClient) -> int:
    items, cursor = client.compiles(hardware=args.hardware, status=args.status, limit=args.limit, cursor=args.cursor)
    rows = [f"{'id':14} {'model':24} {'hardware':16} {'status':8} {'ops':>5} {'accel':>5} {'emulated':>10}"]
    for c in items:
        rows.append(f"{c.id[:12]:14} {c.model[:24]:24} {c.hardware[:16]:16} {c.status:8} "
                    f"{c.total.get('ops', '-'):>5} {c.total.get('accelerator_ops', '-'):>5} "
                    f"{str(c.total.get('cycles_emulated', '-')):>10}")
    return _emit_page(args, rows, "compiles", [c.raw for c in items], cursor)


def cmd_delete_compile(args: argparse.Namespace, client: TileplanClient) -> int:
    for compile_id in args.ids:
        client.delete_compile(compile_id)
        print(f"deleted {compile_id}", file=sys.stderr)
    return OK


def cmd_job(args: argparse.Namespace, client: TileplanClient) -> int:
    job = client.job(args.id)
    if args.wait and not job.finished:
        update, close = progress_bar(sys.stderr.isatty())
        try:
            client.wait(job, timeout=args.timeout, on_progress=update)
        finally:
            close()
        job = client.job(args.id)
    text = f"job {job.id}: {job.status}, {job.done}/{job.total} layers" if sys.stdout.isatty() else ""
    if job.result is not None:
        _tell(job.result)
        if text:
            text = plan_table(job.result)
    _emit(args, text, job.raw)
    return OK


def cmd_plan(args: argparse.Namespace, client: TileplanClient) -> int:
    plan = client.plan(args.key if args.name is None else _named(args.key, args.name))
    text = nest_view(plan) if args.nest else (plan_table(ScheduleResult.from_dict(
        {"id": "", "status": "done", "plans": [plan.raw], "summary": {"layers": 1}})) if sys.stdout.isatty() else "")
    _emit(args, text, plan.raw)
    return OK


def _named(key: str, name: str) -> Plan:
    """A plan reference that carries the asker's layer name (as a schedule answer's links do)."""
    from urllib.parse import urlencode

    q = "?" + urlencode({"name": name})
    return Plan.from_dict({"key": key, "metrics": {"cycles": 0}, "links": {
        "self": f"/plans/{key}{q}", "module": f"/plans/{key}/module{q}", "timeloop": f"/plans/{key}/timeloop{q}"}})


def cmd_plans(args: argparse.Namespace, client: TileplanClient) -> int:
    plans, cursor = client.plans(hardware=args.hardware, op=args.op, limit=args.limit, cursor=args.cursor)
    rows = [f"{'key':14} {'layer':24} {'hardware':16} {'cycles':>12} {'speedup':>8} {'vs':12}"]
    for p in plans:
        rows.append(f"{p.key[:12]:14} {(p.name or p.layer.get('op', ''))[:24]:24} {p.hardware[:16]:16} "
                    f"{p.metrics.cycles:12.0f} {(f'{p.speedup:.2f}x' if p.speedup else '-'):>8} "
                    f"{p.baseline.mapper if p.baseline else '-':12}")
    return _emit_page(args, rows, "plans", [p.raw for p in plans], cursor)


def cmd_module(args: argparse.Namespace, client: TileplanClient) -> int:
    if args.format == "tar" and not args.out:
        raise InputProblem("--out: a tar archive needs --out FILE")
    ref: str | Plan = args.key if args.name is None else _named(args.key, args.name)
    module = client.module(ref, args.format)
    for note in module.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.out:
        try:
            module.save(args.out)
        except OSError as exc:
            raise InputProblem(f"--out: cannot write {args.out}: {exc.strerror}") from None
        print(f"wrote {args.out} ({len(module.data):,} bytes)", file=sys.stderr)
    if args.json:
        doc = {"key": module.key, "format": module.format, "filename": module.filename,
               "model_cycles": module.model_cycles, "notes": module.notes, "out": args.out}
        if not args.out:
            doc["source"] = module.text
        print(json.dumps(doc, indent=1))
    elif not args.out:
        print(module.text)
    return OK


def cmd_timeloop(args: argparse.Namespace, client: TileplanClient) -> int:
    ref: str | Plan = args.key if args.name is None else _named(args.key, args.name)
    text = client.timeloop(ref, bundle=args.bundle, fold_groups=args.fold_groups)
    doc = None
    if getattr(args, "json", False) or not text.strip():  # (read only when shown as JSON)
        try:
            doc = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError) as exc:
            raise ServiceError(f"the service's Timeloop answer is not YAML ({type(exc).__name__})") from None
    _emit(args, text.rstrip("\n"), doc)
    return OK


def cmd_evaluate(args: argparse.Namespace, client: TileplanClient) -> int:
    data = _load(args.mapping, "--mapping")
    if isinstance(data, dict) and isinstance(data.get("plans"), list):
        data = data["plans"]
    items = data if isinstance(data, list) else [data]
    layer: dict[str, Any] | None = None
    if args.layer:
        layer = _load(args.layer, "--layer") if Path(args.layer).exists() else yaml.safe_load(args.layer)
        if not isinstance(layer, dict):
            raise InputProblem("--layer: a layer (JSON/YAML object or a file holding one)")
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InputProblem(f"--mapping: item {i} is not a Mapping or a Plan")
        mapping = item if "levels" in item else item.get("mapping")
        own = item.get("layer") if "levels" not in item else None
        chosen = layer if layer is not None else own  # a plan's layer as it came back: the service reads it
        if not isinstance(mapping, dict) or not isinstance(chosen, dict):
            raise InputProblem(f"--mapping: item {i} needs a mapping and a layer (a Plan, or give --layer)")
        pairs.append((chosen, mapping))
    if layer is not None and len(pairs) > 1:
        raise InputProblem(f"--mapping: {args.mapping} holds {len(pairs)} plans; --layer goes with one mapping")
    results = [client.evaluate(hardware_ref(args.hw), lay, m, args.executor) for lay, m in pairs]
    lines = []
    for (lay, _), r in zip(pairs, results):
        head = f"{lay.get('name') or lay.get('op', '')}: "
        if r.valid and r.metrics is not None:
            lines.append(f"{head}valid, {r.metrics.cycles:.0f} cycles ({r.metrics.utilization:.1%} utilisation, "
                         f"{r.metrics.bound}-bound)")
        else:
            lines += [f"{head}invalid:"] + [f"  - {v}" for v in r.violations]
    docs = [r.raw for r in results]
    _emit(args, "\n".join(lines) if sys.stdout.isatty() else "", docs[0] if len(docs) == 1 else docs)
    return OK if all(r.valid for r in results) else SLOWER


def cmd_hardware(args: argparse.Namespace, client: TileplanClient) -> int:
    if args.name:
        doc = client.descriptor(args.name)
        _emit(args, yaml.safe_dump(doc, sort_keys=False).rstrip("\n"), doc)
        return OK
    hws = client.hardware()
    text = "\n".join(f"{h.name:20} {h.source:10} {h.description}" for h in hws) if sys.stdout.isatty() else ""
    _emit(args, text, [h.raw for h in hws])
    return OK


def cmd_health(args: argparse.Namespace, client: TileplanClient) -> int:
    _emit(args, "", client.health())
    return OK


def _json_out(p: argparse.ArgumentParser, what: str = "the result") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON (the default off a terminal)")
    p.add_argument("--out", help=f"write {what} to this file")


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as every other error of this command: one line naming the argument, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(BAD_INPUT, f"tileplan-client: error: {message} (see {self.prog} --help)\n")


def _int_from(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"give an integer from {lo} to {hi}, got {text!r}")
        return value
    return parse


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (nan reached the socket; 0 or less can never succeed)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"give a positive number of seconds, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="tileplan-client", description="Talk to a Tileplan service.")
    p.add_argument("--url", default=os.environ.get("TILEPLAN_URL", "http://127.0.0.1:8000"),
                   help="service URL (default: TILEPLAN_URL or http://127.0.0.1:8000)")
    p.add_argument("--token", default=os.environ.get("TILEPLAN_TOKEN"), help="API token (default: TILEPLAN_TOKEN)")
    p.add_argument("--request-timeout", type=_seconds, default=60.0, help="seconds per HTTP request")
    p.add_argument("--retries", type=_int_from(0, 100), default=3, help="retries of unreachable/overloaded service")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("schedule", help="plans for a workload or an ONNX model")
    s.add_argument("--hw", required=True, help="hardware: catalog name, or a descriptor YAML file")
    s.add_argument("--workload", help="YAML: {layers: [...]} or a list of layers")
    s.add_argument("--model", help="ONNX model file: plan its convolutions and matrix products")
    s.add_argument("--out", help="write the answer (JSON, every plan) here")
    s.add_argument("--json", action="store_true", help="print the whole answer as JSON, even on a terminal")
    s.add_argument("--nest", action="store_true", help="show each plan's loop nest beside its baseline's")
    s.add_argument("--mapper", help="cosa | gemmini-auto | random | exhaustive")
    s.add_argument("--time-limit", type=_seconds, default=None, help="solver seconds per layer")
    s.add_argument("--codegen", action="store_true", help="also build each plan's module (TVM / C)")
    s.add_argument("--timeout", type=_seconds, default=900.0, help="give up waiting after this many seconds")
    s.add_argument("--fail-if-slower-than-baseline", action="store_true",
                   help="exit 3 if any plan has more cycles than its baseline")
    s.add_argument("--quiet", action="store_true", help="no progress bar or table")
    s.set_defaults(func=cmd_schedule)

    c = sub.add_parser("compile", help="compile a quantized ONNX model into one accelerator program (tar)")
    c.add_argument("model", help="ONNX model file (QDQ or QOperator int8; --quantize for a float one)")
    c.add_argument("--hw", required=True, help="hardware: catalog name, or a descriptor YAML file")
    c.add_argument("--out", required=True, help="directory for <model>.tar and <model>.summary.json")
    c.add_argument("--input-shape", action="append", metavar="NAME=1x3x224x224",
                   help="fix an input's shape (needed for symbolic dimensions); repeatable")
    c.add_argument("--quantize", action="store_true",
                   help="have a float model quantized (onnxruntime's static quantizer, random calibration data "
                        "unless --calibration)")
    c.add_argument("--calibration", help=".npz of calibration inputs by input name (with --quantize)")
    c.add_argument("--mapper", help="cosa | gemmini-auto | random | exhaustive")
    c.add_argument("--time-limit", type=_seconds, default=None, help="solver seconds per layer")
    c.add_argument("--host-only", action="store_true", help="run every op on the host (a reference build)")
    c.add_argument("--no-emulate", action="store_true", help="skip the compile-time emulated run")
    c.add_argument("--no-baseline", action="store_true", help="skip planning the hand-written baseline")
    c.add_argument("--fusion", choices=["auto", "off"], default=None,
                   help="fused-layer groups: auto (the service's default) or off")
    c.add_argument("--timeout", type=_seconds, default=1800.0, help="give up waiting after this many seconds")
    c.add_argument("--json", action="store_true", help="print the whole answer (summary included) as JSON")
    c.add_argument("--quiet", action="store_true", help="no progress bar or table")
    c.set_defaults(func=cmd_compile)

    cs = sub.add_parser("compiles", help="compiled models, newest first")
    cs.add_argument("--hardware")
    cs.add_argument("--status", choices=["queued", "running", "done", "failed"])
    cs.add_argument("--limit", type=_int_from(1, 500), default=50)
    cs.add_argument("--cursor", help="next_cursor of the previous page")
    _json_out(cs, "the page")
    cs.set_defaults(func=cmd_compiles)

    dc = sub.add_parser("delete-compile", help="delete compiles you asked for (their model and artifact)")
    dc.add_argument("ids", nargs="+", metavar="ID", help="a compile's id (GET /compiles)")
    dc.set_defaults(func=cmd_delete_compile)

    j = sub.add_parser("job", help="a job's status (and plans, once done)")
    j.add_argument("id")
    j.add_argument("--wait", action="store_true", help="wait until it is done")
    j.add_argument("--timeout", type=_seconds, default=900.0)
    _json_out(j, "the job")
    j.set_defaults(func=cmd_job)

    pl = sub.add_parser("plan", help="one cached plan")
    pl.add_argument("key")
    pl.add_argument("--name", help="the layer name to show it under")
    pl.add_argument("--nest", action="store_true", help="its loop nest beside its baseline's")
    _json_out(pl, "the plan")
    pl.set_defaults(func=cmd_plan)

    ps = sub.add_parser("plans", help="cached plans, newest first")
    ps.add_argument("--hardware")
    ps.add_argument("--op", help="conv2d | matmul")
    ps.add_argument("--limit", type=_int_from(1, 500), default=50)
    ps.add_argument("--cursor", help="next_cursor of the previous page")
    _json_out(ps, "the page")
    ps.set_defaults(func=cmd_plans)

    m = sub.add_parser("module", help="a plan's generated code (C, TVMScript, or a tar with the host library)")
    m.add_argument("key")
    m.add_argument("--format", choices=["c", "tvmscript", "tar"], default="c")
    m.add_argument("--name", help="name the module (entry point, files) after this layer name")
    m.add_argument("--out", help="write it here (required for tar)")
    m.add_argument("--json", action="store_true", help="print what was fetched (name, notes, cycles) as JSON")
    m.set_defaults(func=cmd_module)

    t = sub.add_parser("timeloop", help="a plan's mapping as Timeloop YAML")
    t.add_argument("key")
    t.add_argument("--name", help="the layer name to show it under")
    t.add_argument("--bundle", action="store_true", help="with the architecture and problem")
    t.add_argument("--fold-groups", action="store_true", help="fold a grouped conv's G into N")
    _json_out(t, "the export")
    t.set_defaults(func=cmd_timeloop)

    e = sub.add_parser("evaluate", help="score a mapping (or a plans file) on a descriptor")
    e.add_argument("--hw", required=True)
    e.add_argument("--mapping", required=True, help="a Mapping, a Plan, or plans (schedule --out), JSON or YAML")
    e.add_argument("--layer", help="the layer (JSON/YAML or a file); default: each plan's own")
    e.add_argument("--executor", choices=["tileplan", "library"], default=None)
    _json_out(e, "the evaluation")
    e.set_defaults(func=cmd_evaluate)

    h = sub.add_parser("hardware", help="list hardware, or show one descriptor")
    h.add_argument("name", nargs="?")
    _json_out(h, "the hardware")
    h.set_defaults(func=cmd_hardware)

    hz = sub.add_parser("health", help="service health")
    _json_out(hz, "the health")
    hz.set_defaults(func=cmd_health)
    return p


# Control characters shown escaped wherever the CLI prints (but tab and newline): what it prints comes from the
# service, and names in it from any of its clients (a layer named "\x1b]0;title\x07\x1b[2J" retitles and clears the
# terminal that lists it; OSC 52 writes some terminals' clipboard); the bidirectional overrides likewise (text that
# reads other than it is).
_SHOWN = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0))}
_SHOWN.update({c: f"\\u{c:04x}" for c in (*range(0x202a, 0x202f), *range(0x2066, 0x206a))})


class _Visible:
    """A text stream that writes through `stream` with control characters escaped (`_SHOWN`)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(text.translate(_SHOWN))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, encoding, ...
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Visible(out), _Visible(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    try:
        with TileplanClient(args.url, args.token, timeout=args.request_timeout, retries=args.retries) as client:
            try:
                return int(args.func(args, client))
            except ANSWER_ERRORS as exc:  # reading what the service sent, which is not the API's answer
                if client.answers == 0:
                    raise
                raise not_the_api(args.command, exc) from None
    except InputProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    except BadInput as exc:
        if exc.result is not None:  # rejected, but the plans were solved: say what they are
            _tell(exc.result)
        print(f"error: rejected (HTTP {exc.status}): {exc}", file=sys.stderr)
        return BAD_INPUT
    except JobFailed as exc:
        print(f"error: job {exc.job.id} failed: {exc}", file=sys.stderr)
        return BAD_INPUT if exc.input_fault else SERVICE_ERROR
    except CompileFailed as exc:
        print(f"error: compile {exc.compile.id[:12]} failed: {exc}", file=sys.stderr)
        return BAD_INPUT if exc.input_fault else SERVICE_ERROR
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return SERVICE_ERROR


if __name__ == "__main__":
    sys.exit(main())
