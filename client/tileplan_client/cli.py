"""`tileplan-client`: the service from CI.

    tileplan-client schedule --hw gemmini-16x16 --workload layers.yaml --out plans.json

A progress bar on a terminal, quiet JSON otherwise. Exit codes: 0 ok, 1 service error (unreachable,
5xx, timed out, solver failure), 2 bad input (unreadable files, 4xx, infeasible layers), 3 a plan is
slower than its baseline (only with --fail-if-slower-than-baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tileplan_client.client import BadInput, JobFailed, ServiceError, TileplanClient
from tileplan_client.models import Job, ScheduleResult

OK, SERVICE_ERROR, BAD_INPUT, SLOWER = 0, 1, 2, 3


class InputProblem(Exception):
    pass


def load_layers(path: str) -> list[dict[str, Any]]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise InputProblem(f"--workload: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputProblem(f"--workload: {path} is not valid YAML{where}") from None
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


class Bar:
    """A one-line progress bar on stderr (terminals only)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = False

    def __call__(self, job: Job) -> None:
        if not self.enabled or not job.total:
            return
        width = 30
        filled = int(width * job.done / job.total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {job.done}/{job.total} layers  {job.status:8}")
        sys.stderr.flush()
        self.shown = True

    def end(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


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
    tty = sys.stderr.isatty() and not args.quiet
    bar = Bar(tty)
    try:
        result = client.schedule(
            hw, layers, model=model, options=options, wait=not tty, timeout=args.timeout, on_progress=bar
        )
    finally:
        bar.end()
    doc = result.raw
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    slower = [p for p in result.plans if p.slower_than_baseline]
    if sys.stdout.isatty() and not args.quiet:
        _print_table(result)
        if args.out:
            print(f"wrote {len(result.plans)} plans to {args.out}")
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


def _print_table(result: ScheduleResult) -> None:
    print(f"{'layer':32} {'cycles':>14} {'baseline':>14} {'speedup':>8} cached")
    for p in result.plans:
        base = f"{p.baseline.metrics.cycles:14.0f}" if p.baseline else f"{'-':>14}"
        sp = f"{p.speedup:8.2f}" if p.speedup else f"{'-':>8}"
        print(f"{(p.name or p.key[:12])[:32]:32} {p.metrics.cycles:14.0f} {base} {sp} {'yes' if p.cached else 'no'}")
    s = result.summary
    print(f"{s.layers} layers ({s.cached} cached, {s.solved} solved): {s.cycles:.0f} cycles"
          + (f", {s.speedup:.2f}x the baseline" if s.speedup else ""))


def cmd_job(args: argparse.Namespace, client: TileplanClient) -> int:
    print(json.dumps(client.job(args.id).raw))
    return OK


def cmd_hardware(args: argparse.Namespace, client: TileplanClient) -> int:
    print(json.dumps(client.hardware()))
    return OK


def cmd_health(args: argparse.Namespace, client: TileplanClient) -> int:
    print(json.dumps(client.health()))
    return OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tileplan-client", description="Talk to a Tileplan service.")
    p.add_argument("--url", default=os.environ.get("TILEPLAN_URL", "http://127.0.0.1:8000"),
                   help="service URL (default: TILEPLAN_URL or http://127.0.0.1:8000)")
    p.add_argument("--token", default=os.environ.get("TILEPLAN_TOKEN"), help="API token (default: TILEPLAN_TOKEN)")
    p.add_argument("--request-timeout", type=float, default=60.0, help="seconds per HTTP request")
    p.add_argument("--retries", type=int, default=3, help="retries of unreachable/overloaded service")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("schedule", help="plans for a workload")
    s.add_argument("--hw", required=True, help="hardware: catalog name, or a descriptor YAML file")
    s.add_argument("--workload", help="YAML: {layers: [...]} or a list of layers")
    s.add_argument("--model", help="ONNX model file: plan its convolutions and matrix products")
    s.add_argument("--out", help="write the plans (JSON) here")
    s.add_argument("--mapper", help="cosa | gemmini-auto | random | exhaustive")
    s.add_argument("--time-limit", type=float, default=None, help="solver seconds per layer")
    s.add_argument("--timeout", type=float, default=900.0, help="give up waiting after this many seconds")
    s.add_argument("--fail-if-slower-than-baseline", action="store_true",
                   help="exit 3 if any plan has more cycles than its baseline")
    s.add_argument("--quiet", action="store_true", help="no progress bar or table")
    s.set_defaults(func=cmd_schedule)

    j = sub.add_parser("job", help="a job's status")
    j.add_argument("id")
    j.set_defaults(func=cmd_job)
    sub.add_parser("hardware", help="list hardware").set_defaults(func=cmd_hardware)
    sub.add_parser("health", help="service health").set_defaults(func=cmd_health)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    try:
        with TileplanClient(args.url, args.token, timeout=args.request_timeout, retries=args.retries) as client:
            return int(args.func(args, client))
    except InputProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    except BadInput as exc:
        print(f"error: rejected (HTTP {exc.status}): {exc}", file=sys.stderr)
        return BAD_INPUT
    except JobFailed as exc:
        print(f"error: job {exc.job.id} failed: {exc}", file=sys.stderr)
        return BAD_INPUT if exc.input_fault else SERVICE_ERROR
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return SERVICE_ERROR


if __name__ == "__main__":
    sys.exit(main())
