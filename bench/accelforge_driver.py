"""Runs AccelForge's mapper on one spec; executed by AccelForge's own Python (>= 3.12), not Tileplan's.

bench/accelforge.py writes the spec (arch + workload YAML, built from a Tileplan descriptor and layer) and
starts this script with AccelForge's interpreter, so Tileplan itself never imports AccelForge.
Reads JSON on stdin: {"spec": <YAML text>, "time_limit": <CPU seconds for the search>, "search": <false: only
evaluate>, "evaluated" / "best": <a mapping's YAML to evaluate, or null>, "outer": <outermost memory's name>}.
Prints JSON on stdout: {"evaluated_latency" / "best_latency": AccelForge's latency of a given mapping,
"evaluated_outer_words" / "best_outer_words": its words moved at the outermost memory ("I read": ...),
"latency": AccelForge's latency of its best mapping, "nodes": the mapping's loop tree, outermost first, as
["storage", memory, [tensors]] / ["temporal", rank variable, tile shape] / ["spatial", rank variable, tile
shape, fan-out container], "cpu_s": this process's CPU seconds in the mapper}, or {"error": message}.
Only the standard library and accelforge are imported here.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path


def _nodes(mapping) -> list[list]:  # type: ignore[no-untyped-def]
    from accelforge.frontend.mapping.mapping import Spatial, Storage, Temporal

    out: list[list] = []
    for node in mapping.nodes:
        if isinstance(node, Storage):
            out.append(["storage", node.component, [str(t) for t in node.tensors]])
        elif isinstance(node, Spatial):  # Spatial before Temporal: both are loops
            out.append(["spatial", str(node.rank_variable), int(node.tile_shape), str(node.component)])
        elif isinstance(node, Temporal):
            out.append(["temporal", str(node.rank_variable), int(node.tile_shape)])
    return out


def _load(af, *texts: str):  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, text in enumerate(texts):
            paths.append(Path(tmp) / f"part{i}.yaml")
            paths[-1].write_text(text)
        return af.Spec.from_yaml(*map(str, paths))


def _evaluate(af, spec_text: str, mapping_text: str, prefix: str, outer: str) -> dict:  # type: ignore[no-untyped-def]
    """AccelForge's latency of a mapping and its word counts at the outermost memory (per tensor and action)."""
    spec = _load(af, spec_text, mapping_text)
    spec.model.metrics = af.Metrics.LATENCY | af.Metrics.ACTIONS
    try:
        row = spec.evaluate_mapping().data.iloc[0]
    except Exception as exc:  # noqa: BLE001 - reported to the bench as data
        return {f"{prefix}_error": f"{type(exc).__name__}: {exc}"}
    words = {}
    for key, value in row.items():
        parts = str(key).split("<SEP>")  # einsum, "action", memory, tensor, action
        if len(parts) == 5 and parts[1] == "action" and parts[2] == outer and value:
            words[f"{parts[3]} {parts[4]}"] = float(value)
    return {f"{prefix}_latency": float(row["Total<SEP>latency"]), f"{prefix}_outer_words": words}


def _cap_cpu(seconds: float, head: dict) -> None:
    """Give up after `seconds` of this process's CPU: print why and exit. Not AccelForge's own `time_limit`,
    which sets RLIMIT_CPU per pmapping job: in a single process that kills the whole process, which then
    returns nothing (and the limit is reset to infinity after each job)."""
    start = time.process_time()

    def watch() -> None:
        while time.process_time() - start < seconds:
            time.sleep(1.0)
        print(json.dumps(head | {"error": f"no mapping within the cap of {seconds:.0f} CPU seconds",
                                 "cpu_s": time.process_time() - start}), flush=True)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main() -> int:
    job = json.load(sys.stdin)
    import accelforge as af
    from accelforge.mapper.FFM.main import map_workload_to_arch

    af.set_n_parallel_jobs(1)  # one process: its CPU time is this process's, and the machine is shared
    head: dict = {}
    for prefix in ("evaluated", "best"):  # cosa's plan, AccelForge's best plan (from an earlier search)
        if job.get(prefix):
            head |= _evaluate(af, job["spec"], job[prefix], prefix, job["outer"])
    if not job.get("search", True):
        print(json.dumps(head))
        return 0
    spec = _load(af, job["spec"])
    spec.mapper.metrics = af.Metrics.LATENCY
    c0 = time.process_time()
    _cap_cpu(float(job["time_limit"]), head)
    try:
        # eval_in_detail=False: the detailed pass renders an SVG through graphviz, which is not needed here
        found = map_workload_to_arch(spec, print_progress=False, eval_in_detail=False)
    except Exception as exc:  # noqa: BLE001 - any failure is reported to the bench as data
        print(json.dumps(head | {"error": f"{type(exc).__name__}: {exc}", "cpu_s": time.process_time() - c0}))
        return 0
    cpu = time.process_time() - c0
    if len(found.data) == 0:
        print(json.dumps(head | {"error": "no mapping found", "cpu_s": cpu}))
        return 0
    best = found.data.sort_values("Total<SEP>latency").iloc[0]
    print(json.dumps(head | {
        "latency": float(best["Total<SEP>latency"]),
        "nodes": _nodes(best["Total<SEP>mapping"]()),
        "cpu_s": cpu,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
