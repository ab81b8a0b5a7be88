"""GET / and GET /ui/plans/{key}: the browser view of the plan cache (contracts.md "the browser view").

Server-rendered HTML with a little inline CSS and no scripts. The listing runs the same store query as
`GET /plans` (hardware and op filters, newest first, `seq` cursor) and the plan page the same lookup as
`GET /plans/{key}`; both follow the same token rule (`require_read`), answered as an HTML page that offers a
sign-in form (POST /ui/login keeps an accepted token in a cookie reads accept; POST /ui/logout drops it). Every value
that comes from the store or the request goes through `_e` (html.escape) before it reaches the page. The
routes are left out of the OpenAPI document: they are pages, not API.
"""

from __future__ import annotations

import html
import json
import math
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select

from tileplan import __version__
from tileplan.api.auth import COOKIE, require_read, token_accepted
from tileplan.api.errors import ApiError
from tileplan.hardware.catalog import catalog
from tileplan.plan import SOLVER_VERSION
from tileplan.store.models import ModuleRow, PlanRow

router = APIRouter(include_in_schema=False)

OPS = ("conv2d", "matmul", "dense")  # `dense` is stored as written when a plan was first asked for that way
DEFAULT_LIMIT, MAX_LIMIT = 50, 500  # as GET /plans
CURSOR = re.compile(r"^[0-9]{1,18}$")
DASH = "\u2014"

# The page forbids every script and anything loaded from elsewhere: even a value that escaped `_e` could not run.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

CSS = """
:root { color-scheme: light dark; --muted: #6b7280; --line: #d1d5db; --good: #15803d; --bad: #b91c1c;
        --head: #f3f4f6; }
@media (prefers-color-scheme: dark) { :root { --muted: #9ca3af; --line: #374151; --good: #4ade80; --bad: #f87171;
        --head: #1f2937; } }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 0 1.25rem 2rem; }
header { display: flex; align-items: baseline; gap: 1.5rem; border-bottom: 1px solid var(--line);
         padding: .75rem 0; margin-bottom: 1rem; flex-wrap: wrap; }
header .brand { font-weight: 700; font-size: 1.15rem; text-decoration: none; color: inherit; }
header nav a { margin-right: 1rem; }
h1 { font-size: 1.35rem; margin: .5rem 0; } h2 { font-size: 1.1rem; margin: 1.5rem 0 .5rem; }
a { color: #2563eb; } @media (prefers-color-scheme: dark) { a { color: #60a5fa; } }
.muted, .shape { color: var(--muted); } .shape { font-size: .85em; font-family: ui-monospace, monospace; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: .35rem .6rem; text-align: left; vertical-align: top; }
th { background: var(--head); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv { width: auto; } table.kv th { background: none; text-align: left; }
.good { color: var(--good); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; }
form.filters { display: flex; gap: .75rem; align-items: end; flex-wrap: wrap; margin-bottom: 1rem; }
form.filters label { display: flex; flex-direction: column; font-size: .85em; color: var(--muted); }
select, input, button { font: inherit; padding: .2rem .4rem; }
pre, code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .9em; }
pre { background: var(--head); padding: .75rem; overflow-x: auto; }
.pager { margin: 1rem 0; display: flex; gap: 1.5rem; }
.empty { padding: 2rem; border: 1px dashed var(--line); text-align: center; }
.links a { margin-right: 1rem; white-space: nowrap; }
footer { margin-top: 2rem; color: var(--muted); font-size: .85em; }
"""


# -- formatting --------------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    """Escaped text for element content and (double-quoted) attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def _int(x: Any) -> str:
    v = _num(x)
    return DASH if v is None else f"{round(v):,}"


def _pct(x: Any) -> str:
    v = _num(x)
    return DASH if v is None else f"{v * 100:.1f}%"


def _seconds(x: Any) -> str:
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


def _energy(pj: Any) -> str:
    return _scaled(pj, ("pJ", "nJ", "\u00b5J", "mJ", "J"), 1000.0)


def _bytes(b: Any) -> str:
    return _scaled(b, ("B", "KiB", "MiB", "GiB"), 1024.0)


def _ratio(num: Any, den: Any) -> float | None:
    a, b = _num(num), _num(den)
    return a / b if a is not None and b else None


