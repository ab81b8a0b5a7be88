"""Cases 1, 2, 3, 4 and 6 of issue 16 against a real `tileplan serve` (SQLite, local solver processes), on loopback.

While each hostile request runs, /healthz must keep answering (each probe has a 2 s client timeout: a frozen event
loop fails it; the 200 ms p99 under a hostile mix is measured by bench/hostile.py, not asserted here), the API's
resident memory must stay within a budget, and what is cached must stay served.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_procs import FC, LAYER, Proc, metric, start_api

FAST = {"time_limit_s": 2}


def rss_mib(proc: Proc) -> float:
    for line in Path(f"/proc/{proc.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def while_healthy(url: str, work: Callable[[], Any]) -> tuple[Any, int]:
    """Run `work` in a thread; probe /healthz until it is done. Returns its result and how many probes answered
    200 (every probe must answer: a timeout or another status fails the test)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    probes = 0
    with httpx.Client(timeout=2.0) as c:
        while True:  # at least one probe, then until the work is done
            r = c.get(url + "/healthz")
            assert r.status_code == 200, r.text
            probes += 1
            if not t.is_alive():
                break
            time.sleep(0.05)
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"], probes


@pytest.fixture()
def api(tmp_path: Path, port: int, request: pytest.FixtureRequest) -> Iterator[Proc]:
    settings = getattr(request, "param", {})
    proc = start_api(tmp_path, port=port, **settings)
    try:
        yield proc
    finally:
        proc.stop()


def detail(r: httpx.Response) -> dict[str, Any]:
    assert "Traceback" not in r.text
    return dict(r.json()["detail"][0])


# -- case 1: descriptors that would stall the event loop ------------------------------------------------------------

HUGE_PE_TIMELOOP = """
architecture:
  version: 0.3
  subtree:
    - name: System
      local:
        - {name: DRAM, class: DRAM, attributes: {word-bits: 8, shared_bandwidth: 8}}
      subtree:
        - name: Chip
          local:
            - {name: Scratchpad, class: SRAM, attributes: {entries: 65536, word-bits: 8}}
          subtree:
            - name: PE[0..9999999999999999]
              local:
                - {name: MAC, class: intmac, attributes: {word-bits: 8}}
"""


def alias_bomb(levels: int = 6) -> str:
    lines = ["x0: &x0 [a, a, a, a, a, a, a, a, a, a]"]
    for i in range(1, levels + 1):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 10) + "]")
    return f"name: bomb\npe_array: *x{levels}\n" + "\n".join(lines)


def test_descriptors_cannot_stall_the_api(api: Proc) -> None:
    with httpx.Client(base_url=api.url, timeout=60) as c:
        for hw in ({"name": "huge", "format": "timeloop", "source": HUGE_PE_TIMELOOP},
                   {"name": "bomb", "source": alias_bomb()}):
            r, probes = while_healthy(api.url, lambda hw=hw: c.post("/schedule", json={"hardware": hw,
                                                                                       "layers": [FC]}))
            assert r.status_code == 422 and detail(r)["loc"][:2] == ["body", "hardware"], r.text
            assert probes >= 1


# -- case 2: POST /evaluate without bounds ----------------------------------------------------------------------------

def dram_only_mapping(dims: dict[str, int]) -> dict[str, Any]:
    levels: list[dict[str, Any]] = [{"name": n} for n in ("Registers", "Accumulator", "Scratchpad", "DRAM")]
    levels[-1]["temporal"] = [[d, n] for d, n in dims.items() if n > 1]
    return {"levels": levels}


def dilated(in_h: int) -> dict[str, Any]:
    return {"op": "conv2d", "in_channels": 16, "out_channels": 16, "in_h": in_h, "in_w": 8, "kernel": 3,
            "dilation": 2, "padding": 2}


