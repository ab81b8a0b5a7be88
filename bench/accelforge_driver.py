"""Runs AccelForge's mapper on one spec; executed by AccelForge's own Python (>= 3.12), not Tileplan's.

bench/accelforge.py writes the spec (arch + workload YAML, built from a Tileplan descriptor and layer) and
starts this script with AccelForge's interpreter, so Tileplan itself never imports AccelForge.
Reads JSON on stdin: {"spec": <YAML text>, "time_limit": <CPU seconds for the search>, "evaluate": <a mapping's
YAML, or null>, "search": <false to only evaluate>}.
Prints JSON on stdout: {"evaluated_latency": AccelForge's latency of the given mapping (when one is given),
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


def _evaluate(af, spec_text: str, mapping_text: str) -> dict:  # type: ignore[no-untyped-def]
    spec = _load(af, spec_text, mapping_text)
    spec.model.metrics = af.Metrics.LATENCY
    try:
        return {"evaluated_latency": float(spec.evaluate_mapping().data.iloc[0]["Total<SEP>latency"])}
    except Exception as exc:  # noqa: BLE001 - reported to the bench as data
        return {"evaluate_error": f"{type(exc).__name__}: {exc}"}


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
    head = _evaluate(af, job["spec"], job["evaluate"]) if job.get("evaluate") else {}
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
