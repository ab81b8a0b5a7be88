"""The browser view of whole-model compiles: the list (`/ui/compiles`) and one compile (`/ui/compiles/{id}`): per op
where it runs and why, its plan, emulated and modelled cycles and the speed-up over the hand-written library's
tiling, charted; the totals, what stayed on the host and why, the notes, and links to the JSON and the tar.
Same templates, charts, headers and token rule as the other pages (`views.py`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from tileplan.web import charts
from tileplan.web.views import DEFAULT_LIMIT, MAX_LIMIT, _denied, _whole, plan_url, render

router = APIRouter(include_in_schema=False)
STATUSES = ("queued", "running", "done", "failed")
LIBRARY = "gemmini-auto"  # whose tiling the summary's speed-ups compare with (Gemmini's hand-written library)
# ops a compile's page lists and charts (a 1.4 MB model of 40,000 nodes: a 7 MB page that held the API's event loop
# 3.9 s); GET /compiles/{id} has them all
MAX_SHOWN_OPS = 1000


def _row(c: Any) -> dict[str, Any]:
    t = (c.summary or {}).get("total", {})
    return {"id": c.id, "model": c.model_name, "hardware": c.hardware, "status": c.status,
            "ops_done": c.ops_done, "ops_total": c.ops_total, "created_at": c.created_at,
            "finished_at": c.finished_at, "ops": t.get("ops"), "accelerator_ops": t.get("accelerator_ops"),
            "host_ops": t.get("host_ops"), "cycles_emulated": t.get("cycles_emulated"),
            "speedup": t.get("speedup_model"), "error": (c.error or {}).get("msg")}


@router.get("/ui/compiles", response_class=HTMLResponse)
async def compiles_view(request: Request, hardware: str | None = None, status: str | None = None,
                        cursor: str | None = None, limit: str | None = None) -> HTMLResponse:
    """The models compiled here, newest first."""
    denied = await _denied(request)
    if denied is not None:
        return denied
    problems: list[str] = []
    n = _whole(limit, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT, problems)
    before = _whole(cursor, "cursor", 0, 1, 10**18, problems) if cursor else None
    if status not in (None, "", *STATUSES):
        problems.append(f"status: one of {', '.join(STATUSES)}")
    if hardware is not None and len(hardware) > 200:
        problems.append("hardware: at most 200 characters")
    if problems:
        return render(request, "message.html", 400, title="Bad request", problems=problems, text="")
    rows = await run_in_threadpool(request.app.state.store.list_compiles, hardware=hardware or None,
                                   status=status or None, limit=n, before=before)
    keep = {k: v for k, v in {"hardware": hardware, "status": status,
                              "limit": str(n) if n != DEFAULT_LIMIT else None}.items() if v}
    nxt = "/ui/compiles?" + urlencode({**keep, "cursor": rows[-1].seq}) if len(rows) == n else None
    first = "/ui/compiles" + ("?" + urlencode(keep) if keep else "") if before is not None else None
    return render(request, "compiles.html", title="Compiled models", rows=[_row(c) for c in rows],
                  hardware=hardware or "", status_filter=status or "", next_url=nxt, first_url=first)


@router.get("/ui/compiles/{compile_id}", response_class=HTMLResponse)
async def compile_view(request: Request, compile_id: str) -> HTMLResponse:
    """One compile: status and progress while it runs; once done, the network summary as tables and charts."""
    denied = await _denied(request)
    if denied is not None:
        return denied
    c = await request.app.state.compiler.get(compile_id) if len(compile_id) <= 64 else None
    if c is None:
        return render(request, "message.html", 404, title="Compile not found", key=compile_id, text="")
    ops, n_ops = await run_in_threadpool(request.app.state.store.compile_ops, c.id, MAX_SHOWN_OPS)
    return await run_in_threadpool(_compile_page, request, c, ops, n_ops)


def _compile_page(request: Request, c: Any, ops: list[dict[str, Any]], n_ops: int) -> HTMLResponse:
    """The page of compile `c` (built in a thread: pure Python, it lets the event loop run between its steps)."""
    summary = c.summary or {}
    notes = list(summary.get("notes", []))
    if n_ops > len(ops):
        notes.insert(0, f"this page shows the first {len(ops):,} of {n_ops:,} ops; GET /compiles/{c.id} lists "
                        "them all")
    fused = {o["name"] for o in ops if str(o.get("reason", "")).startswith("fused into ")}
    accel: list[dict[str, Any]] = []
    host: list[dict[str, Any]] = []
    for o in ops:
        if o["name"] in fused:
            continue
        entry = {**o, "url": plan_url(o["plan_key"]) if o.get("plan_key") else None}
        (accel if o["where"] == "accelerator" else host).append(entry)
    group = []
    timed = [o for o in accel if o.get("cycles_model") is not None]
    if timed:
        have_base = all(o.get("baseline_cycles_model") for o in timed)
        modelled = charts.cycles_per_layer(
            [(o["name"], float(o["cycles_model"]), o.get("baseline_cycles_model") if have_base else None, o["url"])
             for o in timed], "Tileplan's tiling", f"{LIBRARY}'s tiling" if have_base else None)
        modelled.title = "Modelled cycles per accelerator op"
        group.append(modelled)
        emulated = [o for o in timed if o.get("cycles_emulated")]
        if emulated:
            chart = charts.cycles_per_layer([(o["name"], float(o["cycles_emulated"]), None, o["url"])
                                             for o in emulated], "emulated", None)
            chart.kind, chart.title = "emulated", "Emulated cycles per accelerator op"
            chart.desc = "Cycles of each accelerator op in the compile-time run on Tileplan's Gemmini emulator"
            chart.legend = [("plan", "emulated (Tileplan's program)")]
            group.append(chart)
        if all(o.get("speedup") for o in timed):
            speedups = charts.speedup_per_layer([(o["name"], float(o["speedup"]), o["url"]) for o in timed], LIBRARY)
            speedups.title = f"Speed-up over {LIBRARY}'s tiling per accelerator op (modelled)"
            group.append(speedups)
    reasons: dict[str, list[str]] = {}
    for o in host:
        reasons.setdefault(str(o.get("reason", "")), []).append(o["name"])
    return render(request, "compile.html", title=f"{c.model_name} on {c.hardware}", c=c, total=summary.get("total", {}),
                  accel=accel, host=host, host_reasons=sorted(reasons.items(), key=lambda kv: -len(kv[1])),
                  fused=len(fused), charts=group, notes=notes, library=LIBRARY,
                  groups=summary.get("groups", []),
                  seconds=(c.finished_at - c.created_at).total_seconds() if c.finished_at else None)