def _speedup_cell(speedup: float | None) -> str:
    if speedup is None:
        return f'<td class="num muted">{DASH}</td>'
    cls = " good" if speedup > 1.0005 else (" bad" if speedup < 0.9995 else "")
    return f'<td class="num{cls}">{speedup:.2f}\u00d7</td>'


def _when(ts: datetime | None) -> str:
    if ts is None:
        return DASH
    if ts.tzinfo is None:  # SQLite hands back naive datetimes; they were written in UTC
        ts = ts.replace(tzinfo=UTC)
    ts = ts.astimezone(UTC)
    return f'<time datetime="{_e(ts.isoformat())}">{_e(ts.strftime("%Y-%m-%d %H:%M"))} UTC</time>'


def _pair(v: Any) -> tuple[Any, Any]:
    if isinstance(v, (list, tuple)) and len(v) == 2:
        return v[0], v[1]
    return v, v


def shape_summary(layer: dict[str, Any]) -> str:
    """`conv2d 64->256 1x1 s1 @56x56`, `matmul 128x768x768` (MxKxN): what a layer is, in one line (unescaped)."""
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


def _factors(factors: Any) -> list[tuple[str, int]]:
    out = []
    for item in factors or []:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            out.append((str(item[0]), int(item[1])))
    return out


# -- page frame --------------------------------------------------------------------------------------------


def _page(title: str, body: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    doc = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)} \u00b7 Tileplan</title>
<style>{CSS}</style></head>
<body>
<header><a class="brand" href="/">Tileplan</a>
<nav><a href="/">Plans</a><a href="/docs">API docs</a><a href="/hardware">Hardware</a><a href="/healthz">Health</a></nav>
</header>
<main>
{body}
</main>
<footer>Tileplan {_e(__version__)} \u00b7 solver {_e(SOLVER_VERSION)} \u00b7
JSON: <a href="/plans">/plans</a> \u00b7 <a href="/docs">OpenAPI</a></footer>
</body></html>
"""
    return HTMLResponse(doc, status_code=status, headers={**HEADERS, **(headers or {})})


def _message(title: str, text: str, status: int, headers: dict[str, str] | None = None) -> HTMLResponse:
    body = f'<h1>{_e(title)}</h1>\n<p>{text}</p>\n<p><a href="/">All cached plans</a></p>'
    return _page(title, body, status, headers)


def _sign_in(title: str, why: str, status: int, then: str, headers: dict[str, str] | None = None) -> HTMLResponse:
    """A page that explains the token rule and offers the sign-in form (back to `then` afterwards)."""
    body = (f"<h1>{_e(title)}</h1>\n<p>{_e(why)}. This server protects reads (<code>TILEPLAN_PROTECT_READS</code>); "
            "sign in with a token to browse, or send it to the JSON API, e.g. <code>curl -H 'Authorization: Bearer "
            "&lt;token&gt;' /plans</code>.</p>\n"
            '<form class="filters" method="post" action="/ui/login">'
            f'<input type="hidden" name="next" value="{_e(then)}">'
            '<label>Token <input type="password" name="token" autocomplete="current-password" required></label>'
            "<button>Sign in</button></form>")
    return _page(title, body, status, headers)


async def _denied(request: Request) -> HTMLResponse | None:
    """The token rule of GET /plans, answered as a page (same status and WWW-Authenticate header)."""
    try:
        await require_read(request)
    except ApiError as exc:
        title = "Token required" if exc.status_code == 401 else "Token refused"
        then = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return _sign_in(title, exc.msg, exc.status_code, then, exc.headers)
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
        return _sign_in("Token refused", "this token is not accepted", 403, then)
    response = RedirectResponse(then, status_code=303)
    response.set_cookie(COOKIE, token.strip(), httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


@router.post("/ui/logout", include_in_schema=False)
async def logout() -> Response:
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


# -- queries the repository does not have (read-only) -------------------------------------------------------


def _listing_extras(store: Any, keys: list[str]) -> tuple[dict[str, datetime], list[str], list[str], int]:
    """For one page: when each plan was cached, registered hardware, hardware names in the cache, plan count."""
    with store.engine.connect() as conn:
        created = dict(conn.execute(select(PlanRow.key, PlanRow.created_at).where(PlanRow.key.in_(keys))).all()) \
            if keys else {}
        cached_hw = sorted(conn.execute(select(PlanRow.hardware).distinct()).scalars())
    return created, sorted(store.list_hardware()), cached_hw, store.count_plans()


def _plan_extras(store: Any, key: str, hardware: str) -> tuple[datetime | None, dict[str, Any] | None, str | None,
                                                                 tuple[str, str | None] | None]:
    """For one plan: when it was cached, the descriptor it was solved for, where that descriptor is served
    (/hardware/{name}, if anywhere), and its module's status (None: not built yet)."""
    with store.engine.connect() as conn:
        created = conn.execute(select(PlanRow.created_at).where(PlanRow.key == key)).scalar()
        module = conn.execute(select(ModuleRow.status, ModuleRow.error).where(ModuleRow.key == key)).first()
    descriptor = store.plan_descriptor(key)
    served = hardware if hardware in catalog() or store.get_hardware(hardware) is not None else None
    if descriptor is None and hardware in catalog():  # plans cached before descriptors were stored with them
        descriptor = catalog()[hardware].model_dump(mode="json")
    return created, descriptor, served, (module[0], module[1]) if module else None


