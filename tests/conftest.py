import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
BENCH_DATA = REPO / "bench" / "data"


@pytest.fixture(scope="session")
def examples() -> Path:
    """The example workloads and Timeloop files shipped in the repository (examples/)."""
    return EXAMPLES


@pytest.fixture()
def fresh_pg() -> Iterator[str]:
    """A PostgreSQL database of its own for one test, dropped afterwards (the service and hostile suites)."""
    sys.path.insert(0, str(REPO / "tests" / "service"))
    import service_procs

    with service_procs.scratch_database() as url:
        yield url
