"""The hostile suite: each case of issue 16 replayed against a real app (in-process for validation, `tileplan serve`
and workers as processes where the case is about processes), on loopback only, bounded in size and time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the hostile tests start servers with the service suite's process helpers (service_procs)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))


PORTS = range(18200, 18300)  # this suite's share of loopback ports


@pytest.fixture()
def port() -> int:
    """A free port in the suite's range."""
    import random
    import socket

    # a random order: other test runs on the machine (CI beside a developer's run) use the same range
    for p in random.sample(PORTS, len(PORTS)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
            return p
    raise RuntimeError("no free port in 18200-18299")