# -- GET / ---------------------------------------------------------------------------------------------------


def _plan_url(key: str) -> str:
    return "/ui/plans/" + quote(key, safe="")


def _select(name: str, label: str, current: str | None, groups: list[tuple[str, list[str]]], everything: str) -> str:
    opts = [f'<option value=""{" selected" if not current else ""}>{_e(everything)}</option>']
    for group, values in groups:
        if not values:
            continue
        inner = "".join(
            f'<option value="{_e(v)}"{" selected" if v == current else ""}>{_e(v)}</option>' for v in values
        )
        opts.append(f'<optgroup label="{_e(group)}">{inner}</optgroup>' if group else inner)
    return f'<label>{_e(label)}<select name="{_e(name)}">{"".join(opts)}</select></label>'


def _listing_row(row: Any, created: datetime | None) -> str:
    try:
        layer = json.loads(row.layer)
        doc = json.loads(row.doc)
    except (TypeError, ValueError):
        layer, doc = {}, {}
    metrics = doc.get("metrics") or {}
    baseline = doc.get("baseline") or None
    solver = doc.get("solver") or {}
    speedup = _num(doc.get("speedup"))
    if speedup is None and row.baseline_cycles:
        speedup = _ratio(row.baseline_cycles, row.cycles)
    url = _plan_url(row.key)
    name = layer.get("name") or "(unnamed)"
    if baseline:
        base_cell = (f'<td class="num">{_int(row.baseline_cycles)}'
                     f'<br><span class="shape">{_e(baseline.get("mapper", ""))}</span></td>')
    else:
        base_cell = f'<td class="num muted">{DASH}</td>'
    return (
        "<tr>"
        f'<td><a href="{_e(url)}">{_e(name)}</a><br><span class="shape">{_e(shape_summary(layer))}</span></td>'
        f"<td>{_e(row.hardware)}</td>"
        f"<td>{_e(doc.get('mapper', ''))}</td>"
        f'<td class="num">{_int(row.cycles)}</td>'
        f"{base_cell}"
        f"{_speedup_cell(speedup if baseline else None)}"
        f'<td class="num">{_pct(metrics.get("utilization"))}</td>'
        f"<td>{_e(metrics.get('bound', DASH))}</td>"
        f'<td class="num">{_seconds(solver.get("seconds"))}</td>'
        f'<td class="num">{_when(created)}</td>'
        f'<td><a href="{_e("/plans/" + quote(row.key, safe=""))}" title="The Plan as JSON">json</a></td>'
        "</tr>"
    )


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index(
    request: Request,
    hardware: str | None = None,
    op: str | None = None,
    limit: str | None = None,
    cursor: str | None = None,
) -> HTMLResponse:
    """Cached plans, newest first, with the filters and paging of GET /plans."""
    denied = await _denied(request)
    if denied is not None:
        return denied
    problems = []
    hardware, op, cursor = hardware or None, op or None, cursor or None
    if hardware is not None and len(hardware) > 200:
        problems.append("hardware: at most 200 characters")
    if op is not None and len(op) > 16:
        problems.append("op: at most 16 characters")
    try:
        n = DEFAULT_LIMIT if not limit else int(limit)
        if not 1 <= n <= MAX_LIMIT:
            raise ValueError
    except ValueError:
        problems.append(f"limit: a whole number from 1 to {MAX_LIMIT}")
        n = DEFAULT_LIMIT
    if cursor is not None and not CURSOR.match(cursor):
        problems.append("cursor: the page cursor is a number (use the \u201cnext page\u201d link)")
    if problems:
        items = "".join(f"<li>{_e(p)}</li>" for p in problems)
        return _page("Bad request", f'<h1>Bad request</h1><ul>{items}</ul><p><a href="/">All cached plans</a></p>',
                     400)

    store = request.app.state.store
    rows = await run_in_threadpool(
        store.list_plans, hardware=hardware, op=op, limit=n, before=int(cursor) if cursor else None
    )
    created, registered, cached_hw, total = await run_in_threadpool(
        _listing_extras, store, [r.key for r in rows]
    )

    catalog_names = sorted(catalog())
    known = set(catalog_names) | set(registered)
    other_hw = [h for h in cached_hw if h not in known]
    if hardware and hardware not in known and hardware not in other_hw:
        other_hw.append(hardware)
    other_ops = [op] if op and op not in OPS else []
    keep = {"hardware": hardware, "op": op, "limit": limit if limit and n != DEFAULT_LIMIT else None}
    keep = {k: v for k, v in keep.items() if v}
    form = (
        '<form class="filters" method="get" action="/">'
        + _select("hardware", "Hardware", hardware,
                  [("catalog", catalog_names), ("registered", registered), ("other, in the cache", other_hw)],
                  "all hardware")
        + _select("op", "Operator", op, [("", list(OPS) + other_ops)], "all operators")
        + f'<label>Per page<input type="number" name="limit" min="1" max="{MAX_LIMIT}" value="{n}" size="4"></label>'
        + '<button type="submit">Filter</button>'
        + (' <a href="/">clear</a>' if keep or cursor else "")
        + "</form>"
    )

    head = (f'<h1>Cached plans</h1><p class="muted">{total:,} plan{"s" if total != 1 else ""} in the cache'
            f" ({_e(store.dialect)}), newest first.</p>")
    if rows:
        table = (
            '<div class="scroll"><table><thead><tr>'
            "<th>Layer</th><th>Hardware</th><th>Mapper</th>"
            '<th class="num">Cycles</th><th class="num">Baseline cycles</th><th class="num">Speed-up</th>'
            '<th class="num">Utilisation</th><th>Bound</th><th class="num">Solve time</th>'
            '<th class="num">Cached</th><th></th>'
            "</tr></thead><tbody>"
            + "".join(_listing_row(r, created.get(r.key)) for r in rows)
            + "</tbody></table></div>"
        )
    elif total == 0:
        example = json.dumps({"hardware": "gemmini-16x16", "layers": [{"name": "fc", "op": "matmul", "M": 64,
                                                                      "K": 256, "N": 256}]})
        table = (
            '<div class="empty"><p><strong>No plans cached yet.</strong></p>'
            "<p>Plans appear here once layers are scheduled, e.g.</p>"
            f"<pre>curl -X POST {_e(str(request.base_url))}schedule -H 'content-type: application/json' \\\n"
            f"     -d '{_e(example)}'</pre>"
            '<p>or with <code>tileplan-client schedule</code>; see <a href="/docs">the API docs</a>.</p></div>'
        )
    elif cursor:
        table = '<div class="empty"><p>No more plans.</p></div>'
    else:
        table = '<div class="empty"><p>No cached plans match these filters. <a href="/">Show all</a></p></div>'

    pager = []
    if cursor:
        pager.append(f'<a href="{_e("/?" + urlencode(keep)) if keep else "/"}">\u00ab first page</a>')
    if len(rows) == n:  # as GET /plans: a full page may have a next one
        nxt = "/?" + urlencode({**keep, "cursor": str(rows[-1].seq)})
        pager.append(f'<a rel="next" href="{_e(nxt)}">next page \u00bb</a>')
    pager_html = f'<div class="pager">{"".join(pager)}</div>' if pager else ""
    title = "Cached plans" + (f" \u00b7 {hardware}" if hardware else "") + (f" \u00b7 {op}" if op else "")
    return _page(title, head + form + table + pager_html)


