"""The plan cache and job records over SQLAlchemy: SQLite (a WAL file) or PostgreSQL.

All methods are synchronous and short; async callers run them in a thread. Plans are immutable:
a key, once written, never changes (the key includes the solver version), so a second writer of
the same key is a no-op.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Text,
    cast,
    create_engine,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from tileplan.store.migrate import upgrade
from tileplan.store.models import (
    ClaimRow,
    CompileBlobRow,
    CompileOwnerRow,
    CompileRow,
    HardwareRow,
    JobLayerRow,
    JobRow,
    ModuleRow,
    PlanRow,
)

FINAL = ("done", "failed")
WAL_LIMIT_BYTES = 64 * 1024 * 1024  # what a checkpointed SQLite WAL file is truncated back to
RECLAIM_STEP_PAGES = 2048  # pages one incremental-vacuum step gives back (8 MiB: ~0.35 s on the shared machine)

# Layer ops that name the same computation (workload.MatmulLayer accepts both).
OP_ALIASES: dict[str, tuple[str, ...]] = {"matmul": ("matmul", "dense"), "dense": ("matmul", "dense")}


def now_utc() -> datetime:
    return datetime.now(UTC)


def iso_utc(ts: datetime | str) -> str:
    """ISO 8601 in UTC with its offset (`+00:00`). The store writes UTC; SQLite hands it back without an offset."""
    ts = datetime.fromisoformat(ts) if isinstance(ts, str) else ts
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


@dataclass(frozen=True)
class RegisteredHardware:
    name: str
    descriptor: dict[str, Any]
    owner: str | None  # fingerprint of the token that registered it
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class CachedPlan:
    key: str
    hardware: str
    layer: str  # JSON
    doc: str  # JSON object of the Plan without cached / hardware / layer
    cycles: float
    energy_pj: float
    baseline_cycles: float | None
    seq: int = 0
    cached_at: datetime | str | None = None  # raw SQLite reads give the stored text

    def to_json(self, *, cached: bool, hardware: str | None = None, layer: str | None = None) -> str:
        """The contract Plan as JSON text, with the asker's hardware name and layer echoed (and, for a cached
        plan, when it was cached)."""
        when = f'"cached_at":"{iso_utc(self.cached_at)}",' if cached and self.cached_at is not None else ""
        return (
            f'{{"cached":{"true" if cached else "false"},{when}"hardware":{json.dumps(hardware or self.hardware)},'
            f'"layer":{layer or self.layer},{self.doc[1:]}'
        )


@dataclass(frozen=True)
class StoredModule:
    """A plan's generated module (`status` "ok") or the reason it has none (`status` "error", `error`)."""

    key: str
    status: str
    name: str
    tvmscript: str | None
    c_source: str | None
    tar: bytes | None
    notes: list[str]
    model_cycles: float | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Job:
    id: str
    status: str
    hardware: str
    request: dict[str, Any]
    total: int
    done: int
    failed: int
    errors: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    deadline: float

    @property
    def finished(self) -> bool:
        return self.status in FINAL


@dataclass(frozen=True)
class Compile:
    """A whole-model compile as GET /compiles answers it (the model's and the artifact's bytes are read apart)."""

    seq: int
    id: str
    status: str
    model_name: str
    model_sha256: str
    hardware: str
    request: dict[str, Any]
    ops_done: int
    ops_total: int
    summary: dict[str, Any] | None
    artifact_sha256: str | None
    artifact_bytes: int | None
    error: dict[str, Any] | None
    attempts: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    deadline: float
    stored_bytes: int = 0
    used_at: datetime | None = None
    owner: str | None = None  # who asked first (whose share of the compile processes it runs in)

    @property
    def finished(self) -> bool:
        return self.status in FINAL


class HardwareQuota(Exception):
    """A new registration would take its owner past its bound of registered descriptors."""

    def __init__(self, held: int, bound: int) -> None:
        super().__init__(f"{held} >= {bound}")
        self.held, self.bound = held, bound


class QuotaExceeded(Exception):
    """A new compile would take its owner past its quota of stored bytes."""

    def __init__(self, used: int, need: int, quota: int) -> None:
        super().__init__(f"{used} + {need} > {quota}")
        self.used, self.need, self.quota = used, need, quota


def make_engine(url: str, *, pool_size: int = 16) -> Engine:
    if url.startswith("sqlite"):
        database = url.split("///", 1)[1] if "///" in url else ""
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=pool_size,
            max_overflow=pool_size,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # transactions are begun below, so writers can BEGIN IMMEDIATE
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")  # a big write's WAL does not stay big
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # Writers take the write lock up front (no deadlock upgrading a read lock); single-statement reads
            # run in autocommit, each SELECT its own snapshot, without BEGIN/ROLLBACK round trips.
            if conn.get_execution_options().get("write"):
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)


PLAN_DELETED = "tileplan_plan_deleted"  # PostgreSQL channel: the key of each deleted plan, on commit

_PLAN_SELECT = "SELECT key, hardware, layer, doc, cycles, energy_pj, baseline_cycles, seq, created_at FROM plans"


