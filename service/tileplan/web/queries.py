"""Read-only queries of the browser view that the API does not need: sorted and counted plan listings, the
requests (jobs) a plan cache was filled by, and a plan's surroundings. Nothing here writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select

from tileplan.hardware.catalog import catalog
from tileplan.store import Store
from tileplan.store.models import JobRow, ModuleRow, PlanRow
from tileplan.store.repository import OP_ALIASES, CachedPlan

# sortable columns of the listing: name -> (SQL expression, label, default direction descending?)
SORTS: dict[str, tuple[Any, str, bool]] = {
    "cached": (PlanRow.seq, "Cached", True),
    "layer": (PlanRow.layer_name, "Layer", False),
    "hardware": (PlanRow.hardware, "Hardware", False),
    "mapper": (PlanRow.mapper, "Mapper", False),
    "cycles": (PlanRow.cycles, "Cycles", True),
    "baseline": (PlanRow.baseline_cycles, "Baseline cycles", True),
    "speedup": (PlanRow.baseline_cycles / PlanRow.cycles, "Speed-up", True),
    "solve": (PlanRow.solve_seconds, "Solve time", True),
}
_COLS = (PlanRow.key, PlanRow.hardware, PlanRow.layer, PlanRow.doc, PlanRow.cycles, PlanRow.energy_pj,
         PlanRow.baseline_cycles, PlanRow.seq, PlanRow.created_at)


def _filters(hardware: str | None, op: str | None) -> list[ColumnElement[bool]]:
    out = []
    if hardware:
        out.append(PlanRow.hardware == hardware)
    if op:
        out.append(PlanRow.op.in_(OP_ALIASES.get(op, (op,))))
    return out


def plan_page(store: Store, *, hardware: str | None, op: str | None, sort: str, descending: bool, offset: int,
              limit: int) -> tuple[list[CachedPlan], int, int]:
    """One page of cached plans in the asked order, the number matching the filters, and the number cached."""
    expr = SORTS[sort][0]
    where = _filters(hardware, op)
    order = [(expr.desc() if descending else expr.asc()).nulls_last(), PlanRow.seq.desc()]
    q = select(*_COLS).where(*where).order_by(*order).offset(offset).limit(limit)
    with store.engine.connect() as conn:
        rows = [CachedPlan(*r) for r in conn.execute(q).all()]
        matching = conn.execute(select(func.count()).select_from(PlanRow).where(*where)).scalar_one()
        total = matching if not where else conn.execute(select(func.count()).select_from(PlanRow)).scalar_one()
    return rows, int(matching), int(total)


def hardware_choices(store: Store) -> tuple[list[str], list[str], list[str]]:
    """(catalog names, registered names, other names found in the cache) for the hardware filter."""
    with store.engine.connect() as conn:
        cached = sorted(conn.execute(select(PlanRow.hardware).distinct()).scalars())
    names = sorted(catalog())
    registered = sorted(store.list_hardware())
    known = set(names) | set(registered)
    return names, registered, [h for h in cached if h not in known]


@dataclass(frozen=True)
class PlanSurroundings:
    descriptor: dict[str, Any] | None  # the descriptor the plan was solved for
    served: str | None  # where GET /hardware/{name} serves it, if anywhere
    module: tuple[str, str | None] | None  # (status, error) of its stored module; None: not built yet


def plan_surroundings(store: Store, key: str, hardware: str) -> PlanSurroundings:
    with store.engine.connect() as conn:
        module = conn.execute(select(ModuleRow.status, ModuleRow.error).where(ModuleRow.key == key)).first()
    descriptor = store.plan_descriptor(key)
    served = hardware if hardware in catalog() or store.get_hardware(hardware) is not None else None
    if descriptor is None and hardware in catalog():  # plans cached before descriptors were stored with them
        descriptor = catalog()[hardware].model_dump(mode="json")
    return PlanSurroundings(descriptor, served, (module[0], module[1]) if module else None)


@dataclass(frozen=True)
class RequestRow:
    """A schedule request that needed solving (a job): what it asked for and how far it got."""

    id: str
    status: str
    hardware: str
    total: int
    done: int
    failed: int
    created_at: datetime
    finished_at: datetime | None
    request: dict[str, Any]

    @property
    def model(self) -> str | None:
        """The ONNX model's name when the request was a whole model."""
        return self.request.get("model") or None

    @property
    def layer_names(self) -> list[str]:
        return [str(layer.get("name") or layer.get("op", "")) for layer in self.request.get("layers", [])]

    @property
    def layers(self) -> int:
        return len(self.request.get("layers", []))


def request_page(store: Store, *, hardware: str | None, models_only: bool, offset: int, limit: int
                 ) -> tuple[list[RequestRow], int]:
    """Requests newest first (optionally those of one hardware, or whole models only), and how many match."""
    where: list[ColumnElement[bool]] = []
    if hardware:
        where.append(JobRow.hardware == hardware)
    if models_only:
        where.append(JobRow.request.like('%"model":"%'))  # the request JSON is stored compact
    cols = (JobRow.id, JobRow.status, JobRow.hardware, JobRow.total, JobRow.done, JobRow.failed, JobRow.created_at,
            JobRow.finished_at, JobRow.request)
    q = select(*cols).where(*where).order_by(JobRow.created_at.desc(), JobRow.id).offset(offset).limit(limit)
    with store.engine.connect() as conn:
        rows = conn.execute(q).all()
        count = conn.execute(select(func.count()).select_from(JobRow).where(*where)).scalar_one()
    out = []
    for r in rows:
        try:
            req = json.loads(r[8])
        except (TypeError, ValueError):
            req = {}
        out.append(RequestRow(*r[:8], request=req if isinstance(req, dict) else {}))
    return out, int(count)
