import importlib.util
import os
import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
BENCH_DATA = REPO / "bench" / "data"


@pytest.fixture(scope="session")
def load_bench() -> Callable[[str], ModuleType]:
    """bench/<script>.py as a module (the benches are scripts, not a package), loaded once per script."""
    loaded: dict[str, ModuleType] = {}

    def load(script: str) -> ModuleType:
        if script not in loaded:
            spec = importlib.util.spec_from_file_location(f"bench_{script}", REPO / "bench" / f"{script}.py")
            assert spec and spec.loader
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            loaded[script] = mod
        return loaded[script]

    return load


@pytest.fixture(scope="session")
def examples() -> Path:
    """The example workloads and Timeloop files shipped in the repository (examples/)."""
    return EXAMPLES


# The services some tests need beyond Python: a test that used one is counted in the run's summary, so a green
# run says what it covered. Fixtures name the service they provide; `uses(request, ...)` records dynamic uses.
SERVICE_FIXTURES = {"fresh_pg": "PostgreSQL", "pg_url": "PostgreSQL", "browser": "the browser (Chromium)"}
SERVICES = ("PostgreSQL", "the browser (Chromium)")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture()
def fresh_pg(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL database of its own for one test, dropped afterwards (the service and hostile suites)."""
    sys.path.insert(0, str(REPO / "tests" / "service"))
    import service_procs

    with service_procs.scratch_database() as url:
        request.node.user_properties.append(("service", "PostgreSQL"))
        yield url


def _services(item: pytest.Item) -> set[str]:
    used = {SERVICE_FIXTURES[f] for f in getattr(item, "fixturenames", ()) if f in SERVICE_FIXTURES}
    return used | {v for k, v in item.user_properties if k == "service"}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    """With CI set, a skipped test is a failure: a run that skipped the database or browser tests (or the RISC-V
    compiler's) would otherwise be green without having tested them. Passed tests are counted per service."""
    report = yield
    assert isinstance(report, pytest.TestReport)
    if report.skipped and not hasattr(report, "wasxfail") and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI is set, so a skip is a failure: {reason}"
    if report.when == "call" and report.passed:
        for service in _services(item):
            item.config.stash.setdefault(_RAN, {}).setdefault(service, set()).add(item.nodeid)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, object, object]:
    """With CI set, a module skipped as it is collected (a module-level pytest.skip or importorskip) is a failure
    too: the hook above sees only the tests that were collected."""
    report = yield
    assert isinstance(report, pytest.CollectReport)
    if report.skipped and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI is set, so a skip is a failure: {reason}"
    return report


_RAN = pytest.StashKey[dict[str, set[str]]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    ran = config.stash.get(_RAN, {})
    counts = ", ".join(f"{len(ran.get(s, ()))} against {s}" for s in SERVICES)
    terminalreporter.write_line(f"tests passed using services: {counts}")
