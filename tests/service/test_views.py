"""The browser view (GET / and GET /ui/plans/{key}) against the app in-process (SQLite, local solver pool)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from tileplan.api.app import create_app
from tileplan.hardware.catalog import catalog
from tileplan.settings import Settings

CONV = {"name": "view_conv", "op": "conv2d", "in_channels": 16, "out_channels": 32, "in_h": 8, "in_w": 8,
        "kernel": 3, "padding": 1}
FC = {"name": "view_fc", "op": "matmul", "M": 16, "K": 64, "N": 32}
EVIL = {"name": "<script>alert('x')</script>", "op": "matmul", "M": 8, "K": 32, "N": 16}
NEXT = re.compile(r'<a rel="next" href="([^"]+)"')
PLAN_LINK = re.compile(r'href="/ui/plans/([0-9a-f]{64})"')


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data = tmp_path_factory.mktemp("views")
    app = create_app(Settings(data_dir=data, solver_processes=1, tokens=["s3cret"]))  # tokens guard writes only
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def plans(client: TestClient) -> dict[str, dict]:
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [CONV, FC, EVIL]},
                    headers={"authorization": "Bearer s3cret"})
    assert r.status_code == 200, r.text
    out = {p["layer"]["name"]: p for p in r.json()["plans"]}
    assert len({p["key"] for p in out.values()}) == 3
    return out


def page(client: TestClient, url: str, status: int = 200, **kw: object) -> str:
    r = client.get(url, **kw)  # type: ignore[arg-type]
    assert r.status_code == status, r.text[:2000]
    assert r.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in r.headers["content-security-policy"]
    assert "Traceback" not in r.text
    return r.text


def cycles(x: float) -> str:
    return f"{round(x):,}"


def test_index_lists_the_cached_plans_newest_first(client: TestClient, plans: dict[str, dict]) -> None:
    text = page(client, "/")
    for layer in (CONV, FC):
        plan = plans[layer["name"]]
        key = plan["key"]
        assert f">{layer['name']}</a>" in text
        assert f'href="/ui/plans/{key}"' in text and f'href="/plans/{key}"' in text
        assert cycles(plan["metrics"]["cycles"]) in text
        assert cycles(plan["baseline"]["metrics"]["cycles"]) in text
    assert "conv2d 16-&gt;32 3x3 s1 p1 @8x8" in text
    assert "matmul 16x64x32" in text
    assert "3 plans in the cache" in text
    # the same rows, in the same order, as GET /plans
    listed = [p["key"] for p in client.get("/plans").json()["plans"]]
    assert PLAN_LINK.findall(text) == listed
    for href in ('href="/docs"', 'href="/ui/hardware"', 'href="/ui/health"'):
        assert href in text
    for name in catalog():
        assert f'<option value="{name}">' in text
    assert NEXT.search(text) is None  # 3 plans fit one page of 50


def test_filters(client: TestClient, plans: dict[str, dict]) -> None:
    matmul = page(client, "/?op=matmul")
    assert "view_fc" in matmul and "view_conv" not in matmul
    assert set(PLAN_LINK.findall(matmul)) == {plans["view_fc"]["key"], plans[EVIL["name"]]["key"]}
    assert '<option value="matmul" selected>' in matmul

    conv = page(client, "/?hardware=gemmini-16x16&op=conv2d")
    assert PLAN_LINK.findall(conv) == [plans["view_conv"]["key"]]
    assert '<option value="gemmini-16x16" selected>' in conv

    none = page(client, "/?hardware=simba")
    assert PLAN_LINK.findall(none) == [] and "No cached plans match these filters" in none
    assert page(client, "/?hardware=&op=") .count('href="/ui/plans/') == 3  # the form's "all" choice


def test_pagination_pages_through_in_order(client: TestClient, plans: dict[str, dict]) -> None:
    seen: list[str] = []
    url: str | None = "/?limit=1"
    for _ in range(10):
        text = page(client, url)
        keys = PLAN_LINK.findall(text)
        assert len(keys) == 1
        seen += keys
        m = NEXT.search(text)
        if m is None:
            assert "page 3 of 3" in text
            break
        url = html.unescape(m.group(1))
        assert "limit=1" in url and "page=" in url
    assert seen == [p["key"] for p in client.get("/plans").json()["plans"]]
    assert len(seen) == 3
    assert "No more plans" in page(client, "/?limit=1&page=9")

    first = page(client, "/?op=matmul&limit=1")
    nxt = html.unescape(NEXT.search(first).group(1))  # type: ignore[union-attr]
    assert "op=matmul" in nxt
    second = page(client, nxt)
    assert PLAN_LINK.findall(first) + PLAN_LINK.findall(second) == [
        p["key"] for p in client.get("/plans", params={"op": "matmul"}).json()["plans"]
    ]
    prev = html.unescape(re.search(r'<a rel="prev" href="([^"]+)"', second).group(1))  # type: ignore[union-attr]
    assert PLAN_LINK.findall(page(client, prev)) == PLAN_LINK.findall(first)
    assert "2 of 3 plans match these filters" in second  # the count follows the filter


def test_sorting_by_a_column(client: TestClient, plans: dict[str, dict]) -> None:
    by_cycles = sorted(plans.values(), key=lambda p: p["metrics"]["cycles"])
    assert PLAN_LINK.findall(page(client, "/?sort=cycles&order=asc")) == [p["key"] for p in by_cycles]
    assert PLAN_LINK.findall(page(client, "/?sort=cycles")) == [p["key"] for p in by_cycles[::-1]]
    by_speedup = sorted(plans.values(), key=lambda p: (-p["speedup"], -1))
    got = PLAN_LINK.findall(page(client, "/?sort=speedup"))
    assert [plans_by_key(plans)[k]["speedup"] for k in got] == [p["speedup"] for p in by_speedup]
    text = page(client, "/?sort=layer&order=asc")
    assert 'aria-sort="ascending"' in text and "Layer \u25b2" in text
    # every sortable header links to its sort, keeping the filters
    assert 'href="/?op=matmul&amp;sort=cycles&amp;order=desc"' in page(client, "/?op=matmul")
    assert "sort: one of" in page(client, "/?sort=colour", 400)


def plans_by_key(plans: dict[str, dict]) -> dict[str, dict]:
    return {p["key"]: p for p in plans.values()}


def test_plan_page(client: TestClient, plans: dict[str, dict]) -> None:
    plan = plans["view_conv"]
    key = plan["key"]
    text = page(client, f"/ui/plans/{key}")
    assert "view_conv" in text and "conv2d 16-&gt;32 3x3 s1 p1 @8x8" in text
    levels = [lv["name"] for lv in plan["mapping"]["levels"]]
    assert levels == [lv.name for lv in catalog()["gemmini-16x16"].memory_levels]
    for name in levels:
        assert f"<th>{name}</th>" in text
    assert cycles(plan["metrics"]["cycles"]) in text
    assert cycles(plan["baseline"]["metrics"]["cycles"]) in text
    assert cycles(plan["metrics"]["ideal_cycles"]) in text
    assert plan["mapping"]["dataflow"] in text
    for href in (f"/plans/{key}", f"/plans/{key}/timeloop", f"/plans/{key}/module?format=c",
                 f"/plans/{key}/module?format=tvmscript", f"/plans/{key}/module?format=tar"):
        assert f'href="{html.escape(href)}"' in text

    # the loop nest: outermost level first, every factor of the plan as a loop; the baseline's beside it
    nest = html.unescape(re.search(r'<pre class="nest" id="nest-plan">(.*?)</pre>', text, re.S).group(1))  # type: ignore[union-attr]
    headers = [line.strip().split("  [")[0] for line in nest.splitlines()
               if line.strip() and not line.strip().startswith(("|", "<<", "padded"))]
    assert headers == levels[::-1]
    for lv in plan["mapping"]["levels"]:
        for d, f in lv["temporal"]:
            assert f == 1 or f"| for {d} in [0:{f})" in nest
        for d, f in lv["spatial"]:
            assert f == 1 or f"| par-for {d} in [0:{f})" in nest
    for tensors in plan["mapping"]["double_buffered"].values():
        assert f"double-buffered {' '.join(tensors)}" in nest
    assert 'id="nest-baseline"' in text and f"Baseline ({plan['baseline']['mapper']})" in text
    legend = dict(re.findall(r"<dt>(\w)</dt><dd>([^<]+)</dd>", text))
    assert legend["K"] == "output channels (matmul N)" and legend["R"] == "filter rows"
    # charts, drawn on the server: where the cycles go, and how full each buffer is
    for kind in ("breakdown", "fill"):
        assert f'data-chart="{kind}"' in text
    assert '<rect class="compute"' in text and '<svg xmlns="http://www.w3.org/2000/svg" role="img"' in text
    assert "over the baseline, gemmini-auto: Gemmini&#39;s hand-written tiling" in text


def test_unknown_plan_is_an_html_404(client: TestClient) -> None:
    text = page(client, "/ui/plans/" + "0" * 64, 404)
    assert "Plan not found" in text
    text = page(client, "/ui/plans/%3Cb%3Ebold", 404)
    assert "<b>bold" not in text and "&lt;b&gt;bold" in text


def test_markup_in_a_layer_name_is_escaped(client: TestClient, plans: dict[str, dict]) -> None:
    key = plans[EVIL["name"]]["key"]
    for url in ("/", f"/ui/plans/{key}"):
        text = page(client, url)
        assert "<script" not in text.lower()
        assert str(escape(EVIL["name"])) in text  # &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;


def test_bad_query_is_an_html_400(client: TestClient) -> None:
    assert "page" in page(client, "/?page=abc", 400)
    assert "page" in page(client, "/?page=0", 400)
    assert "limit" in page(client, "/?limit=0", 400)
    assert "order" in page(client, "/?order=up", 400)
    assert "kind" in page(client, "/ui/requests?kind=x", 400)
    assert "limit" in page(client, "/?limit=many", 400)


def test_requests_and_models_as_groups(client: TestClient, plans: dict[str, dict]) -> None:
    text = page(client, "/ui/requests")
    (job,) = re.findall(r'href="/ui/requests/([0-9a-f]{32})"', text)  # the one request that solved the three plans
    assert "1 request solved here" in text
    group = page(client, f"/ui/requests/{job}")
    for kind in ("cycles", "speedup"):
        assert f'data-chart="{kind}"' in group
    for name, plan in plans.items():
        assert str(escape(name)) in group and cycles(plan["metrics"]["cycles"]) in group
    # each layer links to its plan under the name the request gave it
    assert f'href="/ui/plans/{plans["view_fc"]["key"]}?name=view_fc"' in group
    named = page(client, f"/ui/plans/{plans['view_fc']['key']}?name=other_name")
    assert "other_name" in named and "module?format=c&amp;name=other_name" in named
    assert "No model requests yet" in page(client, "/ui/requests?kind=models")
    page(client, "/ui/requests/" + "f" * 32, 404)


def test_views_are_not_in_the_openapi_document(client: TestClient) -> None:
    paths = set(client.get("/openapi.json").json()["paths"])
    assert "/plans" in paths
    assert "/" not in paths and not any(p.startswith("/ui") for p in paths)


def test_empty_cache(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(data_dir=tmp_path, solver_processes=1))) as c:
        text = page(c, "/")
        assert "No plans cached yet" in text and PLAN_LINK.findall(text) == []


def test_views_need_a_token_when_reads_are_protected(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, solver_processes=1, tokens=["t1"], protect_reads=True))
    with TestClient(app) as c:
        r = c.get("/")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.headers["content-type"].startswith("text/html") and "Token required" in r.text
        assert c.get("/ui/plans/" + "0" * 64).status_code == 401
        assert c.get("/", headers={"authorization": "Bearer nope"}).status_code == 403
        ok = {"authorization": "Bearer t1"}
        assert "No plans cached yet" in page(c, "/", headers=ok)
        page(c, "/ui/plans/" + "0" * 64, 404, headers=ok)


def test_browser_signs_in_with_the_token_when_reads_are_protected(tmp_path: Path) -> None:
    """A browser cannot send a bearer header: the 401 page offers a form; POST /ui/login with an accepted token
    sets an HttpOnly, SameSite=Strict cookie that the views and GET endpoints accept; a refused token changes
    nothing; writes still need the header (a cookie would let other sites' forms write); logout forgets it."""
    app = create_app(Settings(data_dir=tmp_path, solver_processes=1, tokens=["t1"], protect_reads=True))
    with TestClient(app) as c:
        r = c.get("/")
        assert r.status_code == 401 and 'action="/ui/login"' in r.text and 'name="token"' in r.text
        bad = c.post("/ui/login", data={"token": "nope", "next": "/"}, follow_redirects=False)
        assert bad.status_code == 403 and "set-cookie" not in bad.headers and "Token refused" in bad.text
        ok = c.post("/ui/login", data={"token": "t1", "next": "/ui/plans/" + "0" * 64}, follow_redirects=False)
        assert ok.status_code == 303 and ok.headers["location"] == "/ui/plans/" + "0" * 64
        cookie = ok.headers["set-cookie"]
        assert "tileplan_token=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert "No plans cached yet" in page(c, "/")  # the client kept the cookie
        assert c.get("/plans").status_code == 200
        r = c.post("/hardware", json=dict(catalog()["gemmini-16x16"].model_dump(mode="json"), name="x"))
        assert r.status_code == 401  # writes: header only
        # the login form only sends a visitor to a page of this server
        elsewhere = c.post("/ui/login", data={"token": "t1", "next": "https://evil.example/"}, follow_redirects=False)
        assert elsewhere.status_code == 303 and elsewhere.headers["location"] == "/"
        out = c.post("/ui/logout", follow_redirects=False)
        assert out.status_code == 303 and 'tileplan_token=""' in out.headers["set-cookie"].replace("tileplan_token=;", 'tileplan_token="";')
        c.cookies.clear()
        assert c.get("/").status_code == 401


def test_views_on_postgres(fresh_pg: str, tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, database_url=fresh_pg, solver_processes=1))
    with TestClient(app) as c:
        assert "No plans cached yet" in page(c, "/")
        plan = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [FC]}).json()["plans"][0]
        text = page(c, "/")
        assert PLAN_LINK.findall(text) == [plan["key"]] and "(postgresql)" in text
        assert re.search(r'<time datetime="[0-9-]+T[0-9:.]+\+00:00">', text)
        detail = page(c, f"/ui/plans/{plan['key']}")
        assert "view_fc" in detail and cycles(plan["metrics"]["cycles"]) in detail


def test_api_docs_are_served_offline(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200 and "script-src 'self'" in r.headers["content-security-policy"]
    refs = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    assert refs and all(u.startswith("/") for u in refs), refs  # nothing from another site
    for u in refs:
        assert client.get(u).status_code == 200, u
    assert "SwaggerUIBundle" in client.get("/static/docs/swagger-ui-bundle.js").text