# -- GET /ui/plans/{key} -------------------------------------------------------------------------------------


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


def loop_nest_text(mapping: dict[str, Any], keeps: dict[str, list[str]] | None = None) -> str:
    """The mapping as Timeloop prints one: levels outermost first, each level's temporal loops outermost
    first and then the loops unrolled across its fan-out (unescaped)."""
    keeps = keeps or {}
    buffered = mapping.get("double_buffered") or {}
    lines, depth = [], 0
    for lv in reversed(mapping.get("levels") or []):
        name = str(lv.get("name", "?"))
        tags = []
        if name in keeps:
            tags.append("keeps " + (" ".join(keeps[name]) or "nothing"))
        if buffered.get(name):
            tags.append("double-buffered " + " ".join(buffered[name]))
        header = name + (f" [ {'; '.join(tags)} ]" if tags else "")
        lines += [header, "-" * len(header)]
        loops = [(d, f, "") for d, f in reversed(_factors(lv.get("temporal")))]
        loops += [(d, f, " (Spatial)") for d, f in _factors(lv.get("spatial"))]
        if not loops:
            lines.append("|" + "  " * depth + " (no loops)")
        for d, f, kind in loops:
            lines.append("|" + "  " * depth + f" for {d} in [0:{f}){kind}")
            depth += 1
        lines.append("")
    lines.append("|" + "  " * depth + " << compute >>")
    return "\n".join(lines)


