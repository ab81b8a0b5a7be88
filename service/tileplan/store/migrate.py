"""Bring a database to the newest schema with Alembic; run at every API and worker start.

Several processes may start at once (an API and two workers), so the upgrade runs under a lock:
a PostgreSQL advisory lock, or a file lock next to the SQLite file.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_ADVISORY_KEY = 0x7117E_9147  # arbitrary constant naming "tileplan migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine) -> None:
    """Apply every pending migration (idempotent)."""
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with _migration_lock(engine):
        if engine.dialect.name == "sqlite":
            _incremental_vacuum(engine)
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ADVISORY_KEY})
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")


def _incremental_vacuum(engine: Engine) -> None:
    """A SQLite file whose deleted rows' pages can be given back (`Store.reclaim`): auto_vacuum=INCREMENTAL, set
    set by one VACUUM (a rewrite of the file: instant for a new one, once for a file made before)."""
    conn = engine.raw_connection()
    try:
        cur = conn.cursor()
        if cur.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            cur.execute("PRAGMA auto_vacuum=INCREMENTAL")
            cur.execute("VACUUM")  # (needed even for a new file: WAL mode, set on connect, has written its header)
        cur.close()
    finally:
        conn.close()


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    lock_path = Path(database).with_name(Path(database).name + ".migrate-lock")
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
