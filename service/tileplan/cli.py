"""`tileplan`: the command-line door. Thin: every command calls the same library functions the API does.

Exit codes: 0 success, 2 bad input (one readable line on stderr naming the field), 1 anything else,
3 an evaluated mapping is invalid. Every command that prints a result takes `--json` (the API's shapes) and
`--out FILE` (the result written there instead of printed; the JSON shape for .json files). Long work (planning
many layers, calibrating) shows a progress bar on a terminal (tqdm, on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml

from tileplan.errors import InputError, MappingInfeasible, TileplanError
from tileplan.paths import writable_dir, writable_file

T = TypeVar("T")


# -- input ----------------------------------------------------------------------------------------------------


def _objective(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, text.split(",")):
        key, _, val = item.partition("=")
        try:
            out[key.strip()] = float(val)
        except ValueError:
            raise InputError(("objective", key.strip()), f"{val!r} is not a number") from None
    return out


def _readable(path: str, flag: str) -> Path:
    """`path` if it can be read, else the one-line error naming the flag."""
    p = Path(path)
    try:
        if p.is_dir():
            return p
        with p.open("rb"):
            return p
    except OSError as exc:
        raise InputError((flag,), f"cannot read {path}: {exc.strerror}") from None


def _layers(args: argparse.Namespace) -> list[Any]:
    from tileplan.workload import load_workload, parse_layer_spec

    if sum(map(bool, (args.layer, args.workload, args.model))) != 1:
        raise InputError(("layer",), "give --layer SPEC (repeatable), --workload FILE.yaml or --model FILE.onnx")
    if args.workload:
        layers = load_workload(args.workload)[1]
    elif args.model:
        from tileplan.workload_onnx import load_onnx

        wl = load_onnx(_readable(args.model, "model").read_bytes())
        for note in wl.notes:
            _note(f"model: {note}")
        layers = list(wl.layers)
    else:
        layers = [parse_layer_spec(s) for s in args.layer]
    for i, layer in enumerate(layers):
        _bounded(layer, ("layer", i) if len(layers) > 1 else ("layer",))
    return layers


def _bounded(layer: Any, loc: tuple[str | int, ...] = ("layer",)) -> Any:
    """The API's bound on a layer's sizes (settings.max_layer_extent, TILEPLAN_MAX_LAYER_EXTENT): one source of
    truth, so the CLI does not start a solve the service would refuse."""
    from tileplan.settings import get_settings
    from tileplan.workload import check_extents

    check_extents(layer, get_settings().max_layer_extent, loc)
    return layer


def _time_limit(seconds: float) -> float:
    """--time-limit within the API's cap (settings.max_time_limit_s, TILEPLAN_MAX_TIME_LIMIT_S)."""
    from tileplan.settings import get_settings

    cap = get_settings().max_time_limit_s
    if not 0 < seconds <= cap:
        raise InputError(("time_limit",), f"{seconds:g} s: give more than 0 and at most {cap:g} s (max_time_limit_s)")
    return seconds


def _db_url(value: str, flag: str) -> str:
    """A database URL given on the command line, checked before it is used: a bare path is a common mistake.
    The backend is the URL's scheme up to a '+driver' (as SQLAlchemy's make_url reads it), worked out without
    importing SQLAlchemy: `compile` refuses a bad model before the plan store is opened (issue 24: < 1 s)."""
    m = re.match(r"^([\w+]+)://", value)
    backend = m.group(1).split("+")[0].lower() if m else ""
    if backend not in ("sqlite", "postgresql", "postgres"):
        hint = f"sqlite:///{value}" if "://" not in value else "sqlite:///PATH.db"
        raise InputError((flag,), f"{value!r} is not a database URL: give {hint} for a SQLite file, or "
                                  "postgresql://USER@HOST/DB")
    return value