def _levels_table(mapping: dict[str, Any], metrics: dict[str, Any], keeps: dict[str, list[str]]) -> str:
    levels = mapping.get("levels") or []
    buffered = mapping.get("double_buffered") or {}
    traffic = {str(t.get("level")): t for t in metrics.get("levels") or [] if isinstance(t, dict)}
    tiles, running = [], {}
    for lv in levels:  # the tile a level holds spans every factor at and below it (nest.py)
        for d, f in _factors(lv.get("temporal")) + _factors(lv.get("spatial")):
            running[d] = running.get(d, 1) * f
        tiles.append(dict(running))
    rows = []
    for lv, tile in reversed(list(zip(levels, tiles))):
        name = str(lv.get("name", "?"))
        t = traffic.get(name, {})
        temporal = " ".join(f"{d}{f}" for d, f in reversed(_factors(lv.get("temporal"))))
        spatial = " ".join(f"{d}{f}" for d, f in _factors(lv.get("spatial")))
        tile_text = " ".join(f"{d}={v}" for d, v in tile.items() if v != 1)
        rows.append(
            f"<tr><th>{_e(name)}</th><td>{_e(' '.join(keeps.get(name, [])) or DASH)}</td>"
            f"<td>{_e(' '.join(buffered.get(name, [])) or DASH)}</td>"
            f"<td><code>{_e(temporal or DASH)}</code></td><td><code>{_e(spatial or DASH)}</code></td>"
            f"<td><code>{_e(tile_text or DASH)}</code></td>"
            f'<td class="num">{_bytes(t.get("reads_bytes"))}</td><td class="num">{_bytes(t.get("writes_bytes"))}</td>'
            f'<td class="num">{_int(t.get("cycles"))}</td><td class="num">{_energy(t.get("energy_pj"))}</td></tr>'
        )
    return (
        '<div class="scroll"><table><thead><tr><th>Level</th><th>Keeps</th><th>Double-buffered</th>'
        "<th>Temporal (outer \u2192 inner)</th><th>Spatial</th><th>Tile (at and below)</th>"
        '<th class="num">Reads</th><th class="num">Writes</th><th class="num">Cycles</th><th class="num">Energy</th>'
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>"
    )


