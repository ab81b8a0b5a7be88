from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import service_procs


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this run, dropped at the end."""
    if not service_procs.pg_available():
        pytest.skip(f"PostgreSQL not reachable at {service_procs.PG_ADMIN}")
    url = service_procs.create_database()
    try:
        yield url
    finally:
        service_procs.drop_database(url)


