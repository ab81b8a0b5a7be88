"""`tileplan`: the command-line door. Thin: every command calls the same library functions the API does.

Exit codes: 0 success, 2 bad input (one readable line on stderr naming the field), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml

from tileplan.errors import InputError, MappingInfeasible, TileplanError


def _objective(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, text.split(",")):
        key, _, val = item.partition("=")
        try:
            out[key.strip()] = float(val)
        except ValueError:
            raise InputError(("objective", key.strip()), f"{val!r} is not a number") from None
    return out


def _layers(args: argparse.Namespace) -> list[Any]:
    from tileplan.workload import load_workload, parse_layer_spec

    if sum(map(bool, (args.layer, args.workload, args.model))) != 1:
        raise InputError(("layer",), "give --layer SPEC (repeatable), --workload FILE.yaml or --model FILE.onnx")
    if args.workload:
        return load_workload(args.workload)[1]
    if args.model:
        from tileplan.workload_onnx import load_onnx

        try:
            data = Path(args.model).read_bytes()
        except OSError as exc:
            raise InputError(("model",), f"cannot read {args.model}: {exc.strerror}") from None
        wl = load_onnx(data)
        for note in wl.notes:
            print(f"tileplan: note: {note}", file=sys.stderr)
        return list(wl.layers)
    return [parse_layer_spec(s) for s in args.layer]


def cmd_schedule(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from tileplan.errors import from_validation_error
    from tileplan.hardware.catalog import resolve_hardware
    from tileplan.plan import ScheduleOptions, make_plan

    hw = resolve_hardware(args.hw)
    layers = _layers(args)
    try:
        opts = ScheduleOptions(
            mapper=args.mapper,
            time_limit_s=args.time_limit,
            objective=_objective(args.objective) if args.objective else {},
            dataflow=args.dataflow,
            baseline=not args.no_baseline,
        )
    except ValidationError as exc:
        raise from_validation_error(exc, ("options",)) from None
    plans = []
    for layer in layers:
        plans.append(make_plan(layer, hw, opts))
    if args.json:
        print(json.dumps([p.model_dump(mode="json") for p in plans], indent=2))
        return 0
    counts = [getattr(layer, "count", 1) for layer in layers]
    print(_plan_table(plans, counts))
    return 0


def _plan_table(plans: list[Any], counts: list[int]) -> str:
    head = f"{'layer':32} {'cycles':>12} {'baseline':>12} {'speedup':>8} {'util':>6} {'bound':>11} {'solve s':>8}"
    rows = [head, "-" * len(head)]
    tot = base_tot = 0.0
    for p, c in zip(plans, counts):
        b = p.baseline.metrics.cycles if p.baseline else float("nan")
        rows.append(
            f"{(p.layer.get('name') or p.layer['op'])[:32]:32} {p.metrics.cycles:12.0f} {b:12.0f} "
            f"{(p.speedup or float('nan')):7.2f}x {p.metrics.utilization:6.1%} {p.metrics.bound[:11]:>11} "
            f"{p.solver.seconds:8.2f}"
        )
        tot += c * p.metrics.cycles
        base_tot += c * (p.baseline.metrics.cycles if p.baseline else float("nan"))
    if len(plans) > 1:
        rows.append("-" * len(head))
        rows.append(f"{'total (x count)':32} {tot:12.0f} {base_tot:12.0f} {base_tot / tot:7.2f}x")
    return "\n".join(rows)


def cmd_hardware(args: argparse.Namespace) -> int:
    from tileplan.hardware.catalog import catalog, load_descriptor_file, resolve_hardware
    from tileplan.units import format_size

    if args.action == "list":
        for name, hw in sorted(catalog().items()):
            print(f"{name:16} {hw.pe_array.rows}x{hw.pe_array.cols}  {hw.description}")
        return 0
    if args.action == "show":
        hw = resolve_hardware(args.name)
        print(yaml.safe_dump(hw.model_dump(mode="json", exclude_defaults=True), sort_keys=False), end="")
        return 0
    hw = load_descriptor_file(args.name)
    levels = ", ".join(
        f"{lv.name} {format_size(lv.capacity) if lv.capacity else 'backing store'}" for lv in hw.memory_levels
    )
    print(f"{args.name}: valid descriptor {hw.name!r} ({hw.pe_array.rows}x{hw.pe_array.cols}; {levels})")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from tileplan.hardware.catalog import resolve_hardware
    from tileplan.mapping import parse_mapping
    from tileplan.plan import evaluate
    from tileplan.workload import parse_layer_spec

    hw = resolve_hardware(args.hw)
    layer = parse_layer_spec(args.layer)
    try:
        data = yaml.safe_load(Path(args.mapping).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(("mapping",), f"cannot read {args.mapping}: {exc}") from None
    if isinstance(data, dict) and "mapping" in data and "levels" not in data:
        data = data["mapping"]  # a whole Plan is accepted too
    result = evaluate(layer, hw, parse_mapping(data), args.executor)
    if args.json:
        print(result.model_dump_json(indent=2))
    elif result.valid:
        m = result.metrics
        assert m is not None
        print(
            f"valid: {m.cycles:.0f} cycles (ideal {m.ideal_cycles:.0f}, {m.utilization:.1%} utilisation, "
            f"{m.bound}-bound), {m.energy_pj / 1e6:.2f} uJ, {m.dram_bytes / 1024:.1f} KiB DRAM traffic"
        )
    else:
        print("invalid mapping:")
        for v in result.violations:
            print(f"  - {v}")
    return 0 if result.valid else 3


def cmd_timeloop(args: argparse.Namespace) -> int:
    from tileplan.hardware.catalog import resolve_hardware
    from tileplan.interop.timeloop_map import to_timeloop_arch, to_timeloop_mapping
    from tileplan.mapping import parse_mapping
    from tileplan.problem import Problem
    from tileplan.workload import parse_layer_spec

    hw = resolve_hardware(args.hw)
    if args.what == "arch":
        print(yaml.safe_dump(to_timeloop_arch(hw), sort_keys=False), end="")
        return 0
    data = yaml.safe_load(Path(args.mapping).read_text())
    if isinstance(data, dict) and "mapping" in data and "levels" not in data:
        data = data["mapping"]
    layer = parse_layer_spec(args.layer)
    print(yaml.safe_dump(to_timeloop_mapping(parse_mapping(data), hw, Problem.from_layer(layer)), sort_keys=False), end="")
    return 0


def cmd_codegen(args: argparse.Namespace) -> int:
    import numpy as np

    from tileplan.codegen.pipeline import build_module, random_inputs, reference, run
    from tileplan.codegen.registry import CodegenError
    from tileplan.hardware.catalog import resolve_hardware
    from tileplan.plan import ScheduleOptions, make_plan
    from tileplan.workload import parse_layer_spec

    hw = resolve_hardware(args.hw)
    layer = parse_layer_spec(args.layer)
    plan = make_plan(layer, hw, ScheduleOptions(mapper=args.mapper, time_limit_s=args.time_limit, baseline=False))
    try:
        art = build_module(plan, layer, hw, formats=(args.format,))
    except CodegenError as exc:
        raise TileplanError(f"codegen: {exc}") from None
    if args.format == "tar":
        if not args.out:
            raise InputError(("out",), "a tar archive needs --out FILE")
        Path(args.out).write_bytes(art.tar_bytes())
    else:
        text = art.c_source if args.format == "c" else art.tvmscript
        if args.out:
            Path(args.out).write_text(text)
        else:
            print(text)
    for note in art.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.run:
        inputs = random_inputs(art.geometry, seed=0)
        result = run(art, inputs)
        want = reference(art.geometry, art.epilogue, inputs["I"], inputs["W"], inputs["bias"])
        exact = bool(np.array_equal(result.buffers["out"], want))
        print(
            f"emulator: {result.cycles:.0f} cycles (cost model {art.model_cycles:.0f}), "
            f"output {'bit-exact' if exact else 'DIFFERS from'} NumPy",
            file=sys.stderr,
        )
        return 0 if exact else 1
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from tileplan.cost.calibrate import main as calibrate_main

    return calibrate_main(args.data, args.out, args.artifact or ())


def cmd_serve(args: argparse.Namespace) -> int:
    from tileplan.api.server import serve

    serve(host=args.host, port=args.port, db_url=args.db, workers=args.workers)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from tileplan.jobs.worker import run_worker

    run_worker(db_url=args.db, concurrency=args.concurrency)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tileplan", description="Tiling plans for DNN layers on GEMM accelerators.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("schedule", help="plan layers on a hardware descriptor")
    s.add_argument("--hw", required=True, help="catalog name or descriptor file (Tileplan or Timeloop YAML)")
    s.add_argument("--layer", action="append", help="e.g. conv2d:in_channels=64,out_channels=64,in_h=56,in_w=56,kernel=3,padding=1")
    s.add_argument("--workload", help="YAML file with a list of layers")
    s.add_argument("--model", help="ONNX model: plan its convolutions and matrix products")
    s.add_argument("--mapper", default="cosa", help="cosa | gemmini-auto | random | exhaustive")
    s.add_argument("--time-limit", type=float, default=10.0, help="seconds per layer (default 10)")
    s.add_argument("--objective", help="weights, e.g. latency=0.6,energy=0.3,memory_utilization=0.1")
    s.add_argument("--dataflow", help="fix the dataflow instead of letting the mapper choose")
    s.add_argument("--no-baseline", action="store_true", help="skip the hand-written baseline")
    s.add_argument("--json", action="store_true", help="print contract Plans as JSON")
    s.set_defaults(func=cmd_schedule)

    h = sub.add_parser("hardware", help="list, show or validate descriptors")
    h.add_argument("action", choices=["list", "show", "validate"])
    h.add_argument("name", nargs="?", help="catalog name (show) or file (validate)")
    h.set_defaults(func=cmd_hardware)

    e = sub.add_parser("evaluate", help="score a given mapping (or list its violations)")
    e.add_argument("--hw", required=True)
    e.add_argument("--layer", required=True)
    e.add_argument("--mapping", required=True, help="YAML/JSON file with a Mapping (or a Plan)")
    e.add_argument("--executor", choices=["tileplan", "library"], default=None,
                   help="Gemmini-like hardware: cost the calls as Tileplan's code runs them (tiles kept between "
                        "calls that share them) or as Gemmini's own library does (default: the mapping's own "
                        "`executor`, which a plan's mapping carries, else the library)")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_evaluate)

    t = sub.add_parser("timeloop", help="export Timeloop architecture or mapping YAML")
    t.add_argument("what", choices=["arch", "mapping"])
    t.add_argument("--hw", required=True)
    t.add_argument("--layer", help="layer spec (mapping export)")
    t.add_argument("--mapping", help="Mapping or Plan file (mapping export)")
    t.set_defaults(func=cmd_timeloop)

    g = sub.add_parser("codegen", help="plan a layer and emit its TVM module / accelerator C")
    g.add_argument("--hw", required=True)
    g.add_argument("--layer", required=True)
    g.add_argument("--mapper", default="cosa")
    g.add_argument("--time-limit", type=float, default=10.0)
    g.add_argument("--format", choices=["c", "tvmscript", "tar"], default="c")
    g.add_argument("--out", help="write here instead of standard output (required for tar)")
    g.add_argument("--run", action="store_true", help="also run it on the emulator against a NumPy reference")
    g.set_defaults(func=cmd_codegen)

    c = sub.add_parser("calibrate", help="refit the cost model's parameters on measured cycles")
    c.add_argument("--data", required=True, help="CSV of FireSim measurements")
    c.add_argument("--out", help="write the fitted parameters here (YAML)")
    c.add_argument("--artifact", action="append",
                   help="DOSA artifact CSV (16x16 runs), or a directory of them; repeatable (bench/data/dosa_artifact)")
    c.set_defaults(func=cmd_calibrate)

    v = sub.add_parser("serve", help="run the HTTP service (SQLite and in-process workers by default)")
    v.add_argument("--host", default="127.0.0.1")
    v.add_argument("--port", type=int, default=8000)
    v.add_argument("--db", default=None, help="database URL (default: TILEPLAN_DATABASE_URL or SQLite in ./data)")
    v.add_argument("--workers", type=int, default=None, help="solver processes (default: cores)")
    v.set_defaults(func=cmd_serve)

    w = sub.add_parser("worker", help="run a durable job worker against PostgreSQL")
    w.add_argument("--db", default=None, help="PostgreSQL URL (default: TILEPLAN_DATABASE_URL)")
    w.add_argument("--concurrency", type=int, default=1)
    w.set_defaults(func=cmd_worker)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except InputError as exc:
        print(f"tileplan: error: {exc}", file=sys.stderr)
        return 2
    except MappingInfeasible as exc:
        print(f"tileplan: no plan: {exc}", file=sys.stderr)
        return 1
    except TileplanError as exc:
        print(f"tileplan: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