def _factor_table(mapping: dict[str, Any], dims: dict[str, Any]) -> str:
    """Per dimension and level (outermost first): temporal factor T and spatial factor S; their product and the
    layer's bound (padded bounds marked)."""
    levels = list(reversed(mapping.get("levels") or []))
    padded = mapping.get("padded_dims") or {}
    names = list(dims) if dims else []
    for lv in levels:
        for d, _ in _factors(lv.get("temporal")) + _factors(lv.get("spatial")):
            if d not in names:
                names.append(d)
    rows = []
    for d in names:
        cells, product, any_factor = [], 1, False
        for lv in levels:
            t = math.prod(f for x, f in _factors(lv.get("temporal")) if x == d)
            s = math.prod(f for x, f in _factors(lv.get("spatial")) if x == d)
            product *= t * s
            any_factor = any_factor or t * s > 1
            text = " ".join(part for part in (f"T{t}" if t > 1 else "", f"S{s}" if s > 1 else "") if part)
            cells.append(f'<td class="num">{_e(text) or "<span class=muted>1</span>"}</td>')
        bound = dims.get(d) if dims else None
        if not any_factor and bound in (None, 1):
            continue
        pad = f' <span class="muted">(padded from {_e(bound)})</span>' if d in padded else ""
        rows.append(f"<tr><th>{_e(d)}</th>{''.join(cells)}<td class=\"num\">{product}{pad}</td>"
                    f'<td class="num">{_e(bound if bound is not None else DASH)}</td></tr>')
    head = "".join(f'<th class="num">{_e(lv.get("name", "?"))}</th>' for lv in levels)
    return (
        f'<div class="scroll"><table><thead><tr><th>Dim</th>{head}<th class="num">Product</th>'
        f'<th class="num">Bound</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
        '<p class="muted">T: temporal factor, S: spatial factor (unrolled across the level\'s fan-out); levels '
        "outermost first.</p>"
    )


METRIC_ROWS = (
    ("Cycles", "cycles", _int), ("Ideal cycles", "ideal_cycles", _int), ("Compute cycles", "compute_cycles", _int),
    ("Stall cycles", "stall_cycles", _int), ("Energy", "energy_pj", _energy), ("Utilisation", "utilization", _pct),
    ("Spatial utilisation", "spatial_utilization", _pct), ("DRAM traffic", "dram_bytes", _bytes),
    ("MACs", "macs", _int), ("Padded MACs", "padded_macs", _int), ("Bound", "bound", None),
    ("Cost model", "model", None),
)
LOWER_IS_BETTER = {"cycles", "energy_pj", "dram_bytes", "stall_cycles", "compute_cycles"}


def _metrics_table(doc: dict[str, Any]) -> str:
    metrics = doc.get("metrics") or {}
    baseline = doc.get("baseline") or None
    bm = (baseline or {}).get("metrics") or {}
    head = f"<th>{_e(doc.get('mapper', 'plan'))}</th>"
    if baseline:
        head += (f"<th>baseline: {_e(baseline.get('mapper', '?'))}</th>"
                 '<th title="baseline / plan: above 1 the plan costs less">gain</th>')
    rows = []
    for label, field, fmt in METRIC_ROWS:
        if field not in metrics and field not in bm:
            continue
        show = fmt or (lambda v: _e(v if v is not None else DASH))
        row = f'<tr><th>{_e(label)}</th><td class="num">{show(metrics.get(field))}</td>'
        if baseline:
            row += f'<td class="num">{show(bm.get(field))}</td>'
            r = _ratio(bm.get(field), metrics.get(field)) if field in LOWER_IS_BETTER else None
            row += _speedup_cell(r) if r is not None else "<td></td>"
        rows.append(row + "</tr>")
    note = "" if baseline else '<p class="muted">This plan was solved without a baseline.</p>'
    return (f'<div class="scroll"><table class="kv"><thead><tr><th></th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>{note}')


def _kv(items: list[tuple[str, str]]) -> str:
    """A two-column table; values are HTML already."""
    return '<table class="kv"><tbody>' + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in items) + \
        "</tbody></table>"


def _layer_section(layer: dict[str, Any]) -> str:
    items = [(k, f"<code>{_e(json.dumps(v))}</code>" if not isinstance(v, str) else _e(v))
             for k, v in layer.items() if k != "dims"]
    dims = layer.get("dims")
    if isinstance(dims, dict):
        items.append(("canonical dims", "<code>" + _e(" ".join(f"{d}={v}" for d, v in dims.items())) + "</code>"))
    return _kv(items)


