"""Real processes for service tests: `tileplan serve` and `tileplan worker`, and fresh PostgreSQL databases."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
LAYER = {"name": "res2_3x3", "op": "conv2d", "in_channels": 64, "out_channels": 64, "in_h": 56, "in_w": 56,
         "kernel": [3, 3], "padding": [1, 1]}
FC = {"name": "fc", "op": "matmul", "M": 1, "K": 2048, "N": 1000}
PG_ADMIN = os.environ.get("TILEPLAN_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    paths = [str(REPO / "service"), str(REPO / "client")]
    if e.get("PYTHONPATH"):
        paths.append(e["PYTHONPATH"])
    e["PYTHONPATH"] = os.pathsep.join(paths)
    for k in [k for k in e if k.startswith("TILEPLAN_") and k not in ("TILEPLAN_CATALOG_DIR", "TILEPLAN_TEST_PG")]:
        del e[k]
    e.update(extra)
    return e


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    log: Path
    url: str = ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)

    def kill(self) -> None:
        """SIGKILL the process and its solver processes (its own process group), like a machine dying."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.popen.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _spawn(args: list[str], log: Path, environ: dict[str, str]) -> Proc:
    fh = open(log, "wb")
    popen = subprocess.Popen(
        [sys.executable, "-m", "tileplan.cli", *args], stdout=fh, stderr=subprocess.STDOUT, env=environ,
        cwd=log.parent, start_new_session=True,
    )
    return Proc(popen, log)


def start_api(workdir: Path, *, db: str | None = None, solvers: int = 1, timeout: float = 60.0,
              port: int | None = None, **settings: str) -> Proc:
    """`tileplan serve` on `port` (default: any free one), healthy."""
    port = port or free_port()
    args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(solvers)]
    if db:
        args += ["--db", db]
    extra = {"TILEPLAN_DATA_DIR": str(workdir / "data"), **{f"TILEPLAN_{k.upper()}": v for k, v in settings.items()}}
    proc = _spawn(args, workdir / f"api-{port}.log", env(**extra))
    proc.url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, timeout)
    return proc


def start_worker(workdir: Path, db: str, *, concurrency: int = 1, **settings: str) -> Proc:
    extra = {f"TILEPLAN_{k.upper()}": v for k, v in settings.items()}
    return _spawn(["worker", "--db", db, "--concurrency", str(concurrency)],
                  workdir / f"worker-{uuid.uuid4().hex[:6]}.log", env(**extra))


def wait_healthy(proc: Proc, timeout: float) -> None:
    # Healthy means *this* process answers: uvicorn logs its address only once it holds the socket, and another
    # server on the same port (another test run on the machine) would answer /healthz just as well.
    listening = f"running on {proc.url} "
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"server exited with {proc.popen.returncode}:\n{proc.output()[-3000:]}")
        try:
            if listening in proc.output() and httpx.get(proc.url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server not healthy after {timeout} s:\n{proc.output()[-3000:]}")


def metric(url: str, name: str, labels: str = "") -> float:
    """A counter's value from /metrics (0 if the series is absent)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            if series.split("{")[0] == name and labels in series:
                total += float(value)
    return total


def pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN, connect_timeout=3):
            return True
    except Exception:  # noqa: BLE001
        return False


def create_database() -> str:
    """A fresh database for this test run; returns its SQLAlchemy-style URL."""
    import psycopg

    name = f"tileplan_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0]
    return f"{base}/{name}"


def drop_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def scratch_database() -> Iterator[str]:
    """A fresh database (its URL) for the `with` block, dropped after it; the test is skipped when PostgreSQL is
    not reachable. One recipe for the suites' database fixtures, whatever their scope."""
    import pytest

    if not pg_available():
        pytest.skip(f"PostgreSQL not reachable at {PG_ADMIN}: these tests need a PostgreSQL server whose database "
                    "`test` accepts that URL (set TILEPLAN_TEST_PG to another; on Debian `bash .ci/run` installs "
                    "and configures one)")
    url = create_database()
    try:
        yield url
    finally:
        drop_database(url)