@pytest.mark.parametrize("api", [{"sandbox_time_limit_s": "2"}], indirect=True)
def test_evaluate_is_bounded_in_size_time_and_memory(api: Proc) -> None:
    with httpx.Client(base_url=api.url, timeout=120) as c:
        # the probe's request: refused by size at once
        huge = dilated(20_000_004)
        r = c.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": huge,
                                      "mapping": dram_only_mapping({"P": 20_000_000})})
        assert r.status_code == 422 and detail(r)["loc"] == ["body", "layer", "in_h"], r.text
        assert "max_layer_extent" in detail(r)["msg"]
        # within the size bound but costly: five at once run in the sandbox, out of the API, and stop at its limit
        before = rss_mib(api)
        big = dilated(1_000_000)
        body = {"hardware": "gemmini-16x16", "layer": big,
                "mapping": dram_only_mapping({"K": 16, "C": 16, "P": 1_000_000, "Q": 8, "R": 3, "S": 3})}

        def five() -> list[httpx.Response]:
            out: list[httpx.Response] = []
            threads = [threading.Thread(target=lambda: out.append(c.post("/evaluate", json=body))) for _ in range(5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return out

        answers, probes = while_healthy(api.url, five)
        assert [a.status_code for a in answers] == [422] * 5, [a.text for a in answers]
        assert all("sandbox_time_limit_s" in detail(a)["msg"] for a in answers)
        assert rss_mib(api) - before < 100, (before, rss_mib(api))
        # a client that gives up stops its evaluation (the sandbox process running it is killed)
        with pytest.raises(httpx.ReadTimeout):
            c.post("/evaluate", json=body, timeout=1.0)
        for _ in range(50):
            if "event=slot_cancelled pool=sandbox" in api.output():
                break
            time.sleep(0.2)
        assert "event=slot_cancelled pool=sandbox" in api.output()
        ok = c.post("/evaluate", json={"hardware": "gemmini-16x16", "layer": dilated(64),
                                       "mapping": dram_only_mapping({"K": 16, "C": 16, "P": 64, "Q": 8, "R": 3,
                                                                     "S": 3})})
        assert ok.status_code == 200 and ok.json()["valid"], ok.text


# -- case 3: the cache-hit path keeps no whole documents ---------------------------------------------------------------

@pytest.mark.parametrize("api", [{"memo_max_bytes": str(4 * 1024 * 1024)}], indirect=True)
def test_cache_hits_do_not_grow_the_api(api: Proc) -> None:
    from tileplan.hardware.catalog import catalog

    with httpx.Client(base_url=api.url, timeout=120) as c:
        first = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [FC], "options": FAST})
        assert first.status_code == 200, first.text
        before = rss_mib(api)
        # distinct 200 KB layer names of one cached layer: each is a cache hit, echoed, memoised within its bytes
        for i in range(250):
            r = c.post("/schedule", json={"hardware": "gemmini-16x16", "options": FAST,
                                          "layers": [{**FC, "name": f"{i:04d}" + "n" * 200_000}]})
            assert r.status_code == 200 and r.json()["summary"]["cached"] == 1
        # 1.5 MB descriptions: over the descriptor size bound, refused before anything parses or keeps them
        desc = catalog()["gemmini-16x16"].model_dump(mode="json")
        for i in range(60):
            r = c.post("/schedule", json={"hardware": {**desc, "description": f"{i}" + "d" * 1_500_000},
                                          "layers": [FC], "options": FAST})
            assert r.status_code == 422 and detail(r)["loc"] == ["body", "hardware"], r.text
            assert "max_descriptor_bytes" in detail(r)["msg"]
        grown = rss_mib(api) - before
        assert grown < 48, f"the API grew by {grown:.0f} MiB"
        assert c.get(f"/plans/{first.json()['plans'][0]['key']}").status_code == 200


# -- case 4: a runaway layer ----------------------------------------------------------------------------------------

RUNAWAY = {"name": "runaway", "op": "conv2d", "in_channels": 10**9, "out_channels": 16, "in_h": 8, "in_w": 8}


def test_absurd_dimensions_are_refused_with_the_bound(api: Proc) -> None:
    r = httpx.post(api.url + "/schedule", json={"hardware": "gemmini-16x16", "layers": [RUNAWAY],
                                                "options": {"time_limit_s": 1}}, timeout=30)
    assert r.status_code == 422 and detail(r)["loc"] == ["body", "layers", 0, "in_channels"], r.text
    assert "1048576" in detail(r)["msg"]


@pytest.mark.parametrize("api", [{"max_layer_extent": str(10**10), "solve_overhead_s": "2", "solve_grace_s": "5",
                                  "solvers": 2}], indirect=True)
def test_a_runaway_layer_stops_itself_and_nobody_else(api: Proc) -> None:
    with httpx.Client(base_url=api.url, timeout=120) as c:
        normal = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [LAYER], "wait": False,
                                           "options": {"time_limit_s": 8}})
        assert normal.status_code in (200, 202), normal.text
        r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [RUNAWAY],
                                      "options": {"time_limit_s": 1}})
        # its budget: 1 s per mapper run (plan and baseline) plus 2 s, model building included
        assert r.status_code == 422, r.text
        assert detail(r)["loc"] == ["body", "layers", 0, "options", "time_limit_s"] and "budget of 4 s" in detail(r)["msg"]
        link = normal.json()["links"]["self"] if normal.status_code == 202 else None
        for _ in range(120):
            if link is None or c.get(link).json()["status"] == "done":
                break
            time.sleep(0.5)
        assert link is None or c.get(link).json()["status"] == "done"
        # nothing was killed: the normal layer was solved once, by the process it started in
        assert metric(api.url, "tileplan_solves_total", 'outcome="crashed"') == 0
        assert metric(api.url, "tileplan_solves_total", 'outcome="timeout"') == 0
        assert metric(api.url, "tileplan_solves_total", 'outcome="ok"') == 1
    assert "event=slot_timeout" not in api.output()