def _hardware_section(name: str, descriptor: dict[str, Any] | None, served: str | None) -> str:
    title = (f'<a href="/hardware/{_e(quote(served, safe=""))}">{_e(name)}</a>' if served else _e(name))
    if not descriptor:
        return f"<p>{title} <span class=muted>(descriptor not stored with this plan)</span></p>"
    pe = descriptor.get("pe_array") or {}
    items = [("name", title)]
    if descriptor.get("name") and descriptor.get("name") != name:
        items.append(("descriptor name", _e(descriptor["name"])))
    if descriptor.get("description"):
        items.append(("description", _e(descriptor["description"])))
    if pe:
        items.append(("PE array", _e(f"{pe.get('rows', '?')} x {pe.get('cols', '?')}")))
        flows = [str(d.get("name")) for d in pe.get("dataflows") or [] if isinstance(d, dict)]
        if flows:
            items.append(("dataflows", _e(", ".join(flows))))
    rows = []
    for lv in reversed(descriptor.get("memory_levels") or []):
        cap = lv.get("capacity")
        rows.append(
            f"<tr><th>{_e(lv.get('name', '?'))}</th>"
            f'<td class="num">{_bytes(cap) if cap is not None else "unbounded"}</td>'
            f'<td class="num">{_e(lv.get("instances", 1))}</td><td class="num">{_e(lv.get("word_bits", DASH))}</td>'
            f"<td>{_e(' '.join(lv.get('keeps') or []) or DASH)}</td>"
            f'<td class="num">{_e(lv.get("buffer_count", 1))}</td>'
            f'<td class="num">{_e(lv.get("bandwidth")) if lv.get("bandwidth") is not None else DASH}</td></tr>'
        )
    levels = (
        '<div class="scroll"><table><thead><tr><th>Memory level (outermost first)</th><th class="num">Capacity</th>'
        '<th class="num">Instances</th><th class="num">Word bits</th><th>Keeps</th><th class="num">Buffers</th>'
        '<th class="num">Bandwidth (B/cycle)</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table></div>"
    )
    return _kv(items) + levels


def _module_status(module: tuple[str, str | None] | None) -> str:
    if module is None:
        return "not built yet: the links below build it on demand (a few seconds)"
    status, error = module
    return "built" if status == "ok" else f"cannot be generated: {_e(error or 'unknown reason')}"