class AsyncPlanReader:
    """Cached-plan lookups for the API's event loop on PostgreSQL, batched.

    Concurrent requests' lookups are coalesced: while a query is in flight, new lookups queue up and the
    next query fetches all their keys at once (`key = ANY(...)`), so under load one round trip serves
    many requests. An asyncio psycopg pool in autocommit; no thread hop per request.
    """

    def __init__(self, url: str, size: int = 4, batches_in_flight: int = 2) -> None:
        from psycopg_pool import AsyncConnectionPool

        conninfo = url.replace("postgresql+psycopg://", "postgresql://", 1)
        self.pool = AsyncConnectionPool(conninfo, min_size=min(2, size), max_size=size, open=False,
                                        kwargs={"autocommit": True})
        self._waiting: list[tuple[list[str], asyncio.Future[dict[str, CachedPlan]]]] = []
        self._in_flight = 0
        self._max_in_flight = batches_in_flight

    async def open(self) -> None:
        await self.pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self.pool.close()

    async def get_plans(self, keys: list[str]) -> dict[str, CachedPlan]:
        fut: asyncio.Future[dict[str, CachedPlan]] = asyncio.get_running_loop().create_future()
        self._waiting.append((keys, fut))
        if self._in_flight < self._max_in_flight:
            self._in_flight += 1
            asyncio.ensure_future(self._drain())
        return await fut

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                wanted = list(dict.fromkeys(k for keys, _ in batch for k in keys))
                try:
                    rows = await self._query(wanted)
                except Exception as exc:  # noqa: BLE001 - every waiter gets the error
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for keys, fut in batch:
                    if not fut.done():
                        fut.set_result({k: rows[k] for k in keys if k in rows})
        finally:
            self._in_flight -= 1

    async def _query(self, keys: list[str]) -> dict[str, CachedPlan]:
        import psycopg

        params: list[Any]
        if len(keys) == 1:  # adapting a one-element array costs more than the query itself
            sql, params = _PLAN_SELECT + " WHERE key = %s", list(keys)
        else:
            sql, params = _PLAN_SELECT + " WHERE key = ANY(%s)", [keys]
        for attempt in range(2):
            try:
                async with self.pool.connection() as conn:
                    cur = await conn.execute(sql, params, prepare=True)
                    rows = await cur.fetchall()
                break
            except psycopg.OperationalError:
                # a pooled connection that died with the database (restart): the pool drops it; a second try gets
                # a fresh one, or fails the same way while the database is still away (the API answers 503)
                if attempt:
                    raise
        return {r[0]: CachedPlan(*r) for r in rows}


