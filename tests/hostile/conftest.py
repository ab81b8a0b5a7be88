"""The hostile suite: each case of issue 16 replayed against a real app (in-process for validation, `tileplan serve`
and workers as processes where the case is about processes), on loopback only, bounded in size and time."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
import service_procs  # noqa: E402


@pytest.fixture()
def fresh_pg() -> Iterator[str]:
    """A PostgreSQL database of its own for one test."""
    if not service_procs.pg_available():
        pytest.skip(f"PostgreSQL not reachable at {service_procs.PG_ADMIN}")
    url = service_procs.create_database()
    try:
        yield url
    finally:
        service_procs.drop_database(url)


PORTS = range(18200, 18300)  # this suite's share of loopback ports


@pytest.fixture()
def port() -> int:
    """A free port in the suite's range."""
    import socket

    for p in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
            return p
    raise RuntimeError("no free port in 18200-18299")
