"""The browser view: cached plans (`/`), one plan (`/ui/plans/{key}`), the requests that filled the cache and
their layers as a group (`/ui/requests`, `/ui/requests/{id}`), and the sign-in form (`/ui/login`); compiled
models (`/ui/compiles`, `/ui/compiles/{id}`) are in `compile_views.py`.

Jinja2 templates (`templates/`, autoescaped: every value from the store or the request is escaped) with charts
drawn on the server as inline SVG (`charts.py`); no scripts, and a Content-Security-Policy that forbids them and
anything loaded from elsewhere. The pages follow the token rule of the JSON API (`require_read`), answered as a
page that offers a sign-in form (POST /ui/login keeps an accepted token in an HttpOnly cookie that reads
accept; POST /ui/logout drops it). They are left out of the OpenAPI document: they are pages, not API.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import jinja2
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from tileplan import __version__
from tileplan.api.auth import COOKIE, require_read, token_accepted
from tileplan.api.errors import ApiError
from tileplan.dims import DIM_MEANING
from tileplan.loopnest import factors, loop_nest_text, used_dims
from tileplan.plan import BASELINE_MEANING, solver_version
from tileplan.web import charts
from tileplan.web.queries import SORTS, hardware_choices, plan_page, plan_surroundings, request_page

router = APIRouter(include_in_schema=False)
HERE = Path(__file__).resolve().parent

OPS = ("conv2d", "matmul", "dense")  # `dense` is stored as written when a plan was first asked for that way
DEFAULT_LIMIT, MAX_LIMIT = 50, 500  # as GET /plans
DASH = "\u2014"

# The pages forbid every script and anything loaded from elsewhere: even a value that escaped the templates'
# escaping could not run.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


# -- formatting (template filters) ------------------------------------------------------------------------------


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def fmt_int(x: Any) -> str:
    v = _num(x)
    return DASH if v is None else f"{round(v):,}"


def fmt_pct(x: Any) -> str:
    v = _num(x)
    return DASH if v is None else f"{v * 100:.1f}%"


def fmt_seconds(x: Any) -> str:
    v = _num(x)
    if v is None:
        return DASH
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def _scaled(x: Any, units: tuple[str, ...], step: float) -> str:
    v = _num(x)
    if v is None:
        return DASH
    i = 0
    while abs(v) >= step and i < len(units) - 1:
        v, i = v / step, i + 1
    text = f"{v:,.0f}" if i == 0 else f"{v:,.2f}".rstrip("0").rstrip(".")
    return f"{text} {units[i]}"


def fmt_energy(pj: Any) -> str:
    return _scaled(pj, ("pJ", "nJ", "\u00b5J", "mJ", "J"), 1000.0)


def fmt_bytes(b: Any) -> str:
    return _scaled(b, ("B", "KiB", "MiB", "GiB"), 1024.0)


def speedup_class(s: Any) -> str:
    v = _num(s)
    return "" if v is None else "good" if v > 1.0005 else "bad" if v < 0.9995 else ""


def fmt_when(ts: datetime | str | None) -> Markup:
    if ts is None:
        return Markup(DASH)
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    if ts.tzinfo is None:  # SQLite hands back naive datetimes; they were written in UTC
        ts = ts.replace(tzinfo=UTC)
    ts = ts.astimezone(UTC)
    return Markup('<time datetime="{}">{} UTC</time>').format(ts.isoformat(), ts.strftime("%Y-%m-%d %H:%M"))


def _pair(v: Any) -> tuple[Any, Any]:
    if isinstance(v, (list, tuple)) and len(v) == 2:
        return v[0], v[1]
    return v, v


def shape_summary(layer: dict[str, Any]) -> str:
    """`conv2d 64->256 1x1 s1 @56x56`, `matmul 128x768x768` (MxKxN): what a layer is, in one line."""
    op = str(layer.get("op", "?"))
    try:
        if op == "conv2d":
            cin, cout = layer["in_channels"], layer["out_channels"]
            kh, kw = _pair(layer.get("kernel", 1))
            sh, sw = _pair(layer.get("stride", 1))
            ph, pw = _pair(layer.get("padding", 0))
            dh, dw = _pair(layer.get("dilation", 1))
            groups, batch = layer.get("groups", 1), layer.get("batch", 1)
            text = f"conv2d {cin}->{cout} {kh}x{kw} s{sh if sh == sw else f'{sh}x{sw}'}"
            if (ph, pw) != (0, 0):
                text += f" p{ph if ph == pw else f'{ph}x{pw}'}"
            if (dh, dw) != (1, 1):
                text += f" d{dh if dh == dw else f'{dh}x{dw}'}"
            if groups not in (1, None):
                text += " dw" if groups == cin else f" g{groups}"
            text += f" @{layer['in_h']}x{layer['in_w']}"
            if batch not in (1, None):
                text += f" b{batch}"
            return text
        if op in ("matmul", "dense"):
            return f"{op} {layer['M']}x{layer['K']}x{layer['N']}"
    except (KeyError, TypeError, ValueError):
        pass
    dims = layer.get("dims")
    if isinstance(dims, dict):
        return f"{op} " + " ".join(f"{d}={v}" for d, v in dims.items() if v != 1)
    return op


def plan_url(key: str, name: str | None = None) -> str:
    return "/ui/plans/" + quote(key, safe="") + ("?" + urlencode({"name": name}) if name is not None else "")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(int=fmt_int, pct=fmt_pct, seconds=fmt_seconds, energy=fmt_energy, bytes=fmt_bytes,
                       when=fmt_when, speedup_class=speedup_class, shape=shape_summary)
    env.globals.update(version=__version__, solver_version=solver_version(), plan_url=plan_url, DASH=DASH)
    return env


TEMPLATES = Jinja2Templates(env=_environment())


def render(request: Request, template: str, status: int = 200, headers: Mapping[str, str] | None = None,
           **context: Any) -> HTMLResponse:
    return TEMPLATES.TemplateResponse(request, template, context, status_code=status,
                                      headers={**HEADERS, **(headers or {})})


def message(request: Request, title: str, text: str, status: int) -> HTMLResponse:
    return render(request, "message.html", status, title=title, text=text)


# -- the token rule, as pages ----------------------------------------------------------------------------------


def _sign_in(request: Request, title: str, why: str, status: int, then: str,
             headers: Mapping[str, str] | None = None) -> HTMLResponse:
    return render(request, "sign_in.html", status, headers, title=title, why=why, then=then)


async def _denied(request: Request) -> HTMLResponse | None:
    """The token rule of GET /plans, answered as a page (same status and WWW-Authenticate header)."""
    try:
        await require_read(request)
    except ApiError as exc:
        title = "Token required" if exc.status_code == 401 else "Token refused"
        then = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return _sign_in(request, title, exc.msg, exc.status_code, then, exc.headers)
    return None


def _local_path(then: str) -> str:
    """Where the sign-in form may send the visitor: a path of this server, never another site."""
    return then if then.startswith("/") and not then.startswith("//") and "\\" not in then else "/"


@router.post("/ui/login", include_in_schema=False)
async def login(request: Request) -> Response:
    """The sign-in form: an accepted token goes into an HttpOnly, SameSite=Strict cookie that reads accept."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token, then = (form.get("token") or [""])[0], _local_path((form.get("next") or ["/"])[0])
    if not token_accepted(request, token):
        return _sign_in(request, "Token refused", "this token is not accepted", 403, then)
    response = RedirectResponse(then, status_code=303)
    response.set_cookie(COOKIE, token.strip(), httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


@router.post("/ui/logout", include_in_schema=False)
async def logout() -> Response:
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


# -- query parameters -----------------------------------------------------------------------------------------


def _whole(value: str | None, name: str, default: int, lo: int, hi: int, problems: list[str]) -> int:
    if not value:
        return default
    try:
        n = int(value)
        if lo <= n <= hi:
            return n
    except ValueError:
        pass
    problems.append(f"{name}: a whole number from {lo} to {hi}")
    return default


class Paging:
    """Page `page` of `limit` rows, out of `count`, with links that keep the other query parameters."""

    def __init__(self, path: str, keep: dict[str, str], page: int, limit: int, count: int) -> None:
        self.path, self.keep, self.page, self.limit, self.count = path, keep, page, limit, count
        self.pages = max(1, math.ceil(count / limit))

    def url(self, **changes: Any) -> str:
        q = {**self.keep, **{k: str(v) for k, v in changes.items() if v is not None}}
        q = {k: v for k, v in q.items() if v and not (k == "page" and v == "1")}
        return self.path + ("?" + urlencode(q) if q else "")

    @property
    def prev(self) -> str | None:
        return self.url(page=self.page - 1) if self.page > 1 else None

    @property
    def next(self) -> str | None:
        return self.url(page=self.page + 1) if self.page < self.pages else None

    @property
    def first_row(self) -> int:
        return (self.page - 1) * self.limit + 1


# -- GET / ----------------------------------------------------------------------------------------------------


def _listing_row(row: Any) -> dict[str, Any]:
    try:
        layer, doc = json.loads(row.layer), json.loads(row.doc)
    except (TypeError, ValueError):
        layer, doc = {}, {}
    baseline = doc.get("baseline") or None
    speedup = _num(doc.get("speedup"))
    if speedup is None and row.baseline_cycles and row.cycles:
        speedup = row.baseline_cycles / row.cycles
    return {
        "key": row.key, "url": plan_url(row.key), "name": layer.get("name") or "", "layer": layer,
        "hardware": row.hardware, "mapper": doc.get("mapper", ""), "cycles": row.cycles,
        "baseline": row.baseline_cycles if baseline else None, "baseline_mapper": (baseline or {}).get("mapper"),
        "speedup": speedup if baseline else None, "utilization": (doc.get("metrics") or {}).get("utilization"),
        "bound": (doc.get("metrics") or {}).get("bound"), "solve": (doc.get("solver") or {}).get("seconds"),
        "cached_at": row.cached_at,
    }


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index(request: Request, hardware: str | None = None, op: str | None = None, limit: str | None = None,
                page: str | None = None, sort: str | None = None, order: str | None = None) -> HTMLResponse:
    """Cached plans with the filters of GET /plans, sortable by any column, a page at a time."""
    denied = await _denied(request)
    if denied is not None:
        return denied
    problems: list[str] = []
    hardware, op = hardware or None, op or None
    if hardware is not None and len(hardware) > 200:
        problems.append("hardware: at most 200 characters")
    if op is not None and len(op) > 16:
        problems.append("op: at most 16 characters")
    n = _whole(limit, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT, problems)
    p = _whole(page, "page", 1, 1, 10**9, problems)
    sort = sort or "cached"
    if sort not in SORTS:
        problems.append(f"sort: one of {', '.join(SORTS)}")
        sort = "cached"
    if order not in (None, "", "asc", "desc"):
        problems.append("order: asc or desc")
    if problems:
        return render(request, "message.html", 400, title="Bad request", problems=problems, text="")
    descending = SORTS[sort][2] if not order else order == "desc"

    store = request.app.state.store
    rows, matching, total = await run_in_threadpool(
        lambda: plan_page(store, hardware=hardware, op=op, sort=sort, descending=descending, offset=(p - 1) * n,
                          limit=n))
    catalog_names, registered, other = await run_in_threadpool(hardware_choices, store)
    if hardware and hardware not in set(catalog_names) | set(registered) | set(other):
        other.append(hardware)
    keep = {k: v for k, v in {"hardware": hardware, "op": op, "limit": str(n) if n != DEFAULT_LIMIT else None,
                              "sort": sort if sort != "cached" else None, "order": order or None}.items() if v}
    paging = Paging("/", keep, p, n, matching)
    columns = {}
    for name, (_, label, desc_first) in SORTS.items():
        current = name == sort
        flip = (not descending) if current else desc_first
        columns[name] = {"label": label, "current": current, "descending": descending,
                         "url": paging.url(sort=name, order="desc" if flip else "asc", page=None)}
    example = json.dumps({"hardware": "gemmini-16x16",
                          "layers": [{"name": "fc", "op": "matmul", "M": 64, "K": 256, "N": 256}]})
    title = "Cached plans" + (f" \u00b7 {hardware}" if hardware else "") + (f" \u00b7 {op}" if op else "")
    return render(
        request, "index.html", title=title, rows=[_listing_row(r) for r in rows], matching=matching, total=total,
        filtered=bool(hardware or op), hardware=hardware, op=op, limit=n, dialect=store.dialect,
        hardware_groups=[("catalog", catalog_names), ("registered", registered), ("other, in the cache", other)],
        ops=list(OPS) + ([op] if op and op not in OPS else []), columns=columns, paging=paging,
        example=example, base_url=str(request.base_url), page_past_end=p > paging.pages and matching > 0,
    )


# -- GET /ui/plans/{key} ---------------------------------------------------------------------------------------


def _keeps(descriptor: dict[str, Any] | None, names: list[str], dataflow: str | None) -> dict[str, list[str]]:
    """Which tensors each level keeps under the plan's dataflow (from the descriptor; {} if it does not match)."""
    if not descriptor:
        return {}
    levels = descriptor.get("memory_levels") or []
    if [lv.get("name") for lv in levels] != names:
        return {}
    keeps = {lv["name"]: list(lv.get("keeps") or []) for lv in levels}
    for df in (descriptor.get("pe_array") or {}).get("dataflows") or []:
        if df.get("name") == dataflow:
            for name, override in (df.get("levels") or {}).items():
                if name in keeps and (override or {}).get("keeps") is not None:
                    keeps[name] = list(override["keeps"])
    return keeps


def _levels(mapping: dict[str, Any], metrics: dict[str, Any], keeps: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Per level, outermost first: what it keeps, its loops, the tile at and below it, its traffic."""
    buffered = mapping.get("double_buffered") or {}
    traffic = {str(t.get("level")): t for t in metrics.get("levels") or [] if isinstance(t, dict)}
    running: dict[str, int] = {}
    out = []
    for lv in mapping.get("levels") or []:  # the tile a level holds spans every factor at and below it
        for d, f in factors(lv.get("temporal")) + factors(lv.get("spatial")):
            running[d] = running.get(d, 1) * f
        name = str(lv.get("name", "?"))
        t = traffic.get(name, {})
        out.append({
            "name": name, "keeps": " ".join(keeps.get(name, [])), "buffered": " ".join(buffered.get(name, [])),
            "temporal": " ".join(f"{d}{f}" for d, f in reversed(factors(lv.get("temporal")))),
            "spatial": " ".join(f"{d}{f}" for d, f in factors(lv.get("spatial"))),
            "tile": " ".join(f"{d}={v}" for d, v in running.items() if v != 1),
            "reads": t.get("reads_bytes"), "writes": t.get("writes_bytes"), "cycles": t.get("cycles"),
            "energy": t.get("energy_pj"),
        })
    return out[::-1]


def _factor_rows(mapping: dict[str, Any], dims: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Per dimension and level (outermost first): temporal factor T and spatial factor S, their product, the bound."""
    levels = list(reversed(mapping.get("levels") or []))
    padded = mapping.get("padded_dims") or {}
    names = list(dims)
    for lv in levels:
        for d, _ in factors(lv.get("temporal")) + factors(lv.get("spatial")):
            if d not in names:
                names.append(d)
    rows = []
    for d in names:
        cells, product, any_factor = [], 1, False
        for lv in levels:
            t = math.prod(f for x, f in factors(lv.get("temporal")) if x == d)
            s = math.prod(f for x, f in factors(lv.get("spatial")) if x == d)
            product *= t * s
            any_factor = any_factor or t * s > 1
            cells.append(" ".join(part for part in (f"T{t}" if t > 1 else "", f"S{s}" if s > 1 else "") if part))
        bound = dims.get(d)
        if any_factor or bound not in (None, 1):
            rows.append({"dim": d, "cells": cells, "product": product, "bound": bound, "padded": d in padded})
    return [str(lv.get("name", "?")) for lv in levels], rows


METRIC_ROWS = (
    ("Cycles", "cycles", fmt_int), ("Ideal cycles", "ideal_cycles", fmt_int),
    ("Compute cycles", "compute_cycles", fmt_int), ("Stall cycles", "stall_cycles", fmt_int),
    ("Energy", "energy_pj", fmt_energy), ("Utilisation", "utilization", fmt_pct),
    ("Spatial utilisation", "spatial_utilization", fmt_pct), ("DRAM traffic", "dram_bytes", fmt_bytes),
    ("MACs", "macs", fmt_int), ("Padded MACs", "padded_macs", fmt_int), ("Bound", "bound", None),
    ("Cost model", "model", None), ("Executor", "executor", None),
)
LOWER_IS_BETTER = {"cycles", "energy_pj", "dram_bytes", "stall_cycles", "compute_cycles"}


def _metric_rows(metrics: dict[str, Any], base: dict[str, Any] | None) -> list[dict[str, Any]]:
    rows = []
    for label, field, fmt in METRIC_ROWS:
        if field not in metrics and field not in (base or {}):
            continue
        show = fmt or (lambda v: DASH if v is None else str(v))
        row: dict[str, Any] = {"label": label, "plan": show(metrics.get(field))}
        if base is not None:
            row["base"] = show(base.get(field))
            a, b = _num(base.get(field)), _num(metrics.get(field))
            row["gain"] = a / b if field in LOWER_IS_BETTER and a is not None and b else None
        rows.append(row)
    return rows


def cycle_parts(metrics: dict[str, Any]) -> dict[str, float]:
    """A plan's cycles as compute + data movement beyond compute + stalls (they add up to its cycles): both cost
    models give cycles = max(compute, transfers) + stalls."""
    cycles = _num(metrics.get("cycles")) or 0.0
    stall = min(_num(metrics.get("stall_cycles")) or 0.0, cycles)
    compute = min(_num(metrics.get("compute_cycles")) or 0.0, cycles - stall)
    return {"compute": compute, "dma": max(0.0, cycles - stall - compute), "stall": stall}


def level_fill(descriptor: dict[str, Any] | None, layer: dict[str, Any], mapping: dict[str, Any]
               ) -> list[tuple[str, float, dict[str, float]]]:
    """Bytes each on-chip level holds per tensor (one instance; double-buffered tiles twice) and its capacity,
    outermost first, as the checker counts them; [] when the descriptor is unknown or does not fit the plan."""
    from tileplan.check import footprint
    from tileplan.hardware import HardwareDescriptor
    from tileplan.hardware.model import STORED
    from tileplan.mapping import Mapping
    from tileplan.problem import Problem
    from tileplan.workload import layer_fields, parse_layer

    if not descriptor:
        return []
    try:
        hw = HardwareDescriptor.model_validate(descriptor, context=STORED)
        m = Mapping.model_validate(mapping)
        arch = hw.resolve(m.dataflow)
        problem = Problem.from_layer(parse_layer(layer_fields(layer)))
        if [lv.name for lv in arch.levels] != [lv.name for lv in m.levels]:
            return []
        return [(lv.name, float(lv.capacity), footprint(problem, arch, m, i))
                for i, lv in reversed(list(enumerate(arch.levels))) if lv.capacity]
    except Exception:  # noqa: BLE001 - a view: a plan the core cannot read again shows no fill chart
        return []


def _hardware_view(name: str, descriptor: dict[str, Any] | None, served: str | None) -> dict[str, Any]:
    pe = (descriptor or {}).get("pe_array") or {}
    return {
        "name": name, "href": f"/hardware/{quote(served, safe='')}" if served else None,
        "descriptor": descriptor, "descriptor_name": (descriptor or {}).get("name"),
        "description": (descriptor or {}).get("description"),
        "array": f"{pe.get('rows', '?')} x {pe.get('cols', '?')}" if pe else None,
        "dataflows": ", ".join(str(d.get("name")) for d in pe.get("dataflows") or [] if isinstance(d, dict)),
        "levels": list(reversed((descriptor or {}).get("memory_levels") or [])),
    }


@router.get("/ui/plans/{key}", response_class=HTMLResponse, include_in_schema=False)
async def plan_page_view(request: Request, key: str, name: str | None = None) -> HTMLResponse:
    """One cached plan: what it is, charts of where its cycles go and how full its buffers are, its loop nest
    beside the baseline's, per-level tables, factors, solver and hardware."""
    denied = await _denied(request)
    if denied is not None:
        return denied
    store = request.app.state.store
    row = await run_in_threadpool(store.get_plan, key)
    if row is None:
        return render(request, "message.html", 404, title="Plan not found", key=key, text="")
    around = await run_in_threadpool(plan_surroundings, store, row.key, row.hardware)
    try:
        layer, doc = json.loads(row.layer), json.loads(row.doc)
    except (TypeError, ValueError):
        return render(request, "message.html", 500, title="Plan unreadable", key=key, text="")
    if name is not None:
        layer = {**layer, "name": name[:200]}
    mapping, metrics = doc.get("mapping") or {}, doc.get("metrics") or {}
    baseline = doc.get("baseline") or None
    bmap = (baseline or {}).get("mapping") if isinstance((baseline or {}).get("mapping"), dict) else None
    bmetrics = (baseline or {}).get("metrics") or {}
    mapper, bmapper = str(doc.get("mapper", "plan")), str((baseline or {}).get("mapper", "baseline"))
    keeps = _keeps(around.descriptor, [str(lv.get("name")) for lv in mapping.get("levels") or []],
                   mapping.get("dataflow"))
    bkeeps = _keeps(around.descriptor, [str(lv.get("name")) for lv in (bmap or {}).get("levels") or []],
                    (bmap or {}).get("dataflow")) if bmap else {}
    dims = layer.get("dims") if isinstance(layer.get("dims"), dict) else {}
    speedup = _num(doc.get("speedup")) or (row.baseline_cycles / row.cycles if baseline and row.cycles else None)

    breakdown = [(f"plan ({mapper})", cycle_parts(metrics))]
    fill_levels = [(f"{lv} \u00b7 plan", cap, held) for lv, cap, held in level_fill(around.descriptor, layer, mapping)]
    if bmap is not None:
        breakdown.append((f"baseline ({bmapper})", cycle_parts(bmetrics)))
        base_fill = level_fill(around.descriptor, layer, bmap)
        fill_levels = [x for pair in zip(fill_levels, [(f"{lv} \u00b7 baseline", c, h) for lv, c, h in base_fill])
                       for x in pair] or fill_levels
    level_names, factor_rows = _factor_rows(mapping, dims)
    k = quote(row.key, safe="")
    q = "?" + urlencode({"name": name}) if name is not None else ""
    links = [("Plan JSON", f"/plans/{k}{q}"), ("Timeloop mapping", f"/plans/{k}/timeloop{q}"),
             ("Timeloop bundle (arch + problem + mapping)", f"/plans/{k}/timeloop?" + urlencode(
                 {"bundle": "true", **({"name": name} if name is not None else {})})),
             *[(f"Module: {label}", f"/plans/{k}/module?" + urlencode(
                 {"format": fmt, **({"name": name} if name is not None else {})}))
               for fmt, label in (("c", "C"), ("tvmscript", "TVMScript"), ("tar", "tar"))]]
    solver = doc.get("solver") or {}
    shown = layer.get("name") or f"{layer.get('op') or 'layer'} {row.key[:8]}"  # unnamed: its op and key
    return render(
        request, "plan.html", title=f"{shown} on {row.hardware}",
        key=row.key, layer=layer, name=shown, hardware=row.hardware, mapper=mapper,
        baseline=baseline, baseline_mapper=bmapper, baseline_meaning=BASELINE_MEANING.get(bmapper, ""),
        cycles=row.cycles, baseline_cycles=row.baseline_cycles, speedup=speedup, mapping=mapping,
        cached_at=row.cached_at, links=links, module=around.module, notes=doc.get("notes") or [],
        metric_rows=_metric_rows(metrics, bmetrics if baseline else None),
        nest=loop_nest_text(mapping, keeps), base_nest=loop_nest_text(bmap, bkeeps) if bmap else None,
        legend=[(d, DIM_MEANING[d]) for d in used_dims(mapping, *([bmap] if bmap else []))],
        levels=_levels(mapping, metrics, keeps), base_levels=_levels(bmap, bmetrics, bkeeps) if bmap else None,
        factor_levels=level_names, factor_rows=factor_rows,
        padded=", ".join(f"{d}: {dims.get(d, '?')} \u2192 {v}" for d, v in (mapping.get("padded_dims") or {}).items()),
        buffered="; ".join(f"{lv}: {' '.join(ts)}" for lv, ts in (mapping.get("double_buffered") or {}).items() if ts),
        solver=[(k2, fmt_seconds(v) if k2 == "seconds" else (f"{v:.4g}" if isinstance(v, float) else
                                                            v if isinstance(v, str) else json.dumps(v)))
                for k2, v in solver.items()] + ([("solver version", doc["solver_version"])]
                                                if doc.get("solver_version") else []),
        layer_items=[(k2, v if isinstance(v, str) else json.dumps(v)) for k2, v in layer.items() if k2 != "dims"],
        dims_text=" ".join(f"{d}={v}" for d, v in dims.items()),
        hw=_hardware_view(row.hardware, around.descriptor, around.served),
        charts=[charts.cycle_breakdown(breakdown)] + ([charts.buffer_fill(fill_levels)] if fill_levels else []),
    )


# -- GET /ui/requests, /ui/requests/{id} -----------------------------------------------------------------------


@router.get("/ui/requests", response_class=HTMLResponse, include_in_schema=False)
async def requests_view(request: Request, hardware: str | None = None, kind: str | None = None,
                        page: str | None = None, limit: str | None = None) -> HTMLResponse:
    """The schedule requests that were solved here (each a job), newest first: whole models and layer lists."""
    denied = await _denied(request)
    if denied is not None:
        return denied
    problems: list[str] = []
    n = _whole(limit, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT, problems)
    p = _whole(page, "page", 1, 1, 10**9, problems)
    if kind not in (None, "", "models", "all"):
        problems.append("kind: models or all")
    if hardware is not None and len(hardware) > 200:
        problems.append("hardware: at most 200 characters")
    if problems:
        return render(request, "message.html", 400, title="Bad request", problems=problems, text="")
    store = request.app.state.store
    rows, count = await run_in_threadpool(
        lambda: request_page(store, hardware=hardware or None, models_only=kind == "models", offset=(p - 1) * n,
                             limit=n))
    keep = {k: v for k, v in {"hardware": hardware, "kind": kind if kind == "models" else None,
                              "limit": str(n) if n != DEFAULT_LIMIT else None}.items() if v}
    return render(request, "requests.html", title="Models" if kind == "models" else "Requests", rows=rows,
                  count=count, paging=Paging("/ui/requests", keep, p, n, count), kind=kind or "all",
                  hardware=hardware or "")


@router.get("/ui/requests/{job_id}", response_class=HTMLResponse, include_in_schema=False)
async def request_view(request: Request, job_id: str) -> HTMLResponse:
    """One request's layers as a group: per-layer cycles and speed-up charts, totals weighted by each layer's
    count, and every layer's plan."""
    denied = await _denied(request)
    if denied is not None:
        return denied
    store = request.app.state.store
    job = await run_in_threadpool(store.get_job, job_id) if len(job_id) <= 32 else None
    if job is None:
        return render(request, "message.html", 404, title="Request not found", key=job_id, text="")
    req = job.request
    keys: list[str] = list(req.get("keys") or [])
    rows = await run_in_threadpool(store.get_plans, list(dict.fromkeys(keys)))
    layers = []
    for i, key in enumerate(keys):
        echo = json.loads(req["echoes"][i]) if i < len(req.get("echoes") or []) else {}
        count = int((req.get("layers") or [{}] * len(keys))[i].get("count", 1) or 1)
        row = rows.get(key)
        name = echo.get("name") or f"layer {i}"
        entry: dict[str, Any] = {"i": i, "name": name, "layer": echo, "count": count, "key": key, "row": row,
                                 "url": plan_url(key, echo.get("name", "")) if row else None}
        if row is not None:
            doc = json.loads(row.doc)
            entry.update(cycles=row.cycles, baseline=row.baseline_cycles,
                         baseline_mapper=(doc.get("baseline") or {}).get("mapper"), mapper=doc.get("mapper"),
                         speedup=row.baseline_cycles / row.cycles if row.baseline_cycles and row.cycles else None,
                         bound=(doc.get("metrics") or {}).get("bound"))
        layers.append(entry)
    done = [x for x in layers if x["row"] is not None]
    mapper = str((req.get("options") or {}).get("mapper", "cosa"))
    bmapper = req.get("baseline_mapper") or next((x["baseline_mapper"] for x in done if x.get("baseline_mapper")), None)
    totals = {
        "cycles": sum(x["cycles"] * x["count"] for x in done),
        "baseline": sum(x["baseline"] * x["count"] for x in done) if done and all(x["baseline"] for x in done)
        else None,
    }
    totals["speedup"] = totals["baseline"] / totals["cycles"] if totals["baseline"] and totals["cycles"] else None
    group_charts = []
    if done:
        group_charts.append(charts.cycles_per_layer(
            [(x["name"], x["cycles"], x["baseline"], x["url"]) for x in done], mapper, bmapper))
        if bmapper and all(x["speedup"] for x in done):
            group_charts.append(charts.speedup_per_layer([(x["name"], x["speedup"], x["url"]) for x in done],
                                                         bmapper))
    seconds = (job.finished_at - job.created_at).total_seconds() if job.finished_at else None
    label = req.get("model") or (", ".join(x["name"] for x in layers[:3]) + (" \u2026" if len(layers) > 3 else ""))
    return render(request, "request.html", title=f"{label} on {req.get('hardware_name', job.hardware)}", job=job,
                  label=label, model=req.get("model"), hardware=req.get("hardware_name", job.hardware),
                  layers=layers, mapper=mapper, baseline_mapper=bmapper,
                  baseline_meaning=BASELINE_MEANING.get(bmapper or "", ""), totals=totals, charts=group_charts,
                  seconds=seconds, notes=req.get("notes") or [], errors=job.errors)


# -- GET /ui/hardware and /ui/health: the menu's pages (the JSON stays at /hardware and /healthz) ----------------


@router.get("/ui/hardware", response_class=HTMLResponse, include_in_schema=False)
async def hardware_page(request: Request) -> HTMLResponse:
    """The catalog and the registered descriptors, as GET /hardware lists them, with their arrays and levels."""
    denied = await _denied(request)
    if denied is not None:
        return denied
    from tileplan.hardware.catalog import catalog

    def rows() -> list[dict[str, Any]]:
        out = []
        docs = [(n, hw.model_dump(mode="json"), "catalog") for n, hw in sorted(catalog().items())]
        docs += [(n, d, "registered") for n, d in sorted(request.app.state.store.list_hardware().items())]
        for name, doc, source in docs:
            pe = doc.get("pe_array") or {}
            levels = [str(lv.get("name", "?")) for lv in doc.get("memory_levels") or []]
            out.append({"name": name, "source": source, "description": doc.get("description", ""),
                        "array": f"{pe.get('rows', '?')}\u00d7{pe.get('cols', '?')}" if pe else DASH,
                        "dataflows": ", ".join(str(d) for d in pe.get("dataflows") or []) or DASH,
                        "levels": " \u2192 ".join(levels) or DASH})
        return out

    return render(request, "hardware.html", title="Hardware", rows=await run_in_threadpool(rows))


@router.get("/ui/health", response_class=HTMLResponse, include_in_schema=False)
async def health_page(request: Request) -> HTMLResponse:
    """GET /healthz as a page: the service, its database and queue, the versions."""
    from tileplan.api.routes.system import healthz

    answer = Response()
    doc = await healthz(request, answer)
    return render(request, "health.html", answer.status_code or 200, title="Health", health=doc)