class Store:
    """Plans, registered hardware, jobs and solve claims."""

    def __init__(self, url: str, *, migrate: bool = True, pool_size: int = 16) -> None:
        self.url = url
        self.engine = make_engine(url, pool_size=pool_size)
        self.dialect = self.engine.dialect.name
        self._local = threading.local()
        self._readers: list[Any] = []
        if migrate:
            upgrade(self.engine)

    def close(self) -> None:
        for conn in self._readers:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - another thread's connection; it goes with the process
                pass
        self.engine.dispose()

    # -- plumbing -------------------------------------------------------------------------------

    def _write(self) -> Connection:
        """A connection whose transaction takes the write lock at BEGIN (SQLite; no-op on PostgreSQL)."""
        return self.engine.connect().execution_options(write=True)

    def _sqlite_reader(self) -> Any:
        """This thread's own autocommit sqlite3 connection for plan reads: no pool checkout, no transaction."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            import sqlite3

            conn = sqlite3.connect(self.engine.url.database or ":memory:", isolation_level=None, timeout=30,
                                   check_same_thread=True)
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA query_only=1")
            self._local.conn = conn
            self._readers.append(conn)
        return conn

    def data_version(self) -> tuple[int, int] | None:
        """SQLite: a token that two calls from the same thread return equal only if no other connection (thread or
        process; this thread's reader never writes) committed to the file in between — SQLite's `data_version`,
        read without touching a table. None on PostgreSQL, which has no such cheap counter."""
        if self.dialect != "sqlite":
            return None
        conn = self._sqlite_reader()
        return id(conn), conn.execute("PRAGMA data_version").fetchone()[0]

    def _insert(self, table: Any) -> Any:
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)

    # every table (what the endpoints and the solvers read): a health check reads a row of each, so damage to one (a
    # torn page, a dropped table) is reported there as it is on the endpoints it breaks
    HEALTH_TABLES = ("plans", "modules", "hardware", "jobs", "job_layers", "compiles", "compile_owners",
                     "compile_blobs", "claims")

    def ping(self) -> None:
        """Raise if the database cannot be reached or a table cannot be read (its first row and index root)."""
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            if self.dialect != "sqlite":
                for table in self.HEALTH_TABLES:  # (fixed names, not input)
                    conn.execute(text(f"SELECT 1 FROM {table} LIMIT 1")).all()
                return
            # SQLite answers `SELECT 1 FROM t` from the smallest index: read the table's own b-tree and each index's
            indexes = conn.execute(text(
                "SELECT tbl_name, name FROM sqlite_master WHERE type = 'index' AND tbl_name IN "
                f"({', '.join(repr(t) for t in self.HEALTH_TABLES)})")).all()
            for table in self.HEALTH_TABLES:
                conn.execute(text(f'SELECT rowid FROM "{table}" NOT INDEXED LIMIT 1')).all()
            for table, index in indexes:
                conn.execute(text(f'SELECT 1 FROM "{table}" INDEXED BY "{index}" LIMIT 1')).all()

    # -- plans ----------------------------------------------------------------------------------

    _PLAN_COLS = (
        PlanRow.key, PlanRow.hardware, PlanRow.layer, PlanRow.doc, PlanRow.cycles, PlanRow.energy_pj,
        PlanRow.baseline_cycles, PlanRow.seq, PlanRow.created_at,
    )

    def get_plans(self, keys: Iterable[str]) -> dict[str, CachedPlan]:
        """The hot path of every cached request: one indexed SELECT, without SQLAlchemy statement compilation
        or pool checkout on SQLite (measured: those were most of a cached request's server time)."""
        keys = list(keys)
        if not keys:
            return {}
        if self.dialect == "sqlite":
            cur = self._sqlite_reader().execute(_PLAN_SELECT + f" WHERE key IN ({','.join('?' * len(keys))})", keys)
            rows = cur.fetchall()
            cur.close()
        else:
            conn = self.engine.raw_connection()
            try:
                cur = conn.cursor()
                cur.execute(_PLAN_SELECT + " WHERE key = ANY(%s)", [keys])
                rows = cur.fetchall()
                cur.close()
                conn.rollback()  # end the read transaction psycopg opened
            finally:
                conn.close()  # back to the pool
        return {r[0]: CachedPlan(*r) for r in rows}

    def get_plan(self, key: str) -> CachedPlan | None:
        return self.get_plans([key]).get(key)

    def plan_descriptor(self, key: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(PlanRow.descriptor).where(PlanRow.key == key)).first()
        return json.loads(row[0]) if row and row[0] else None

    def has_plan(self, key: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(select(PlanRow.seq).where(PlanRow.key == key)).first() is not None

    def list_plans(
        self, *, hardware: str | None = None, op: str | None = None, limit: int = 50, before: int | None = None
    ) -> list[CachedPlan]:
        """Newest first; `before` is the `seq` cursor of the previous page's last plan."""
        q = select(*self._PLAN_COLS).order_by(PlanRow.seq.desc()).limit(limit)
        if hardware:
            q = q.where(PlanRow.hardware == hardware)
        if op:
            # `dense` is an alias of `matmul` (workload.py); plans keep the op as first written, so match both.
            q = q.where(PlanRow.op.in_(OP_ALIASES.get(op, (op,))))
        if before is not None:
            q = q.where(PlanRow.seq < before)
        with self.engine.connect() as conn:
            return [CachedPlan(*r) for r in conn.execute(q).all()]

    def put_plan(self, plan: dict[str, Any], descriptor: dict[str, Any] | None = None) -> bool:
        """Store a solved Plan (contract dict) and the descriptor it was solved for; False if the key was
        already there."""
        doc = {k: v for k, v in plan.items() if k not in ("cached", "hardware", "layer")}
        baseline = plan.get("baseline") or None
        layer = plan["layer"]
        values = dict(
            key=plan["key"],
            hardware=plan["hardware"],
            op=str(layer.get("op", "")),
            layer_name=str(layer.get("name", ""))[:200],
            mapper=plan["mapper"],
            solver_version=str(plan.get("solver_version", "")),
            cycles=float(plan["metrics"]["cycles"]),
            energy_pj=float(plan["metrics"]["energy_pj"]),
            baseline_cycles=float(baseline["metrics"]["cycles"]) if baseline else None,
            solve_seconds=float(plan.get("solver", {}).get("seconds", 0.0)),
            layer=json.dumps(layer, separators=(",", ":")),
            doc=json.dumps({"key": plan["key"], **doc}, separators=(",", ":")),
            descriptor=json.dumps(descriptor, separators=(",", ":")) if descriptor else None,
            created_at=now_utc(),
        )
        stmt = (
            self._insert(PlanRow).values(**values).on_conflict_do_nothing(index_elements=["key"]).returning(PlanRow.seq)
        )
        with self._write() as conn, conn.begin():
            return conn.execute(stmt).first() is not None

    def delete_plan(self, key: str) -> bool:
        with self._write() as conn, conn.begin():
            conn.execute(delete(ModuleRow).where(ModuleRow.key == key))
            gone = conn.execute(delete(PlanRow).where(PlanRow.key == key)).rowcount > 0
            if gone and self.dialect == "postgresql":
                # every API process forgets the answers it keeps with this plan (tileplan.api.answers), on commit
                conn.execute(text("SELECT pg_notify(:channel, :key)"), {"channel": PLAN_DELETED, "key": key})
            return gone

    # -- generated modules ----------------------------------------------------------------------

    def put_module(self, key: str, module: dict[str, Any]) -> bool:
        """Store a plan's module as built by `tileplan.jobs.solve.build_layer_module` (`ok` with the texts and
        tar, or an `error`); a second writer of the same key is a no-op. Returns True if this call wrote it."""
        ok = bool(module.get("ok"))
        model_cycles = module.get("model_cycles")
        values = dict(
            key=key, status="ok" if ok else "error", name=str(module.get("name", ""))[:200],
            tvmscript=module.get("tvmscript") if ok else None, c_source=module.get("c_source") if ok else None,
            tar=module.get("tar") if ok else None, notes=json.dumps(list(module.get("notes", []))),
            model_cycles=float(model_cycles) if model_cycles is not None and model_cycles == model_cycles else None,
            error=None if ok else str(module.get("error", "code generation failed")),
            build_seconds=float(module.get("seconds", 0.0)), created_at=now_utc(),
        )
        stmt = self._insert(ModuleRow).values(**values).on_conflict_do_nothing(index_elements=["key"])
        with self._write() as conn, conn.begin():
            return conn.execute(stmt.returning(ModuleRow.key)).first() is not None

    def get_module(self, key: str) -> StoredModule | None:
        cols = (ModuleRow.key, ModuleRow.status, ModuleRow.name, ModuleRow.tvmscript, ModuleRow.c_source,
                ModuleRow.tar, ModuleRow.notes, ModuleRow.model_cycles, ModuleRow.error)
        with self.engine.connect() as conn:
            row = conn.execute(select(*cols).where(ModuleRow.key == key)).first()
        if row is None:
            return None
        k, status, name, tvm, c, tar, notes, cycles, error = row
        return StoredModule(k, status, name, tvm, c, bytes(tar) if tar is not None else None, json.loads(notes),
                            cycles, error)

    def module_keys(self, keys: Iterable[str]) -> set[str]:
        """Which of `keys` have a module (or a stored codegen error) already."""
        keys = list(keys)
        if not keys:
            return set()
        with self.engine.connect() as conn:
            return set(conn.execute(select(ModuleRow.key).where(ModuleRow.key.in_(keys))).scalars())

    def count_plans(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(PlanRow)).scalar_one())

    # -- registered hardware --------------------------------------------------------------------

    def put_hardware(self, name: str, descriptor: dict[str, Any], *, owner: str | None = None,
                     replace: bool = False, max_per_owner: int | None = None) -> RegisteredHardware | None:
        """Register `name`; with `replace`, a registered one is replaced and its version goes up. Without it, an
        existing name is left alone and None comes back (the caller answers 409). HardwareQuota if `name` is new
        and `owner` already holds `max_per_owner` registered descriptors (concurrent registrations of one owner
        may pass it by their number, no more)."""
        body = json.dumps(descriptor, separators=(",", ":"))
        ts = now_utc()
        with self._write() as conn, conn.begin():
            old = conn.execute(select(HardwareRow.version, HardwareRow.created_at, HardwareRow.owner)
                               .where(HardwareRow.name == name)).first()
            if old is not None and not replace:
                return None
            if old is None and max_per_owner is not None:
                held = conn.scalar(select(func.count()).select_from(HardwareRow).where(HardwareRow.owner == owner)
                                   if owner is not None else
                                   select(func.count()).select_from(HardwareRow).where(HardwareRow.owner.is_(None)))
                if int(held or 0) >= max_per_owner:
                    raise HardwareQuota(int(held or 0), max_per_owner)
            if old is None:
                stmt = self._insert(HardwareRow).values(name=name, descriptor=body, created_at=ts, owner=owner,
                                                        version=1, updated_at=ts)
                if conn.execute(stmt.on_conflict_do_nothing(index_elements=["name"])).rowcount == 0:
                    return None  # registered at the same moment by someone else
                return RegisteredHardware(name, descriptor, owner, 1, ts, ts)
            conn.execute(update(HardwareRow).where(HardwareRow.name == name).values(
                descriptor=body, version=old[0] + 1, updated_at=ts))
            return RegisteredHardware(name, descriptor, old[2], old[0] + 1, old[1], ts)

    def hardware_entry(self, name: str) -> RegisteredHardware | None:
        """A registered descriptor with its owner and version."""
        cols = (HardwareRow.descriptor, HardwareRow.owner, HardwareRow.version, HardwareRow.created_at,
                HardwareRow.updated_at)
        with self.engine.connect() as conn:
            row = conn.execute(select(*cols).where(HardwareRow.name == name)).first()
        if row is None:
            return None
        return RegisteredHardware(name, json.loads(row[0]), row[1], row[2], row[3], row[4] or row[3])

    def hardware_names(self, limit: int) -> tuple[list[str], int]:
        """The first `limit` registered names (sorted) and how many there are."""
        with self.engine.connect() as conn:
            names = list(conn.scalars(select(HardwareRow.name).order_by(HardwareRow.name).limit(limit)))
            total = conn.scalar(select(func.count()).select_from(HardwareRow)) or 0
        return names, int(total)

    def get_hardware(self, name: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(HardwareRow.descriptor).where(HardwareRow.name == name)).first()
        return None if row is None else json.loads(row[0])

    def list_hardware(self) -> dict[str, dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(HardwareRow.name, HardwareRow.descriptor).order_by(HardwareRow.name)).all()
        return {name: json.loads(body) for name, body in rows}

    def delete_hardware(self, name: str) -> bool:
        with self._write() as conn, conn.begin():
            return conn.execute(delete(HardwareRow).where(HardwareRow.name == name)).rowcount > 0

    # -- jobs -----------------------------------------------------------------------------------

    def create_job(
        self,
        job_id: str,
        *,
        hardware: str,
        request: dict[str, Any],
        layers: Sequence[tuple[str, int]],
        cached: set[str],
        deadline: float,
        owner: str | None = None,
    ) -> None:
        """A job over the unique layers `(key, first index)`; the `cached` ones count as done already. `owner`: whose
        share of the solvers its layers take (`tileplan.jobs.fair`)."""
        ts = now_utc()
        done = sum(1 for key, _ in layers if key in cached)
        with self._write() as conn, conn.begin():
            conn.execute(
                insert(JobRow).values(
                    id=job_id, status="queued", hardware=hardware, request=json.dumps(request, separators=(",", ":")),
                    total=len(layers), done=done, failed=0, error=None, created_at=ts, updated_at=ts,
                    finished_at=None, deadline=deadline, owner=owner,
                )
            )
            conn.execute(
                insert(JobLayerRow),
                [
                    dict(job_id=job_id, key=key, idx=idx, status="done" if key in cached else "pending",
                         attempts=0, worker=None, error=None, updated_at=ts)
                    for key, idx in layers
                ],
            )

    _JOB_COLS = (
        JobRow.id, JobRow.status, JobRow.hardware, JobRow.request, JobRow.total, JobRow.done, JobRow.failed,
        JobRow.error, JobRow.created_at, JobRow.updated_at, JobRow.finished_at, JobRow.deadline,
    )

    def get_job(self, job_id: str) -> Job | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(*self._JOB_COLS).where(JobRow.id == job_id)).first()
        if row is None:
            return None
        (id_, status, hardware, request, total, done, failed, error, created, updated, finished, deadline) = row
        return Job(
            id=id_, status=status, hardware=hardware, request=json.loads(request), total=total, done=done,
            failed=failed, errors=json.loads(error or "[]"), created_at=created, updated_at=updated,
            finished_at=finished, deadline=deadline,
        )

    def job_status(self, job_id: str) -> tuple[str, int, int] | None:
        """(status, done, total): the cheap poll."""
        with self.engine.connect() as conn:
            row = conn.execute(select(JobRow.status, JobRow.done, JobRow.total).where(JobRow.id == job_id)).first()
        return None if row is None else (row[0], row[1], row[2])

    def job_layers(self, job_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(JobLayerRow.key, JobLayerRow.idx, JobLayerRow.status, JobLayerRow.attempts,
                       JobLayerRow.worker, JobLayerRow.error)
                .where(JobLayerRow.job_id == job_id).order_by(JobLayerRow.idx)
            ).all()
        return [
            dict(key=k, idx=i, status=s, attempts=a, worker=w, error=json.loads(e) if e else None)
            for k, i, s, a, w, e in rows
        ]

    def pending_layers(self, job_id: str) -> list[str]:
        with self.engine.connect() as conn:
            return list(
                conn.execute(
                    select(JobLayerRow.key).where(
                        JobLayerRow.job_id == job_id, JobLayerRow.status.in_(("pending", "running"))
                    ).order_by(JobLayerRow.idx)
                ).scalars()
            )

    def start_layer(self, job_id: str, key: str, worker: str) -> int:
        """Mark a layer running; returns its attempt number (1 the first time)."""
        with self._write() as conn, conn.begin():
            conn.execute(
                update(JobLayerRow)
                .where(JobLayerRow.job_id == job_id, JobLayerRow.key == key, JobLayerRow.status.in_(("pending", "running")))
                .values(status="running", attempts=JobLayerRow.attempts + 1, worker=worker, updated_at=now_utc())
            )
            conn.execute(
                update(JobRow).where(JobRow.id == job_id, JobRow.status == "queued")
                .values(status="running", updated_at=now_utc())
            )
            row = conn.execute(
                select(JobLayerRow.attempts).where(JobLayerRow.job_id == job_id, JobLayerRow.key == key)
            ).first()
        return int(row[0]) if row else 0

    def finish_layer(self, job_id: str, key: str, error: dict[str, Any] | None = None) -> str:
        """Record a layer's outcome and update the job's progress; returns the job's status."""
        ts = now_utc()
        with self._write() as conn, conn.begin():
            conn.execute(
                update(JobLayerRow)
                .where(JobLayerRow.job_id == job_id, JobLayerRow.key == key, JobLayerRow.status.in_(("pending", "running")))
                .values(status="failed" if error else "done", error=json.dumps(error) if error else None, updated_at=ts)
            )
            return self._refresh_job(conn, job_id, ts)

    def _refresh_job(self, conn: Connection, job_id: str, ts: datetime) -> str:
        counts = dict(
            conn.execute(
                select(JobLayerRow.status, func.count()).where(JobLayerRow.job_id == job_id).group_by(JobLayerRow.status)
            ).all()
        )
        job = conn.execute(select(JobRow.status, JobRow.total).where(JobRow.id == job_id)).first()
        if job is None:
            return "missing"
        status, total = job
        done, failed = counts.get("done", 0), counts.get("failed", 0)
        values: dict[str, Any] = dict(done=done, failed=failed, updated_at=ts)
        if status not in FINAL and done + failed >= total:
            status = "failed" if failed else "done"
            values.update(status=status, finished_at=ts)
            if failed:
                errs = conn.execute(
                    select(JobLayerRow.error).where(JobLayerRow.job_id == job_id, JobLayerRow.status == "failed")
                    .order_by(JobLayerRow.idx)
                ).scalars()
                values["error"] = json.dumps([json.loads(e) for e in errs if e])
        conn.execute(update(JobRow).where(JobRow.id == job_id).values(**values))
        return status

    def fail_job(self, job_id: str, error: dict[str, Any]) -> bool:
        """Fail a job that has not finished (time limit, retries exhausted); False if it had."""
        ts = now_utc()
        with self._write() as conn, conn.begin():
            n = conn.execute(
                update(JobRow).where(JobRow.id == job_id, JobRow.status.not_in(FINAL))
                .values(status="failed", error=json.dumps([error]), finished_at=ts, updated_at=ts)
            ).rowcount
            if n:
                conn.execute(
                    update(JobLayerRow)
                    .where(JobLayerRow.job_id == job_id, JobLayerRow.status.in_(("pending", "running")))
                    .values(status="failed", error=json.dumps(error), updated_at=ts)
                )
        return n > 0

    def expire_jobs(self, now: float | None = None) -> list[str]:
        """Fail every unfinished job past its deadline; returns their ids."""
        now = time.time() if now is None else now
        with self.engine.connect() as conn:
            ids = list(
                conn.execute(select(JobRow.id).where(JobRow.status.not_in(FINAL), JobRow.deadline < now)).scalars()
            )
        return [
            i for i in ids
            if self.fail_job(i, {"loc": [], "msg": "the job exceeded its time limit", "type": "time_limit"})
        ]

    def unfinished_jobs(self) -> list[tuple[str, str | None]]:
        """(id, owner) of every unfinished job, oldest first."""
        with self.engine.connect() as conn:
            return [(i, o) for i, o in conn.execute(
                select(JobRow.id, JobRow.owner).where(JobRow.status.not_in(FINAL)).order_by(JobRow.created_at))]

    def queue_depth(self) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(select(func.count()).select_from(JobRow).where(JobRow.status.not_in(FINAL))).scalar_one()
            )

    # -- whole-model compiles -------------------------------------------------------------------

    def _summary_head(self) -> Any:
        """A compile's summary without its per-op list, cut by the database: a model of 40,000 nodes has a 12 MB
        summary, which json.loads in the API process (holding the interpreter's lock: 0.7 s) on every read of the
        compile and every row of a listing. The ops are read only where they are shown (`compile_summary_text`,
        `compile_ops`)."""
        if self.engine.dialect.name == "sqlite":
            return func.json_remove(CompileRow.summary, "$.ops")
        return cast(cast(CompileRow.summary, postgresql.JSONB).op("-")("ops"), Text)

    def _compile_cols(self) -> tuple[Any, ...]:
        return (
            CompileRow.seq, CompileRow.id, CompileRow.status, CompileRow.model_name, CompileRow.model_sha256,
            CompileRow.hardware, CompileRow.request, CompileRow.ops_done, CompileRow.ops_total, self._summary_head(),
            CompileRow.artifact_sha256, CompileRow.artifact_bytes, CompileRow.error, CompileRow.attempts,
            CompileRow.created_at, CompileRow.updated_at, CompileRow.finished_at, CompileRow.deadline,
            CompileRow.stored_bytes, CompileRow.used_at, CompileRow.owner,
        )

    def compile_summary_text(self, compile_id: str) -> str | None:
        """A compile's whole summary as the JSON text stored (per-op list included), unparsed: GET /compiles/{id}
        sends it as it is."""
        with self.engine.connect() as conn:
            row = conn.execute(select(CompileRow.summary).where(CompileRow.id == compile_id)).first()
        return row[0] if row else None

    def compile_ops(self, compile_id: str, limit: int) -> tuple[list[dict[str, Any]], int]:
        """The first `limit` entries of a compile's per-op summary and how many it has (the database walks the
        list; only the entries returned are parsed here)."""
        if self.engine.dialect.name == "sqlite":
            count_q = text("SELECT json_array_length(summary, '$.ops') FROM compiles WHERE id = :id")
            ops_q = text("SELECT e.value FROM compiles, json_each(compiles.summary, '$.ops') AS e "
                         "WHERE compiles.id = :id ORDER BY e.key LIMIT :n")
        else:
            count_q = text("SELECT jsonb_array_length(summary::jsonb -> 'ops') FROM compiles WHERE id = :id")
            ops_q = text("SELECT e.value::text FROM compiles, jsonb_array_elements(summary::jsonb -> 'ops') "
                         "WITH ORDINALITY AS e(value, i) WHERE compiles.id = :id ORDER BY e.i LIMIT :n")
        with self.engine.connect() as conn:
            count = conn.execute(count_q, {"id": compile_id}).scalar()
            if not count:
                return [], 0
            rows = conn.execute(ops_q, {"id": compile_id, "n": int(limit)}).all()
        return [json.loads(r[0]) for r in rows], int(count)

    @staticmethod
    def _compile(row: Any) -> Compile:
        (seq, id_, status, name, sha, hw, request, done, total, summary, art_sha, art_len, error, attempts,
         created, updated, finished, deadline, stored, used, owner) = row
        return Compile(seq, id_, status, name, sha, hw, json.loads(request), done, total,
                       json.loads(summary) if summary else None, art_sha, art_len,
                       json.loads(error) if error else None, attempts, created, updated, finished, deadline,
                       int(stored or 0), used, owner)

    def create_compile(self, compile_id: str, *, model: bytes, model_name: str, hardware: str,
                       request: dict[str, Any], deadline: float, owner: str | None = None,
                       quota: int | None = None) -> bool:
        """Record an accepted compile (queued); False if one with this id exists already (a second asker of the
        same compile shares the first one's). `owner` comes to hold it (`compile_owners`); with `quota`, unless it
        holds it already, QuotaExceeded if what it holds and this compile's bytes would be over `quota` (checked
        and recorded in one write, so an owner's concurrent requests cannot both slip under it)."""
        ts = now_utc()
        body = json.dumps(request, separators=(",", ":"))
        size = len(model) + len(body)
        values = dict(
            id=compile_id, status="queued", model_name=model_name[:200], model_sha256=hashlib.sha256(model).hexdigest(),
            hardware=hardware[:200], request=body, ops_done=0,
            ops_total=0, summary=None, artifact_bytes=None, artifact_sha256=None, error=None, attempts=0, created_at=ts,
            updated_at=ts, finished_at=None, deadline=deadline, stored_bytes=size, used_at=ts,
            owner=owner,
        )
        stmt = self._insert(CompileRow).values(**values).on_conflict_do_nothing(index_elements=["id"])
        with self._write() as conn, conn.begin():
            if owner is not None and quota is not None:
                self._check_quota(conn, compile_id, owner, size, quota)
            created = conn.execute(stmt.returning(CompileRow.seq)).first() is not None
            if created:
                self._put_blob(conn, compile_id, "model", model)
            else:
                self._touch(conn, compile_id, ts, self.TOUCH_EVERY_S)
            if owner is not None:
                conn.execute(self._insert(CompileOwnerRow).values(compile_id=compile_id, owner=owner, created_at=ts)
                             .on_conflict_do_nothing(index_elements=["compile_id", "owner"]))
        return created

    def hold_compile(self, compile_id: str, owner: str, quota: int | None = None) -> bool:
        """`owner` asks for an existing compile again (an identical request): it comes to hold it (QuotaExceeded as
        in `create_compile`) and the compile was used now; False if there is no such compile."""
        with self._write() as conn, conn.begin():
            if conn.execute(select(CompileRow.seq).where(CompileRow.id == compile_id)).first() is None:
                return False
            if quota is not None:
                self._check_quota(conn, compile_id, owner, 0, quota)
            self._touch(conn, compile_id, now_utc(), self.TOUCH_EVERY_S)
            conn.execute(self._insert(CompileOwnerRow).values(compile_id=compile_id, owner=owner, created_at=now_utc())
                         .on_conflict_do_nothing(index_elements=["compile_id", "owner"]))
        return True

    def _check_quota(self, conn: Connection, compile_id: str, owner: str, new_bytes: int, quota: int) -> None:
        if self.dialect == "postgresql":  # an owner's submissions one at a time (SQLite: BEGIN IMMEDIATE is)
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:o, 7))"), {"o": owner})
        held = conn.execute(select(CompileOwnerRow.owner).where(
            CompileOwnerRow.compile_id == compile_id, CompileOwnerRow.owner == owner)).first()
        if held is not None:
            return
        existing = conn.execute(select(CompileRow.stored_bytes).where(CompileRow.id == compile_id)).scalar()
        need = int(existing) if existing is not None else new_bytes
        used = self._owner_bytes(conn, owner)
        if used + need > quota:
            raise QuotaExceeded(used, need, quota)

    @staticmethod
    def _owner_bytes(conn: Connection, owner: str) -> int:
        return int(conn.execute(
            select(func.coalesce(func.sum(CompileRow.stored_bytes), 0))
            .join(CompileOwnerRow, CompileOwnerRow.compile_id == CompileRow.id)
            .where(CompileOwnerRow.owner == owner)
        ).scalar_one())

    def owner_compile_bytes(self, owner: str) -> int:
        """Bytes of the compiles `owner` holds (what its quota counts)."""
        with self.engine.connect() as conn:
            return self._owner_bytes(conn, owner)

    def compile_holders(self, compile_id: str) -> set[str]:
        with self.engine.connect() as conn:
            return set(conn.execute(
                select(CompileOwnerRow.owner).where(CompileOwnerRow.compile_id == compile_id)).scalars())

    def touch_compile(self, compile_id: str, within_s: float = 0.0) -> None:
        """The compile was used now (retention deletes the least recently used first); `within_s`: unless it was
        within that many seconds already (`_touch`)."""
        with self._write() as conn, conn.begin():
            self._touch(conn, compile_id, now_utc(), within_s)

    TOUCH_EVERY_S = 60.0

    @staticmethod
    def _touch(conn: Connection, compile_id: str, ts: datetime, within_s: float) -> None:
        """used_at = ts, unless it was set within `within_s` (TOUCH_EVERY_S where a request touches it: least recently
        used to the minute: retention needs no finer order, and a download need not write at all)."""
        conn.execute(update(CompileRow).where(
            CompileRow.id == compile_id,
            or_(CompileRow.used_at.is_(None), CompileRow.used_at < ts - timedelta(seconds=within_s)))
            .values(used_at=ts))

    def delete_compile(self, compile_id: str, owner: str, *, admin: bool = False) -> str:
        """`owner` lets go of a compile: "deleted" (it held it alone, or `admin`, or nobody held it: a compile stored
        before owners), "released" (other owners still hold it: it stays for them), "forbidden" (it does not hold
        it), "missing"."""
        with self._write() as conn, conn.begin():
            if conn.execute(select(CompileRow.seq).where(CompileRow.id == compile_id)).first() is None:
                return "missing"
            holders = set(conn.execute(
                select(CompileOwnerRow.owner).where(CompileOwnerRow.compile_id == compile_id)).scalars())
            if holders and not admin:
                if owner not in holders:
                    return "forbidden"
                if holders != {owner}:
                    conn.execute(delete(CompileOwnerRow).where(CompileOwnerRow.compile_id == compile_id,
                                                               CompileOwnerRow.owner == owner))
                    return "released"
            self._delete_compiles(conn, [compile_id])
        return "deleted"

    @staticmethod
    def _delete_compiles(conn: Connection, ids: list[str]) -> None:
        conn.execute(delete(CompileOwnerRow).where(CompileOwnerRow.compile_id.in_(ids)))
        conn.execute(delete(CompileBlobRow).where(CompileBlobRow.compile_id.in_(ids)))
        conn.execute(delete(CompileRow).where(CompileRow.id.in_(ids)))

    def _put_blob(self, conn: Connection, compile_id: str, kind: str, data: bytes) -> None:
        """Write a compile's bytes of `kind` (a retried compile's artifact replaces the one before)."""
        conn.execute(delete(CompileBlobRow).where(CompileBlobRow.compile_id == compile_id, CompileBlobRow.kind == kind))
        conn.execute(self._insert(CompileBlobRow).values(compile_id=compile_id, kind=kind, data=data))

    @staticmethod
    def _blob(conn: Connection, compile_id: str, kind: str) -> bytes | None:
        row = conn.execute(select(CompileBlobRow.data).where(
            CompileBlobRow.compile_id == compile_id, CompileBlobRow.kind == kind)).first()
        return None if row is None else bytes(row[0])

    def get_compile(self, compile_id: str) -> Compile | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(*self._compile_cols()).where(CompileRow.id == compile_id)).first()
        return None if row is None else self._compile(row)

    def compile_model_bytes(self, compile_id: str) -> bytes | None:
        """The model a compile runs; None if there is no such compile or its model was dropped (it failed for good)."""
        with self.engine.connect() as conn:
            return self._blob(conn, compile_id, "model")

    def compile_artifact(self, compile_id: str) -> bytes | None:
        """The tar of a done compile; None if there is none (not done, failed, or no such compile)."""
        with self.engine.connect() as conn:
            if conn.execute(select(CompileRow.seq).where(
                    CompileRow.id == compile_id, CompileRow.status == "done")).first() is None:
                return None
            return self._blob(conn, compile_id, "artifact")

    def list_compiles(self, *, hardware: str | None = None, status: str | None = None, limit: int = 50,
                      before: int | None = None) -> list[Compile]:
        """Newest first; `before` is the `seq` cursor of the previous page's last compile."""
        q = select(*self._compile_cols()).order_by(CompileRow.seq.desc()).limit(limit)
        if hardware:
            q = q.where(CompileRow.hardware == hardware)
        if status:
            q = q.where(CompileRow.status == status)
        if before is not None:
            q = q.where(CompileRow.seq < before)
        with self.engine.connect() as conn:
            return [self._compile(r) for r in conn.execute(q).all()]

    def start_compile(self, compile_id: str) -> int:
        """Mark a queued (or resumed) compile running; returns its attempt number, 0 if it is finished."""
        with self._write() as conn, conn.begin():
            conn.execute(
                update(CompileRow).where(CompileRow.id == compile_id, CompileRow.status.not_in(FINAL))
                .values(status="running", attempts=CompileRow.attempts + 1, updated_at=now_utc())
            )
            row = conn.execute(
                select(CompileRow.attempts, CompileRow.status).where(CompileRow.id == compile_id)
            ).first()
        return int(row[0]) if row and row[1] == "running" else 0

    def compile_progress(self, compile_id: str, done: int, total: int) -> None:
        with self._write() as conn, conn.begin():
            conn.execute(
                update(CompileRow).where(CompileRow.id == compile_id, CompileRow.status.not_in(FINAL))
                .values(ops_done=done, ops_total=total, updated_at=now_utc())
            )

    def finish_compile(self, compile_id: str, summary: dict[str, Any], artifact: bytes) -> bool:
        """Store a compile's summary and artifact and mark it done, in one write; False if it had finished."""
        ts = now_utc()
        ops = len(summary.get("ops", []))
        text_ = json.dumps(summary, separators=(",", ":"))
        with self._write() as conn, conn.begin():
            done = conn.execute(
                update(CompileRow).where(CompileRow.id == compile_id, CompileRow.status.not_in(FINAL))
                .values(status="done", summary=text_, artifact_bytes=len(artifact),
                        artifact_sha256=hashlib.sha256(artifact).hexdigest(), error=None, updated_at=ts,
                        finished_at=ts, ops_done=ops, ops_total=ops, used_at=ts,
                        stored_bytes=CompileRow.stored_bytes + len(artifact) + len(text_))
            ).rowcount > 0
            if done:
                self._put_blob(conn, compile_id, "artifact", artifact)
            return done

    def fail_compile(self, compile_id: str, error: dict[str, Any], *, final: bool = False) -> bool:
        """Mark an unfinished compile failed with `error` ({loc, msg, type}); False if it had finished. `final`:
        the model is at fault, so the compile is never run again and its model's bytes are dropped."""
        ts = now_utc()
        values: dict[str, Any] = dict(status="failed", error=json.dumps(error), updated_at=ts, finished_at=ts)
        with self._write() as conn, conn.begin():
            if final:
                model_len = select(func.coalesce(func.sum(func.length(CompileBlobRow.data)), 0)).where(
                    CompileBlobRow.compile_id == compile_id, CompileBlobRow.kind == "model").scalar_subquery()
                values.update(stored_bytes=CompileRow.stored_bytes - model_len)
            failed = conn.execute(
                update(CompileRow).where(CompileRow.id == compile_id, CompileRow.status.not_in(FINAL))
                .values(**values)
            ).rowcount > 0
            if failed and final:
                conn.execute(delete(CompileBlobRow).where(
                    CompileBlobRow.compile_id == compile_id, CompileBlobRow.kind == "model"))
            return failed

    def retry_compile(self, compile_id: str, deadline: float) -> bool:
        """Queue a failed compile again (its failure was the server's, not the model's); True for the one caller
        that did (concurrent askers share that retry)."""
        with self._write() as conn, conn.begin():
            return conn.execute(
                update(CompileRow).where(CompileRow.id == compile_id, CompileRow.status == "failed")
                .values(status="queued", error=None, ops_done=0, updated_at=now_utc(), finished_at=None,
                        deadline=deadline)
            ).rowcount > 0

    def unfinished_compiles(self) -> list[tuple[str, str | None]]:
        """(id, owner who asked first) of every unfinished compile, oldest first."""
        with self.engine.connect() as conn:
            return [(i, o) for i, o in conn.execute(
                select(CompileRow.id, CompileRow.owner).where(CompileRow.status.not_in(FINAL)).order_by(CompileRow.seq))]

    def expire_compiles(self, now: float | None = None) -> list[str]:
        """Fail every unfinished compile past its deadline; returns their ids."""
        now = time.time() if now is None else now
        with self.engine.connect() as conn:
            ids = list(conn.execute(
                select(CompileRow.id).where(CompileRow.status.not_in(FINAL), CompileRow.deadline < now)
            ).scalars())
        return [i for i in ids if self.fail_compile(
            i, {"loc": [], "msg": "the compile exceeded its time limit", "type": "time_limit"})]

    # -- retention ------------------------------------------------------------------------------

    def apply_retention(self, *, compile_max_age_s: float, compile_max_bytes: int, job_max_age_s: float,
                        batch: int = 200) -> dict[str, int]:
        """Delete finished compiles unused for `compile_max_age_s`, then the least recently used finished ones while
        all compiles together are over `compile_max_bytes` (queued and running ones are never deleted), and
        /schedule jobs finished over `job_max_age_s` ago (their plans stay). SQLite then gives the space back
        (`reclaim`). Returns how many of each went."""
        now = now_utc()
        finished = CompileRow.status.in_(FINAL)
        used = func.coalesce(CompileRow.used_at, CompileRow.updated_at)
        with self.engine.connect() as conn:
            old = list(conn.execute(select(CompileRow.id).where(
                finished, used < now - timedelta(seconds=compile_max_age_s))).scalars())
            total = int(conn.execute(select(func.coalesce(func.sum(CompileRow.stored_bytes), 0))).scalar_one())
            by_use = conn.execute(select(CompileRow.id, CompileRow.stored_bytes).where(finished)
                                  .order_by(used, CompileRow.seq)).all() if total > compile_max_bytes else []
        gone = set(old)
        total -= sum(int(b) for i, b in by_use if i in gone)
        for compile_id, size in by_use:
            if total <= compile_max_bytes:
                break
            if compile_id not in gone:
                gone.add(compile_id)
                total -= int(size)
        ids = sorted(gone)
        for i in range(0, len(ids), batch):
            with self._write() as conn, conn.begin():
                self._delete_compiles(conn, ids[i:i + batch])
        jobs = 0
        while True:
            with self._write() as conn, conn.begin():
                stale = list(conn.execute(select(JobRow.id).where(
                    JobRow.finished_at < now - timedelta(seconds=job_max_age_s)).limit(batch)).scalars())
                if stale:
                    conn.execute(delete(JobLayerRow).where(JobLayerRow.job_id.in_(stale)))
                    conn.execute(delete(JobRow).where(JobRow.id.in_(stale)))
            jobs += len(stale)
            if len(stale) < batch:
                break
        self.reclaim()
        return {"compiles": len(ids), "jobs": jobs}

    def reclaim(self) -> None:
        """SQLite: return free pages to the file system (incremental vacuum; the file is made
        auto_vacuum=INCREMENTAL by `migrate.upgrade`) and truncate the WAL: deleted compiles' blobs otherwise stay
        in the file as free pages. PostgreSQL reuses deleted rows' space after its autovacuum; nothing to do here."""
        if self.dialect != "sqlite":
            return
        conn = self.engine.raw_connection()
        try:
            cur = conn.cursor()
            if cur.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
                free = cur.execute("PRAGMA freelist_count").fetchone()[0]
                while free:  # in steps, each its own short write: other writers go between them
                    # (executescript steps the pragma to its end; execute() steps it once: one page freed)
                    cur.executescript(f"PRAGMA incremental_vacuum({RECLAIM_STEP_PAGES});")
                    before, free = free, cur.execute("PRAGMA freelist_count").fetchone()[0]
                    if free >= before:
                        break
            cur.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            cur.close()
        finally:
            conn.close()

    def compile_bytes(self) -> int:
        """What every stored compile holds together."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.coalesce(func.sum(CompileRow.stored_bytes), 0))).scalar_one())

    # -- claims: one solver per key across processes -------------------------------------------

    def claim(self, key: str, owner: str, ttl_s: float) -> bool:
        """Take the right to solve `key`; True if this owner holds it now (new, expired or its own)."""
        now = time.time()
        with self._write() as conn, conn.begin():
            conn.execute(
                delete(ClaimRow).where(ClaimRow.key == key, (ClaimRow.expires_at < now) | (ClaimRow.owner == owner))
            )
            stmt = self._insert(ClaimRow).values(key=key, owner=owner, expires_at=now + ttl_s)
            stmt = stmt.on_conflict_do_nothing(index_elements=["key"]).returning(ClaimRow.key)
            return conn.execute(stmt).first() is not None  # (rowcount is not reliable for upserts)

    def renew_claims(self, keys: Sequence[str], owner: str, ttl_s: float) -> None:
        if not keys:
            return
        with self._write() as conn, conn.begin():
            conn.execute(
                update(ClaimRow).where(ClaimRow.key.in_(list(keys)), ClaimRow.owner == owner)
                .values(expires_at=time.time() + ttl_s)
            )

    def release(self, key: str, owner: str) -> None:
        with self._write() as conn, conn.begin():
            conn.execute(delete(ClaimRow).where(ClaimRow.key == key, ClaimRow.owner == owner))

    def claim_holder(self, key: str) -> tuple[str, float] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(ClaimRow.owner, ClaimRow.expires_at).where(ClaimRow.key == key)).first()
        return None if row is None else (row[0], row[1])


def open_store(url: str, *, migrate: bool = True) -> Store:
    return Store(url, migrate=migrate)


__all__ = ["AsyncPlanReader", "CachedPlan", "Compile", "Job", "QuotaExceeded", "StoredModule", "Store", "open_store",
           "make_engine"]
