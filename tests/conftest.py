from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
BENCH_DATA = REPO / "bench" / "data"


@pytest.fixture(scope="session")
def examples() -> Path:
    """The example workloads and Timeloop files shipped in the repository (examples/)."""
    return EXAMPLES