def _plan_docs(path: str) -> tuple[list[dict[str, Any]], bool]:
    """The mappings in a file, as ([{"mapping": ..., "layer": ... or None}], True if they are Plans): a Mapping,
    a Plan, a list of Plans (`tileplan schedule --json`) or an answer holding `plans` (POST /schedule,
    `tileplan-client schedule --out`)."""
    try:
        data = yaml.safe_load(Path(path).read_text())  # YAML reads JSON too
    except OSError as exc:
        raise InputError(("mapping",), f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise InputError(("mapping",), f"{path} is neither JSON nor YAML: {exc}".splitlines()[0]) from None
    if isinstance(data, dict) and isinstance(data.get("plans"), list):
        data = data["plans"]
    items = data if isinstance(data, list) else [data]
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InputError(("mapping", i), f"{path}: expected a Mapping or a Plan, got {type(item).__name__}")
        if "levels" in item:
            out.append({"mapping": item, "layer": None, "name": ""})
        elif isinstance(item.get("mapping"), dict):
            layer = item.get("layer") if isinstance(item.get("layer"), dict) else None
            out.append({"mapping": item["mapping"], "layer": layer, "name": (layer or {}).get("name", "")})
        else:
            raise InputError(("mapping", i), f"{path}: expected a Mapping (levels) or a Plan (mapping)")
    if not out:
        raise InputError(("mapping",), f"{path} holds no mapping")
    return out, any(o["layer"] is not None for o in out)


def _pick(path: str, layer_spec: str | None) -> list[tuple[Any, dict[str, Any], str]]:
    """(layer, mapping, name) pairs to evaluate or export: with --layer, the one mapping of the file for it (a
    file of several plans: the plan for that layer); without, every plan of the file with its own layer."""
    from tileplan.problem import Problem
    from tileplan.workload import layer_fields, parse_layer, parse_layer_spec

    docs, _ = _plan_docs(path)

    def own_layer(d: dict[str, Any], i: int) -> Any:
        if d["layer"] is None:
            raise InputError(("layer",), f"{path} holds a bare mapping: give the layer with --layer SPEC")
        return parse_layer(layer_fields(d["layer"]), ("mapping", i, "layer"))

    if layer_spec is None:
        return [(own_layer(d, i), d["mapping"], d["name"]) for i, d in enumerate(docs)]
    names = [d["name"] or f"#{i}" for i, d in enumerate(docs)]
    if ":" not in layer_spec:  # not `op:field=value,...`: the name of one of the file's plans
        for i, d in enumerate(docs):
            if d["layer"] is not None and d["name"] == layer_spec:
                return [(own_layer(d, i), d["mapping"], d["name"])]
        raise InputError(("layer",), f"{layer_spec!r} is neither a layer spec (e.g. matmul:M=64,K=64,N=64) nor a "
                                     f"plan of {path} (its plans: {', '.join(names)})")
    layer = parse_layer_spec(layer_spec)
    if len(docs) == 1:
        return [(layer, docs[0]["mapping"], layer.name or docs[0]["name"])]
    want = Problem.from_layer(layer).key()
    for i, d in enumerate(docs):
        if d["layer"] is not None and Problem.from_layer(own_layer(d, i)).key() == want:
            return [(layer, d["mapping"], layer.name or d["name"])]
    raise InputError(("layer",), f"no plan in {path} is for this layer (it holds plans for {', '.join(names)}: "
                                 "give one of those names, or a layer spec matching one)")


# -- output ---------------------------------------------------------------------------------------------------


def _note(text: str) -> None:
    print(f"tileplan: note: {text}", file=sys.stderr)


def _emit(args: argparse.Namespace, text: str, doc: Any = None) -> None:
    """The result: with --json its JSON (`doc`), else `text`; to --out FILE if given (then one line saying so),
    else to standard output."""
    body = json.dumps(doc, indent=2) if getattr(args, "json", False) and doc is not None else text
    out = getattr(args, "out", None)
    if out:
        try:
            Path(out).write_text(body if body.endswith("\n") else body + "\n")
        except OSError as exc:
            raise InputError(("out",), f"cannot write {out}: {exc.strerror}") from None
        print(f"wrote {out}", file=sys.stderr)
    else:
        print(body)


def _progress(items: Iterable[T], total: int, what: str, label: Any = None) -> Iterator[T]:
    """`items`, with a progress bar on stderr when it is a terminal (tqdm; TQDM_DISABLE=1 hides it)."""
    from tqdm import tqdm

    # mininterval=0: redraw on every item (items are layers, seconds apart), so the final count is always shown
    # before the bar clears; tqdm's default 0.1 s throttle skipped it when the last layers came from the cache.
    with tqdm(
        total=total, desc=what, unit="", file=sys.stderr, disable=None, leave=False, dynamic_ncols=True,
        mininterval=0, miniters=1,
    ) as bar:
        for item in items:
            if label is not None:
                bar.set_postfix_str(str(label(item))[:40], refresh=False)
            yield item
            bar.update(1)


def _keeps(hw: Any, mapping: dict[str, Any]) -> dict[str, list[str]]:
    """Which tensors each level keeps under the mapping's dataflow (for the loop-nest view)."""
    try:
        arch = hw.resolve(mapping.get("dataflow"))
    except Exception:  # noqa: BLE001 - a view, not a check: an unknown dataflow shows no keeps
        return {}
    return {lv.name: sorted(lv.keeps) for lv in arch.levels}


def _nest_view(hw: Any, name: str, mapping: dict[str, Any], base: Any = None) -> str:
    """The plan's loop nest (beside its baseline's, if any) with a legend of the dimensions it uses."""
    from tileplan.loopnest import legend, loop_nest_lines, side_by_side, used_dims

    mine = loop_nest_lines(mapping, _keeps(hw, mapping))
    if base is None:
        text = "\n".join(mine)
        dims = used_dims(mapping)
    else:
        bmap = base.mapping.model_dump(mode="json")
        theirs = loop_nest_lines(bmap, _keeps(hw, bmap))
        text = side_by_side(mine, theirs, ("plan", f"baseline: {base.mapper}"))
        dims = used_dims(mapping, bmap)
    return f"== {name}\n{text}\nlegend: {legend(dims)}\n"


# -- commands -------------------------------------------------------------------------------------------------


def cmd_schedule(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from tileplan.errors import from_validation_error
    from tileplan.hardware.catalog import resolve_hardware
    from tileplan.plan import BASELINE_MEANING, ScheduleOptions, make_plan

    hw = resolve_hardware(args.hw)
    layers = _layers(args)
    try:
        opts = ScheduleOptions.model_validate({
            "mapper": args.mapper,
            "time_limit_s": _time_limit(args.time_limit),
            "objective": _objective(args.objective) if args.objective else {},
            "dataflow": args.dataflow,
            "baseline": not args.no_baseline,
            "model": args.cost_model,
            "group_packing": args.group_packing,
        })
    except ValidationError as exc:
        raise from_validation_error(exc, ("options",)) from None
    named = lambda layer: layer.name or layer.op  # noqa: E731
    plans = [make_plan(layer, hw, opts) for layer in _progress(layers, len(layers), "planning", named)]
    for layer, plan in zip(layers, plans):
        for note in plan.notes:
            _note(f"{named(layer)}: {note}")
    doc = [p.model_dump(mode="json") for p in plans]
    text = _plan_table(plans, [getattr(layer, "count", 1) for layer in layers])
    bases = sorted({p.baseline.mapper for p in plans if p.baseline})
    if bases:
        text += "\n" + "\n".join(f"baseline: {b}, {BASELINE_MEANING.get(b, 'the baseline mapper')}" for b in bases)
    if args.nest:
        text += "\n\n" + "\n".join(_nest_view(hw, named(layer), plan.mapping.model_dump(mode="json"), plan.baseline)
                                   for layer, plan in zip(layers, plans))
    _emit(args, text, doc)
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
        hws = sorted(catalog().items())
        text = "\n".join(f"{name:16} {hw.pe_array.rows}x{hw.pe_array.cols}  {hw.description}" for name, hw in hws)
        _emit(args, text, [{"name": name, "description": hw.description, "source": "catalog"} for name, hw in hws])
        return 0
    if not args.name:
        raise InputError(("name",), f"`hardware {args.action}` needs a {'catalog name' if args.action == 'show' else 'file'}")
    if args.action == "show":
        hw = resolve_hardware(args.name)
        doc = hw.model_dump(mode="json", exclude_defaults=True)
        _emit(args, yaml.safe_dump(doc, sort_keys=False).rstrip("\n"), doc)
        return 0
    hw = load_descriptor_file(args.name)
    levels = ", ".join(
        f"{lv.name} {format_size(lv.capacity) if lv.capacity else 'backing store'}" for lv in hw.memory_levels
    )
    from tileplan.cost.gemmini import extrapolation_notes
    from tileplan.execution import array_extent, library_dataflows

    text = f"{args.name}: valid descriptor {hw.name!r} ({hw.pe_array.rows}x{hw.pe_array.cols}; {levels})"
    calibrated = []
    for df in library_dataflows(hw):
        arch = hw.resolve(df)
        rows, cols = array_extent(arch)
        notes = extrapolation_notes(arch)
        calibrated.append({"dataflow": df, "rows": rows, "cols": cols, "extrapolated": notes})
        text += (f"\n  {df}: Gemmini-like, costed by the calibrated model ({rows} rows of input channels x {cols} "
                 "columns of output channels)")
        text += "".join(f"\n  extrapolated: {note}" for note in notes)
    _emit(args, text, {"valid": True, "descriptor": hw.model_dump(mode="json", exclude_defaults=True),
                       "calibrated_model": calibrated})
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from tileplan.hardware.catalog import resolve_hardware
    from tileplan.mapping import parse_mapping
    from tileplan.plan import evaluate

    hw = resolve_hardware(args.hw)
    picked = _pick(args.mapping, args.layer)
    results = []
    for i, (layer, mapping, _) in enumerate(picked):
        loc: tuple[str | int, ...] = ("mapping",) if len(picked) == 1 else ("mapping", i, "mapping")
        results.append(evaluate(layer, hw, parse_mapping(mapping, loc), args.executor, args.cost_model))
    lines = []
    for (layer, mapping, name), result in zip(picked, results):
        head = f"{name}: " if len(picked) > 1 else ""
        if result.valid:
            m = result.metrics
            assert m is not None
            lines.append(
                f"{head}valid: {m.cycles:.0f} cycles (ideal {m.ideal_cycles:.0f}, {m.utilization:.1%} utilisation, "
                f"{m.bound}-bound), {m.energy_pj / 1e6:.2f} uJ, {m.dram_bytes / 1024:.1f} KiB DRAM traffic"
            )
        else:
            lines.append(f"{head}invalid mapping:")
            lines += [f"  - {v}" for v in result.violations]
        if args.nest:
            lines.append(_nest_view(hw, name or layer.op, mapping))
    docs = [r.model_dump(mode="json") for r in results]
    _emit(args, "\n".join(lines), docs[0] if len(docs) == 1 else docs)
    return 0 if all(r.valid for r in results) else 3


def cmd_timeloop(args: argparse.Namespace) -> int:
    from tileplan.hardware.catalog import resolve_hardware
    from tileplan.interop.timeloop_map import (
        dump_mapping_yaml,
        to_timeloop_arch,
        to_timeloop_bundle,
        to_timeloop_mapping,
    )
    from tileplan.mapping import parse_mapping
    from tileplan.problem import Problem

    hw = resolve_hardware(args.hw)
    doc: Any
    if args.what == "arch":
        doc = to_timeloop_arch(hw)
        _emit(args, yaml.safe_dump(doc, sort_keys=False).rstrip("\n"), doc)
        return 0
    if not args.mapping:
        raise InputError(("mapping",), "a mapping export needs --mapping FILE (a Mapping, a Plan or plans)")
    picked = _pick(args.mapping, args.layer)
    if len(picked) > 1:
        raise InputError(("layer",), f"{args.mapping} holds {len(picked)} plans: pick one with --layer SPEC")
    layer, data, _ = picked[0]
    mapping = parse_mapping(data)
    notes: list[str] = []
    try:
        if args.bundle:
            text = to_timeloop_bundle(Problem.from_layer(layer), hw, mapping, fold_groups=args.fold_groups)
            doc = yaml.safe_load(text)
        else:
            doc = to_timeloop_mapping(mapping, hw, fold_groups=args.fold_groups, notes=notes)
            text = dump_mapping_yaml(doc)
    except InputError as exc:  # the library's advice, in this command's words
        raise InputError(exc.loc, exc.msg.replace("fold_groups=True", "--fold-groups"), exc.type) from None
    for note in notes:
        _note(note)
    _emit(args, text.rstrip("\n"), doc)
    return 0


def cmd_codegen(args: argparse.Namespace) -> int:
    from tileplan.codegen.support import codegen_unsupported
    from tileplan.hardware.catalog import resolve_hardware
    from tileplan.plan import ScheduleOptions, make_plan
    from tileplan.workload import parse_layer_spec

    hw = resolve_hardware(args.hw)
    layer = _bounded(parse_layer_spec(args.layer))
    _time_limit(args.time_limit)
    reason = codegen_unsupported(hw)
    if reason:  # known from the descriptor: say so before solving anything
        raise InputError(("hw",), reason)
    if args.format == "tar" and not args.out:
        raise InputError(("out",), "a tar archive needs --out FILE")
    if args.out:
        writable_file(args.out, "out")
    plan = make_plan(layer, hw, ScheduleOptions(mapper=args.mapper, time_limit_s=args.time_limit, baseline=False))

    import numpy as np

    from tileplan.codegen.pipeline import build_module, random_inputs, reference, run
    from tileplan.codegen.registry import CodegenError

    try:
        art = build_module(plan, layer, hw, formats=(args.format,))
    except CodegenError as exc:
        raise TileplanError(f"codegen: {exc}") from None
    built: dict[str, Any] = {"name": art.name, "format": args.format, "plan": plan.key, "notes": list(art.notes),
                             "model_cycles": art.model_cycles}
    for note in art.notes:
        _note(note)
    if args.format == "tar":
        Path(args.out).write_bytes(art.tar_bytes())
        built["out"] = args.out
    else:
        text = art.c_source if args.format == "c" else art.tvmscript
        if args.out:
            Path(args.out).write_text(text)
            built["out"] = args.out
        elif args.json:
            built["source"] = text
        else:
            print(text)
    exact = True
    if args.run:
        inputs = random_inputs(art.geometry, seed=0)
        result = run(art, inputs)
        want = reference(art.geometry, art.epilogue, inputs["I"], inputs["W"], inputs["bias"])
        exact = bool(np.array_equal(result.buffers["out"], want))
        built["emulator"] = {"cycles": result.cycles, "bit_exact": exact}
        print(
            f"emulator: {result.cycles:.0f} cycles (cost model {art.model_cycles:.0f}), "
            f"output {'bit-exact' if exact else 'DIFFERS from'} NumPy",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(built, indent=2))
    return 0 if exact else 1


def _calibration(path: str) -> list[dict[str, Any]]:
    """`--calibration FILE.npz`: one array per model input, samples along the first axis -> a list of feeds."""
    from tileplan.frontend.calibration import read_calibration

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(("calibration",), f"cannot read {path}: {exc.strerror}") from None
    return read_calibration(data)


def _input_shapes(specs: list[str] | None) -> dict[str, list[int]]:
    """`--input-shape name=1x3x224x224` (repeatable) -> {name: [1, 3, 224, 224]}."""
    out: dict[str, list[int]] = {}
    for spec in specs or []:
        name, eq, dims = spec.rpartition("=")
        if not eq or not name:
            raise InputError(("input_shapes",), f"expected NAME=1x3x224x224, got {spec!r}")
        try:
            out[name] = [int(d) for d in dims.lower().replace(",", "x").split("x")]
        except ValueError:
            raise InputError(("input_shapes", name), f"dimensions must be integers, got {dims!r}") from None
    return out


def cmd_compile(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from tileplan.errors import from_validation_error
    from tileplan.frontend.onnx_import import precheck

    try:
        data = Path(args.model).read_bytes()
    except OSError as exc:
        raise InputError(("model",), f"cannot read {args.model}: {exc.strerror}") from None
    out = writable_dir(args.out, "out")
    plans_db = _db_url(args.plans_db, "plans_db") if args.plans_db else None
    from tileplan.hardware.catalog import resolve_hardware

    hw = resolve_hardware(args.hw)
    t0 = time.perf_counter()
    cache_key = None if args.no_cache else _compile_cache_key(args, data, hw, plans_db)
    if cache_key is not None:
        from tileplan.frontend import result_cache

        hit = result_cache.get(cache_key)
        if hit is not None:
            artifact, summary = hit
            summary["total"]["compile_seconds"] = round(time.perf_counter() - t0, 3)
            summary["total"]["phase_seconds"] = {"cached": summary["total"]["compile_seconds"]}
            summary["notes"] = [*summary["notes"], "answered from the compile cache: the same model, hardware, "
                                "options, input shapes, plan store and Tileplan code were compiled before"]
            return _write_compile(args, out, artifact, summary, summary["notes"])
    precheck(data, _input_shapes(args.input_shape), args.quantize)  # before the planner, TVM, the plan store load
    from tileplan.frontend.compile import CompileOptions, NewStorePlanner, compile_model, store_planner
    try:
        opts = CompileOptions(mapper=args.mapper, time_limit_s=_time_limit(args.time_limit), quantize=args.quantize,
                              offload=not args.host_only, emulate=not args.no_emulate,
                              baseline=not args.no_baseline, group_packing=args.group_packing,
                              fusion=args.fusion, einsum=args.einsum)
    except ValidationError as exc:
        raise from_validation_error(exc, ("options",)) from None
    calibration = _calibration(args.calibration) if args.calibration else None
    store = None
    planner: Any = None
    if not args.no_cache:
        from tileplan.settings import get_settings

        url = plans_db or get_settings().db_url()
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        if _new_sqlite_file(url):  # nothing to look up: the store is opened to save the plans, off the serial path
            planner = NewStorePlanner(lambda: _open_store(url))
        else:
            store = _open_store(url)
            planner = store_planner(store)

    def progress(done: int, total: int) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\rtileplan: {done}/{total} ops", end="" if done < total else "\n", file=sys.stderr)

    try:
        result = compile_model(data, hw, opts, _input_shapes(args.input_shape), planner=planner, progress=progress,
                               calibration=calibration, workers=max(1, args.jobs))
    finally:
        if store is not None:
            store.close()
        if isinstance(planner, NewStorePlanner):
            planner.close()
    if cache_key is not None:
        from tileplan.frontend import result_cache

        result_cache.put(cache_key, result.artifact, result.summary)
    return _write_compile(args, out, result.artifact, result.summary, result.notes)


def _new_sqlite_file(url: str) -> bool:
    """Whether `url` names a SQLite file that does not exist yet (a plain `sqlite:///PATH` URL, no query)."""
    if not url.startswith("sqlite:///") or "?" in url:
        return False
    path = url.removeprefix("sqlite:///")
    return bool(path) and path != ":memory:" and not Path(path).exists()


def _open_store(url: str) -> Any:
    from tileplan.store.repository import Store

    return Store(url)


def _compile_cache_key(args: argparse.Namespace, data: bytes, hw: Any, plans_db: str | None) -> str | None:
    """The compile result cache's key (tileplan.frontend.result_cache) of this command line: everything the
    compile reads, with the plan store's URL (the default one resolved)."""
    from tileplan.frontend import result_cache

    if plans_db is None:
        from tileplan.settings import get_settings

        plans_db = get_settings().db_url()
    options = {k: getattr(args, k) for k in ("mapper", "time_limit", "quantize", "host_only", "no_emulate",
                                             "no_baseline", "group_packing", "fusion", "einsum")}
    try:
        calibration = Path(args.calibration).read_bytes() if args.calibration else None
    except OSError:
        return None  # the compile itself says what is wrong with the file
    return result_cache.key(data, hw.model_dump(mode="json"), options, _input_shapes(args.input_shape), calibration,
                            plans_db)


def _write_compile(args: argparse.Namespace, out: Path, artifact: bytes, summary: dict[str, Any],
                   notes: list[str]) -> int:
    stem = Path(args.model).stem
    (out / f"{stem}.tar").write_bytes(artifact)
    (out / f"{stem}.summary.json").write_text(json.dumps(summary, indent=1))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for note in notes:
        print(f"tileplan: note: {note}", file=sys.stderr)
    print(_summary_table(summary))
    print(f"wrote {out / (stem + '.tar')} and {out / (stem + '.summary.json')}")
    return 0


def _summary_table(summary: dict[str, Any]) -> str:
    head = f"{'op':28} {'kind':18} {'where':11} {'emulated':>10} {'model':>10} {'speedup':>8}  reason"
    rows = [head, "-" * len(head)]
    for o in summary["ops"]:
        em = o.get("cycles_emulated")
        mo = o.get("cycles_model")
        sp = o.get("speedup")
        rows.append(f"{o['name'][:28]:28} {o['op'][:18]:18} {o['where']:11} {em if em is not None else '-':>10} "
                    f"{f'{mo:.0f}' if mo is not None else '-':>10} {f'{sp:.2f}x' if sp else '-':>8}  "
                    f"{o['reason'][:70]}")
    t = summary["total"]
    rows.append("-" * len(head))
    if not t["accelerator_ops"]:
        library = "no op on the accelerator: no library tiling to compare"
    elif t["baseline_cycles_model"] is None:  # --no-baseline, or an op the library's tiler cannot tile
        library = "library tiling not costed" + (": --no-baseline" if (summary.get("options") or {}).get("baseline") is False
                                                 else " for every op")
    else:
        library = f"library tiling {t['baseline_cycles_model']:.0f}"
    rows.append(f"{t['accelerator_ops']} of {t['ops']} ops on the accelerator ({t['accelerator_mac_share']:.1%} of "
                f"the MACs); emulated {t['cycles_emulated']} cycles, modelled {t['cycles_model']:.0f} ({library})")
    groups = summary.get("groups") or []
    if groups:
        rows.append(f"fused-layer groups: {len(groups)}, fused {sum(g['fused'] for g in groups)} "
                    "(bytes and modelled cycles per-layer -> fused)")
        for i, g in enumerate(groups):
            tile = g.get("tile") or {}
            rows.append(f"  [{i}] {' -> '.join(g['members'])[:60]}: {tile.get('rows', '-')} rows x "
                        f"{tile.get('bands', '-')} bands, {g['bytes_unfused']} -> {g['bytes_fused']} B, "
                        f"{g['cycles_model_unfused']:.0f} -> {g['cycles_model_fused']:.0f} cycles"
                        + (f" (emulated {g['cycles_emulated_fused']}, {g['dram_bytes_emulated_fused']} B)"
                           if g.get("cycles_emulated_fused") else
                           f" (emulated per-layer {g['cycles_emulated_unfused']}, {g['dram_bytes_emulated_unfused']} B)"
                           if g.get("cycles_emulated_unfused") is not None else "")
                        + f"; {g['reason'][:90]}")
    return "\n".join(rows)


def cmd_run(args: argparse.Namespace) -> int:
    from tileplan.run import run_command

    return run_command(args.artifact, args.input, args.output, args.json, args.compare, args.reference)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from tileplan.cost.calibrate import calibrate

    data = _readable(args.data, "data")
    paths: list[Path] = []
    for a in args.artifact or ():
        p = _readable(a, "artifact")
        paths += sorted(p.glob("*.csv")) if p.is_dir() else [p]
    with tqdm(desc="fitting", unit="fit", file=sys.stderr, disable=None, leave=False, dynamic_ncols=True) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        _, report = calibrate(data, paths, progress=progress)
    params = {"cost_params": {n: round(v, 4) for n, v in report.params.items()}}
    lines = []
    for d in report.datasets:
        m = d.cross_validated or d.fitted
        within = m.within_layer_spearman_median
        within_text = "n/a (no layer with 3 or more runs)" if within != within else f"{within:.3f}"
        lines.append(f"{d.name}: {d.runs} runs, {d.groups} groups; cross-validated MAPE {m.mape:.1%}, median APE "
                     f"{m.median_ape:.1%}, Spearman {m.spearman:.3f}, within-layer {within_text}")
    text = yaml.safe_dump(params, sort_keys=False)
    if args.out:  # the parameters, loadable as a descriptor's cost_params; the figures still on stdout
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            raise InputError(("out",), f"cannot write {args.out}: {exc.strerror}") from None
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print("\n".join(lines))
        print(text, end="")
    return 0


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost: assume it is reachable from elsewhere


def cmd_serve(args: argparse.Namespace) -> int:
    from tileplan.api.server import serve
    from tileplan.settings import get_settings

    if not _loopback(args.host) and not get_settings().tokens and not args.allow_anonymous:
        raise InputError(("host",), f"{args.host} is reachable from other machines and TILEPLAN_TOKENS is empty, so "
                                    "anyone could write: set TILEPLAN_TOKENS (e.g. to the output of `python3 -c "
                                    "'import secrets; print(secrets.token_urlsafe(24))'`) or pass --allow-anonymous")
    serve(host=args.host, port=args.port, db_url=_db_url(args.db, "db") if args.db else None, workers=args.workers)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from tileplan.jobs.worker import run_worker

    run_worker(db_url=_db_url(args.db, "db") if args.db else None, concurrency=args.concurrency)
    return 0


def _out_and_json(p: argparse.ArgumentParser, what: str = "the result") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON (the API's shape)")
    p.add_argument("--out", help=f"write {what} to this file instead of standard output")


MAX_JOBS = 64  # processes one command may start (--jobs, serve --workers, worker --concurrency)


class _OneLineParser(argparse.ArgumentParser):
    """argparse's usage errors as every other CLI error: one line naming the argument, exit 2 (not a usage block
    above it); `--help` still shows the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"tileplan: error: {message} (see {self.prog} --help)\n")


def _int_from(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi] (a pool of 100,000 jobs, 0 solver processes or port 99999 are
    refused before any work, not discovered during it)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"give an integer from {lo} to {hi}, got {text!r}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="tileplan", description="Tiling plans for DNN layers on GEMM accelerators.")
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
    s.add_argument("--group-packing", choices=["auto", "off"], default="auto",
                   help="grouped / depthwise layers: also plan several groups per array pass (auto, default) or not")
    s.add_argument("--cost-model", choices=["gemmini", "timeloop", "first-order"], default=None,
                   help="score and search with this cost model (default: the hardware's; 'timeloop' = "
                        "timeloop-model's semantics)")
    s.add_argument("--nest", action="store_true", help="also show each plan's loop nest beside its baseline's")
    _out_and_json(s, "the plans (contract Plans)")
    s.set_defaults(func=cmd_schedule)

    h = sub.add_parser("hardware", help="list, show or validate descriptors")
    h.add_argument("action", choices=["list", "show", "validate"])
    h.add_argument("name", nargs="?", help="catalog name (show) or file (validate)")
    _out_and_json(h)
    h.set_defaults(func=cmd_hardware)

    e = sub.add_parser("evaluate", help="score a given mapping (or list its violations)")
    e.add_argument("--hw", required=True)
    e.add_argument("--layer", help="layer spec; default: each plan's own layer (a file of plans)")
    e.add_argument("--mapping", required=True,
                   help="a Mapping, a Plan, or plans (`tileplan schedule --json`, `tileplan-client schedule --out`), "
                        "JSON or YAML")
    e.add_argument("--executor", choices=["tileplan", "library", "library-auto"], default=None,
                   help="Gemmini-like hardware: cost the calls as Tileplan's code runs them (tiles kept between "
                        "calls that share them) or as Gemmini's own library does (default: the mapping's own "
                        "`executor`, which a plan's mapping carries, else the library)")
    e.add_argument("--cost-model", choices=["gemmini", "timeloop", "first-order"], default=None,
                   help="cost model (default: the hardware's); 'timeloop' also judges legality as timeloop-model does")
    e.add_argument("--nest", action="store_true", help="also show the loop nest")
    _out_and_json(e, "the evaluation")
    e.set_defaults(func=cmd_evaluate)

    t = sub.add_parser("timeloop", help="export Timeloop architecture or mapping YAML")
    t.add_argument("what", choices=["arch", "mapping"])
    t.add_argument("--hw", required=True)
    t.add_argument("--layer", help="layer spec (mapping export; default: the plan's own layer)")
    t.add_argument("--mapping", help="Mapping or Plan file (mapping export)")
    t.add_argument("--bundle", action="store_true", help="architecture, problem and mapping in one document")
    t.add_argument("--fold-groups", action="store_true",
                   help="fold a grouped conv's G into N (Timeloop's CNN layer; by default G is exported as a dimension of its own)")
    _out_and_json(t, "the export")
    t.set_defaults(func=cmd_timeloop)

    g = sub.add_parser("codegen", help="plan a layer and emit its TVM module / accelerator C")
    g.add_argument("--hw", required=True)
    g.add_argument("--layer", required=True)
    g.add_argument("--mapper", default="cosa")
    g.add_argument("--time-limit", type=float, default=10.0)
    g.add_argument("--format", choices=["c", "tvmscript", "tar"], default="c")
    g.add_argument("--out", help="write here instead of standard output (required for tar)")
    g.add_argument("--run", action="store_true", help="also run it on the emulator against a NumPy reference")
    g.add_argument("--json", action="store_true", help="print what was built (name, notes, cycles) as JSON")
    g.set_defaults(func=cmd_codegen)

    m = sub.add_parser("compile", help="compile a quantized ONNX model into one accelerator program (tar)")
    m.add_argument("model", help="ONNX model file (QDQ or QOperator int8; --quantize for a float one)")
    m.add_argument("--hw", required=True, help="catalog name or descriptor file")
    m.add_argument("--out", required=True, help="directory for <model>.tar and <model>.summary.json")
    m.add_argument("--input-shape", action="append", metavar="NAME=1x3x224x224",
                   help="fix an input's shape (needed for symbolic dimensions); repeatable")
    m.add_argument("--quantize", action="store_true",
                   help="quantize a float model with onnxruntime's static quantizer (random calibration data "
                        "unless --calibration)")
    m.add_argument("--calibration", help=".npz of calibration inputs by input name (with --quantize)")
    m.add_argument("--mapper", default="cosa", help="cosa | gemmini-auto | random | exhaustive")
    m.add_argument("--time-limit", type=float, default=10.0, help="seconds per layer (default 10)")
    m.add_argument("--host-only", action="store_true", help="run every op on the host (a reference build)")
    m.add_argument("--no-emulate", action="store_true", help="skip the emulated run (no per-op emulated cycles)")
    m.add_argument("--no-baseline", action="store_true", help="skip planning the hand-written baseline")
    m.add_argument("--group-packing", choices=["auto", "off"], default="auto",
                   help="grouped / depthwise convolutions: also plan several groups per array pass (auto, "
                        "default) or one group at a time (off)")
    m.add_argument("--fusion", choices=["auto", "off"], default="auto",
                   help="fused-layer groups: plan them and fuse where bit-exact and faster (auto, default; the "
                        "summary's groups say why a group keeps the per-layer program) or plan none (off)")
    m.add_argument("--einsum", choices=["host", "accelerator"], default="host",
                   help="an Einsum of two int8 activations that is a matrix product: in float on the host as "
                        "onnxruntime computes it (host, default) or on the accelerator as a MatMul (its integer "
                        "sums round apart from onnxruntime's float ones at a few results in 10,000)")
    m.add_argument("--no-cache", action="store_true",
                   help="do not read or store plans in the plan cache, nor the result in the compile cache")
    m.add_argument("--plans-db", help="plan cache URL (default: TILEPLAN_DATABASE_URL or SQLite in ./data)")
    m.add_argument("--jobs", type=_int_from(1, MAX_JOBS), default=min(2, os.cpu_count() or 1),
                   help="processes that plan layers and generate kernels (default: 2, or 1 on one core)")
    m.add_argument("--json", action="store_true", help="print the network summary as JSON")
    m.set_defaults(func=cmd_compile)

    r = sub.add_parser("run", help="run a compiled model (tar) on the emulator, print per-op emulated cycles")
    r.add_argument("artifact", help="the tar `tileplan compile` wrote")
    r.add_argument("--input", action="append", required=True, metavar="[NAME=]FILE.npy",
                   help="the model's input (.npy; NAME= for a model with several inputs; or one .npz)")
    r.add_argument("--output", help="write the output here (.npy; .npz for several outputs)")
    r.add_argument("--json", action="store_true", help="print outputs' shapes and per-step cycles as JSON")
    r.add_argument("--compare", metavar="MODEL.onnx",
                   help="also run the compiled ONNX model in onnxruntime on the same input and print the agreement "
                        "with each --reference (exit 1 when the first misses >= 99.9%% within 1 LSB)")
    r.add_argument("--reference", action="append", choices=["ort-int8", "ort", "ort-noopt"],
                   help="onnxruntime judge(s) for --compare (repeatable; default: ort-int8, ort, ort-noopt): "
                        "ort-int8 = session.qdqisint8allowed=1, every int8 QDQ unit run as onnxruntime's integer "
                        "QLinear* kernel (the integer reference); ort = the default session; ort-noopt = no graph "
                        "optimisation (float between dequantize and quantize)")
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("calibrate", help="refit the cost model's parameters on measured cycles")
    c.add_argument("--data", required=True, help="CSV of FireSim measurements")
    c.add_argument("--out", help="write the fitted parameters here (YAML)")
    c.add_argument("--artifact", action="append",
                   help="DOSA artifact CSV (16x16 runs), or a directory of them; repeatable (bench/data/dosa_artifact)")
    c.add_argument("--json", action="store_true", help="print the whole calibration report as JSON")
    c.set_defaults(func=cmd_calibrate)

    v = sub.add_parser("serve", help="run the HTTP service (SQLite and in-process workers by default)")
    v.add_argument("--host", default="127.0.0.1")
    v.add_argument("--port", type=_int_from(1, 65535), default=8000)
    v.add_argument("--db", default=None, help="database URL (default: TILEPLAN_DATABASE_URL or SQLite in ./data)")
    v.add_argument("--workers", type=_int_from(1, MAX_JOBS), default=None, help="solver processes (default: cores)")
    v.add_argument("--allow-anonymous", action="store_true",
                   help="serve a non-loopback --host without TILEPLAN_TOKENS (anyone who reaches it may write)")
    v.set_defaults(func=cmd_serve)

    w = sub.add_parser("worker", help="run a durable job worker against PostgreSQL")
    w.add_argument("--db", default=None, help="PostgreSQL URL (default: TILEPLAN_DATABASE_URL)")
    w.add_argument("--concurrency", type=_int_from(1, MAX_JOBS), default=1)
    w.set_defaults(func=cmd_worker)
    return p


def _apply_tensor_bound() -> None:
    """The service's bound on one tensor of a model (settings.max_tensor_elements, TILEPLAN_MAX_TENSOR_ELEMENTS) is
    the CLI's too: one source, and a local user compiling a model with a larger weight (VGG's classifier) can raise
    it."""
    from tileplan.frontend import work
    from tileplan.frontend.onnx_bytes import set_max_tensor_elements
    from tileplan.settings import get_settings

    set_max_tensor_elements(get_settings().max_tensor_elements)
    work.set_limits(**work.of_settings(get_settings()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (2, said in one line) or --help (0)
        return int(exc.code or 0)
    try:
        _apply_tensor_bound()
        # a mapper named on the command line is checked before the model is read, not after (the default needs no
        # check, and a warm compile never imports the mappers: 0.27 s of Pyomo and the cost model)
        if getattr(args, "mapper", None) not in (None, "cosa"):
            from tileplan.mappers.base import get_mapper

            try:
                get_mapper(args.mapper)
            except InputError as exc:
                raise InputError(("mapper",), exc.msg) from None
        if getattr(args, "out", None) and args.command != "compile":  # compile's --out is a directory
            writable_file(args.out, "out")  # before the work, not after it
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
    except OSError as exc:  # a file the checks above could not foresee (a full disk, a vanished directory)
        where = f" {exc.filename}" if exc.filename else ""
        print(f"tileplan: error:{where}: {exc.strerror or exc}", file=sys.stderr)
        return 2


def entry() -> None:
    """The program's entry point (the `tileplan` command, `python -m tileplan.cli`): `main`, then the process
    exits without the garbage collector's last passes over everything the command left (`gc.freeze`: the
    interpreter's teardown otherwise traverses the whole heap, TVM's objects and the model's graph among it, only
    for the operating system to take the memory back; a cold `tileplan compile` of ResNet-50 or ViT-B/16 spent
    0.6-0.7 CPU s of its exit there, 0.1 s without). Exit handlers still run, and every file was closed and the
    output flushed by then. (In-process callers, tests among them, call `main`, which leaves the collector
    alone.)"""
    code = main()
    import gc

    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
