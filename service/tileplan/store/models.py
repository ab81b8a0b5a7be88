"""Tables of the plan cache, the job records and the model compiles (SQLAlchemy 2). Alembic migrations create them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Float, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class PlanRow(Base):
    """A solved plan, immutable once written. `doc` is the Plan JSON without the parts that depend on
    who asked (`layer`, `hardware` name, `cached`); those are kept in their own columns."""

    __tablename__ = "plans"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    hardware: Mapped[str] = mapped_column(String(200), index=True)
    op: Mapped[str] = mapped_column(String(16), index=True)
    layer_name: Mapped[str] = mapped_column(String(200), default="")
    mapper: Mapped[str] = mapped_column(String(32))
    solver_version: Mapped[str] = mapped_column(String(64))
    cycles: Mapped[float] = mapped_column(Float)
    energy_pj: Mapped[float] = mapped_column(Float)
    baseline_cycles: Mapped[float | None] = mapped_column(Float, nullable=True)
    solve_seconds: Mapped[float] = mapped_column(Float)
    layer: Mapped[str] = mapped_column(Text)
    doc: Mapped[str] = mapped_column(Text)
    descriptor: Mapped[str | None] = mapped_column(Text, nullable=True)  # the HardwareDescriptor solved for (JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ModuleRow(Base):
    """The generated module of a plan (same key), or why it could not be generated. Written once."""

    __tablename__ = "modules"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))  # ok | error
    name: Mapped[str] = mapped_column(String(200))  # the kernel's C name
    tvmscript: Mapped[str | None] = mapped_column(Text, nullable=True)
    c_source: Mapped[str | None] = mapped_column(Text, nullable=True)
    tar: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    notes: Mapped[str] = mapped_column(Text)  # JSON list of strings
    model_cycles: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # the CodegenError's reason
    build_seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class HardwareRow(Base):
    """A descriptor registered through POST /hardware (the catalog itself lives in files)."""

    __tablename__ = "hardware"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    descriptor: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)  # fingerprint of the registering token
    version: Mapped[int] = mapped_column(Integer, default=1)  # 1, then +1 per replacement (PUT)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class JobRow(Base):
    """One POST /schedule that needed solving: its request, progress and outcome."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), index=True)  # queued | running | done | failed
    hardware: Mapped[str] = mapped_column(String(200))
    request: Mapped[str] = mapped_column(Text)  # JSON: hardware descriptor, layers, options, keys
    total: Mapped[int] = mapped_column(Integer)
    done: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON list of {loc, msg, type}
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True, index=True)
    deadline: Mapped[float] = mapped_column(Float)  # epoch seconds
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)  # whose share of the solvers it runs in


class JobLayerRow(Base):
    """One unique layer (plan key) of a job."""

    __tablename__ = "job_layers"
    __table_args__ = (UniqueConstraint("job_id", "key", name="uq_job_layers_job_id_key"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    key: Mapped[str] = mapped_column(String(64), index=True)
    idx: Mapped[int] = mapped_column(Integer)  # first position of the layer in the request
    status: Mapped[str] = mapped_column(String(16))  # pending | running | done | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ClaimRow(Base):
    """Who is solving a plan key right now, so two processes never solve the same layer at once."""

    __tablename__ = "claims"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[float] = mapped_column(Float)  # epoch seconds


class CompileRow(Base):
    """One whole-model compile (POST /compile), keyed by the digest of everything it depends on: written when
    its request is accepted, its summary added (and its artifact stored in `compile_blobs`) in one write when it is
    done. Its model and artifact bytes live in `compile_blobs`, not here: SQLite rewrites a whole row on every
    UPDATE, and this row is updated often (progress, status, use), which rewrote a 64 MB model each time."""

    __tablename__ = "compiles"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)  # queued | running | done | failed
    model_name: Mapped[str] = mapped_column(String(200))
    model_sha256: Mapped[str] = mapped_column(String(64))
    hardware: Mapped[str] = mapped_column(String(200), index=True)
    request: Mapped[str] = mapped_column(Text)  # JSON: descriptor, options, input_shapes
    ops_done: Mapped[int] = mapped_column(Integer, default=0)
    ops_total: Mapped[int] = mapped_column(Integer, default=0)
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)
    artifact_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # the artifact's length, once done
    artifact_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON {loc, msg, type}
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    deadline: Mapped[float] = mapped_column(Float)  # epoch seconds
    stored_bytes: Mapped[int] = mapped_column(BigInteger, default=0)  # model + request + summary + artifact
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True, index=True)
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)  # who asked first: whose share it runs in


class CompileBlobRow(Base):
    """A compile's large bytes, each written once and read or deleted whole: kind "model" (the ONNX file, kept until
    the compile ends for good: a restarted server resumes it) and "artifact" (the program's tar, once done)."""

    __tablename__ = "compile_blobs"

    compile_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class CompileOwnerRow(Base):
    """An owner holding a compile: each owner that asked for it (the same request is one compile). Quotas count
    every compile an owner holds; the compile goes when the last holder deletes it (or by retention)."""

    __tablename__ = "compile_owners"

    compile_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
