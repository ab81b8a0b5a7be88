"""cosa's plans and solve times from another release of Tileplan, for `bench/mapper.py --against REV`.

`bench/mapper.py` exports REV's `service/` and `hw_catalog/` (`git archive`) into a temporary directory and runs
this script in a subprocess with that tree first on the path, so the reference is measured on the same machine in
the same run; it runs this script on the current tree too, so both sides are timed alike (a process doing nothing
but cosa).
This script therefore uses only the long-stable entry points (catalog, workload loader, `get_mapper("cosa")`,
`MapperOptions`) and prints, per network and layer, cosa's mapping (JSON) with its wall and CPU seconds. The
caller re-scores those mappings under the current cost model, so a model change between the releases moves
both sides alike: the comparison is of plans, not of models.

Run: python bench/mapper_release.py SERVICE_DIR WORKLOAD.yaml... --hardware NAME... --latency-only NAME...
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("service", help="the release's service/ directory (holds the package tileplan)")
    ap.add_argument("workloads", nargs="+")
    ap.add_argument("--hardware", nargs="+", required=True)
    ap.add_argument("--latency-only", nargs="*", default=[], help="hardware planned with a latency-only objective")
    ap.add_argument("--time-limit", type=float, default=10.0)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.service).resolve()))

    from tileplan.hardware.catalog import get_hardware
    from tileplan.mappers.base import MapperOptions, Objective, get_mapper
    from tileplan.problem import Problem
    from tileplan.workload import load_workload

    out: dict[str, dict] = {}
    for hw_name in args.hardware:
        hw = get_hardware(hw_name)
        objective = Objective(latency=1, energy=0, memory_utilization=0) if hw_name in args.latency_only else Objective()
        for wl in args.workloads:
            _, layers = load_workload(Path(wl))
            per_layer = out.setdefault(f"{Path(wl).stem} on {hw_name}", {})
            for layer in layers:
                problem = Problem.from_layer(layer)
                t0, c0 = time.perf_counter(), time.process_time()
                res = get_mapper("cosa").map(problem, hw, MapperOptions(time_limit_s=args.time_limit, objective=objective))
                per_layer[layer.name] = {
                    "seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                    "mapping": res.mapping.model_dump(mode="json"),
                }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