@router.get("/ui/plans/{key}", response_class=HTMLResponse, include_in_schema=False)
async def plan_page(request: Request, key: str) -> HTMLResponse:
    """One cached plan: layer, hardware, metrics against the baseline, loop nest, factors and solver."""
    denied = await _denied(request)
    if denied is not None:
        return denied
    store = request.app.state.store
    row = await run_in_threadpool(store.get_plan, key)
    if row is None:
        return _message("Plan not found", f"No plan with key <code>{_e(key)}</code> is in the cache "
                                          "(it may have been deleted, or solved by another solver version).", 404)
    created, descriptor, served, module = await run_in_threadpool(_plan_extras, store, row.key, row.hardware)
    try:
        layer = json.loads(row.layer)
        doc = json.loads(row.doc)
    except (TypeError, ValueError):
        return _message("Plan unreadable", f"The stored plan <code>{_e(key)}</code> is not valid JSON.", 500)
    mapping = doc.get("mapping") or {}
    metrics = doc.get("metrics") or {}
    baseline = doc.get("baseline") or None
    solver = doc.get("solver") or {}
    names = [str(lv.get("name")) for lv in mapping.get("levels") or []]
    keeps = _keeps(descriptor, names, mapping.get("dataflow"))
    k = quote(row.key, safe="")
    name = layer.get("name") or "(unnamed)"
    speedup = _num(doc.get("speedup")) or (_ratio(row.baseline_cycles, row.cycles) if baseline else None)

    links = (
        '<p class="links">'
        f'<a href="/plans/{_e(k)}">Plan JSON</a>'
        f'<a href="/plans/{_e(k)}/timeloop">Timeloop mapping</a>'
        f'<a href="/plans/{_e(k)}/timeloop?bundle=true">Timeloop bundle (arch + problem + mapping)</a>'
        f'<a href="/plans/{_e(k)}/module?format=c">Module: C</a>'
        f'<a href="/plans/{_e(k)}/module?format=tvmscript">Module: TVMScript</a>'
        f'<a href="/plans/{_e(k)}/module?format=tar">Module: tar</a>'
        "</p>"
        f'<p class="muted">Module: {_module_status(module)}.</p>'
    )
    summary = _kv([
        ("layer", f"{_e(name)} <span class=shape>{_e(shape_summary(layer))}</span>"),
        ("hardware", _e(row.hardware)),
        ("mapper", _e(doc.get("mapper", DASH))),
        ("cycles", _int(row.cycles) + (f" <span class=muted>vs {_int(row.baseline_cycles)} "
                                       f"({_e(baseline.get('mapper', 'baseline'))})</span>" if baseline else "")),
        ("speed-up", (f"{speedup:.2f}\u00d7" if speedup is not None else DASH)),
        ("dataflow", _e(mapping.get("dataflow") or DASH)),
        ("cached", _when(created)),
        ("key", f"<code>{_e(row.key)}</code>"),
    ])
    padded = mapping.get("padded_dims") or {}
    dims = layer.get("dims") if isinstance(layer.get("dims"), dict) else {}
    padded_text = ", ".join(f"{d}: {dims.get(d, '?')} \u2192 {v}" for d, v in padded.items()) or "none"
    buffered = mapping.get("double_buffered") or {}
    buffered_text = "; ".join(f"{lv}: {' '.join(ts)}" for lv, ts in buffered.items() if ts) or "none"
    mapping_kv = _kv([
        ("dataflow", _e(mapping.get("dataflow") or DASH)),
        ("padded dims", _e(padded_text)),
        ("double buffered", _e(buffered_text)),
    ])
    solver_items = [(k2, _seconds(v) if k2 == "seconds" else _e(_solver_value(v))) for k2, v in solver.items()]
    if doc.get("solver_version"):
        solver_items.append(("solver version", _e(doc["solver_version"])))
    baseline_html = ""
    if baseline and isinstance(baseline.get("mapping"), dict):
        bmap = baseline["mapping"]
        bkeeps = _keeps(descriptor, [str(lv.get("name")) for lv in bmap.get("levels") or []], bmap.get("dataflow"))
        baseline_html = (
            f"<details><summary>Baseline mapping ({_e(baseline.get('mapper', '?'))})</summary>"
            f"<pre>{_e(loop_nest_text(bmap, bkeeps))}</pre>"
            + _levels_table(bmap, baseline.get("metrics") or {}, bkeeps)
            + "</details>"
        )

    body = (
        f"<h1>{_e(name)} <span class=shape>{_e(shape_summary(layer))}</span></h1>"
        + links + summary
        + "<h2>Metrics against the baseline</h2>" + _metrics_table(doc)
        + "<h2>Loop nest</h2>"
        + '<p class="muted">Outermost level first, as Timeloop prints a mapping (the JSON lists levels innermost '
          "first); within a level, temporal loops outermost first, then the loops unrolled across its fan-out.</p>"
        + f"<pre>{_e(loop_nest_text(mapping, keeps))}</pre>"
        + _levels_table(mapping, metrics, keeps)
        + "<h2>Factors per dimension</h2>" + _factor_table(mapping, dims)
        + "<h2>Mapping</h2>" + mapping_kv
        + (f"<h2>Baseline</h2>{baseline_html}" if baseline_html else "")
        + "<h2>Solver</h2>" + (_kv(solver_items) if solver_items else "<p class=muted>no solver information</p>")
        + "<h2>Layer</h2>" + _layer_section(layer)
        + "<h2>Hardware</h2>" + _hardware_section(row.hardware, descriptor, served)
        + '<p><a href="/">\u00ab all cached plans</a></p>'
    )
    return _page(f"{name} on {row.hardware}", body)


def _solver_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return v if isinstance(v, str) else json.dumps(v)


__all__ = ["router", "shape_summary", "loop_nest_text"]