# -- case 6: module builds (reads) do not take the solvers -----------------------------------------------------------

def test_module_builds_do_not_delay_solves(api: Proc) -> None:
    readers = 12  # builds of ~0.3 s each (idle machine) queued in the one build process: seconds of reads
    with httpx.Client(base_url=api.url, timeout=300) as c:
        plan = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [{**FC, "M": 16}],
                                         "options": FAST}).json()["plans"][0]
        finished: dict[str, float] = {}

        def module(i: int) -> None:
            named = {"name": f"reader{i}"} if i else {}  # the first reader's build is the stored module
            r = c.get(f"/plans/{plan['key']}/module", params={"format": "c", **named})
            assert r.status_code == 200, r.text
            finished[f"module{i}"] = time.monotonic()

        threads = [threading.Thread(target=module, args=(i,)) for i in range(readers)]
        for t in threads:
            t.start()
        time.sleep(0.5)  # the builds have been asked for
        r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [{**FC, "M": 24, "name": "solve"}],
                                      "options": FAST})
        finished["solve"] = time.monotonic()
        assert r.status_code == 200 and r.json()["summary"]["solved"] == 1, r.text
        for t in threads:
            t.join()
        # the solve did not queue behind the builds: had it shared their process(es), it would have finished after
        # (nearly) all of them; in its own it finishes while a good part of them still wait (their count, not the
        # clock, is what is compared: builds and solves slow down together on a loaded machine)
        after = sum(v > finished["solve"] for k, v in finished.items() if k.startswith("module"))
        assert after >= 3, finished


def test_a_client_that_leaves_cancels_the_layers_it_alone_asked_for(api: Proc) -> None:
    # one solver process: the request waits on its layers, then gives up. Twelve distinct convs (0.1-0.5 s each)
    # outlast the client's 0.5 s on any machine; four FCs did not once the solver got faster (the request answered)
    layers = [{**LAYER, "name": f"gone{i}", "out_channels": 64 + 16 * i} for i in range(12)]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(api.url + "/schedule", json={"hardware": "gemmini-16x16", "layers": layers, "options": FAST},
                   timeout=0.5)
    for _ in range(50):
        if "event=layer_cancelled" in api.output():
            break
        time.sleep(0.2)
    assert "event=layer_cancelled" in api.output()
    time.sleep(8)  # long enough for the twelve to be solved, had they not been cancelled
    cached = httpx.get(api.url + "/plans", params={"limit": 10}, timeout=30).json()["plans"]
    assert len(cached) < len(layers), [p["layer"]["name"] for p in cached]
    # the service goes on: the same layers asked for again are solved
    r = httpx.post(api.url + "/schedule", json={"hardware": "gemmini-16x16", "layers": layers[:1], "options": FAST},
                   timeout=120)
    assert r.status_code == 200, r.text


def test_a_client_that_leaves_stops_a_module_build_only_it_waited_for(api: Proc) -> None:
    stayers = 4  # builds of ~0.3 s each (idle machine) ahead of the leaver's in the one build process
    with httpx.Client(base_url=api.url, timeout=300) as c:
        plan = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [LAYER],  # a conv: slower to build
                                         "options": FAST}).json()["plans"][0]
        url = f"/plans/{plan['key']}/module"
        assert c.get(url).status_code == 200  # the build process is up
        got: dict[str, httpx.Response] = {}

        def stay(i: int) -> None:
            got[f"stayer{i}"] = c.get(url, params={"name": f"stayer{i}"})

        threads = [threading.Thread(target=stay, args=(i,)) for i in range(stayers)]
        for t in threads:
            t.start()
        time.sleep(0.2)  # the stayers' builds hold the one build process; the leaver's waits behind them
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(api.url + url, params={"name": "leaver"}, timeout=0.5)
        for t in threads:
            t.join()
        for i in range(stayers):
            assert got[f"stayer{i}"].status_code == 200 and f"stayer{i}" in got[f"stayer{i}"].text
        for _ in range(100):
            if "event=module_build_cancelled" in api.output():
                break
            time.sleep(0.2)
        assert "name=leaver" in api.output() and "event=module_build_cancelled" in api.output()
        # the stored module and the stayers', not the leaver's
        assert api.output().count("event=module_built") == 1 + stayers
