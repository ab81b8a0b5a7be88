"""Every knob of the service, worker and CLI in one place, read from the environment once.

Variables are `TILEPLAN_<FIELD>` (e.g. `TILEPLAN_DATABASE_URL`, `TILEPLAN_TOKENS`). Command-line flags
override them by passing keyword arguments to `Settings(...)`; no other module reads the environment.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TILEPLAN_", extra="ignore")

    data_dir: Path = Field(default=Path("data"), description="Where the default SQLite cache lives (relative: to the working directory).")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the plan cache: sqlite:///path.db or postgresql://user@host/db. "
        "Default: SQLite file <data_dir>/tileplan.db.",
    )
    queue: Literal["local", "procrastinate"] = Field(
        default="local",
        description="local: solves run in a process pool inside `tileplan serve`; procrastinate: durable jobs "
        "on PostgreSQL, run by `tileplan worker` processes.",
    )
    solver_processes: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=256)
    module_processes: int = Field(default=1, ge=1, le=64, description=(
        "Processes that build modules (GET /plans/{key}/module, codegen), apart from the solvers, at a lower priority."))

    # Limits
    max_request_bytes: int = Field(default=2 * 1024 * 1024, gt=0)
    max_layers: int = Field(default=512, gt=0, description="Layers per POST /schedule.")
    max_time_limit_s: float = Field(default=120.0, gt=0, description="Cap on options.time_limit_s per layer.")
    wait_limit_s: float = Field(default=25.0, ge=0, description="How long POST /schedule waits before answering 202.")
    job_time_limit_s: float = Field(default=3600.0, gt=0, description="A job not finished by then is failed.")
    solve_overhead_s: float = Field(default=5.0, ge=0, description=(
        "What a layer's solve may take beyond options.time_limit_s per mapper run (model building, re-ranking); past "
        "it the solve stops itself and the layer is a 422 at options.time_limit_s."))
    solve_grace_s: float = Field(default=30.0, ge=0, description=(
        "Slack over a solve's budget before its process is killed (only native code that cannot stop itself)."))
    memo_max_bytes: int = Field(default=16 * 1024 * 1024, ge=0, description=(
        "Bytes the API keeps of parsed and keyed layers (cache hits skip re-validation); least recently used go first."))
    codegen_time_limit_s: float = Field(default=120.0, gt=0, description="Hard limit on building one plan's module.")
    compile_time_limit_s: float = Field(default=1800.0, gt=0, description="Hard limit on one POST /compile's compile.")
    max_compile_bytes: int = Field(default=128 * 1024 * 1024, gt=0, description=(
        "Request body limit of POST /compile (a model as base64 or an upload); other requests: max_request_bytes."))

    # Work on users' input outside the API process (tileplan.jobs.sandbox)
    sandbox_processes: int = Field(default=1, ge=1, le=64, description=(
        "Processes that read inline descriptors and evaluate mappings (POST /schedule, /hardware, /evaluate)."))
    sandbox_time_limit_s: float = Field(default=10.0, gt=0, description=(
        "Longest reading one descriptor or evaluating one mapping may take; past it: 422."))
    sandbox_memory_mb: int = Field(default=1024, ge=256, description=(
        "Data-segment limit of each sandbox process (MiB); past it: 422."))
    max_descriptor_bytes: int = Field(default=256 * 1024, gt=0, description=(
        "Largest inline descriptor (its JSON, or its YAML source) a request may carry; past it: 422, before parsing."))
    descriptor_cache_bytes: int = Field(default=8 * 1024 * 1024, ge=0, description=(
        "Bytes of resolved inline descriptors the API keeps, by fingerprint of what was sent."))
    max_layer_extent: int = Field(default=1 << 20, gt=0, description=(
        "Largest size of any layer field (channels, image sides, M/K/N, kernel, stride, ...); past it: 422."))

    # Access
    tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated API tokens; empty: no tokens needed."
    )
    protect_reads: bool = Field(default=False, description="With tokens set, require one on every endpoint.")

    # Durability of distributed work
    claim_ttl_s: float = Field(default=30.0, gt=0, description="A solve claim not renewed for this long is free.")
    heartbeat_s: float = Field(default=5.0, gt=0, description="Worker heartbeat interval (procrastinate).")
    worker_poll_s: float = Field(default=5.0, gt=0, description=(
        "How often an idle worker looks for jobs besides being notified of them (LISTEN, re-established after the "
        "database comes back)."))
    stalled_after_s: float = Field(default=20.0, gt=0, description="A worker silent this long is dead; retry its jobs.")
    max_attempts: int = Field(default=5, ge=1)

    log_level: str = "info"

    @field_validator("tokens", mode="before")
    @classmethod
    def _split_tokens(cls, v: object) -> object:
        if isinstance(v, str):
            return [t.strip() for t in v.split(",") if t.strip()]
        return v

    def db_url(self) -> str:
        if self.database_url:
            return normalise_db_url(self.database_url)
        return f"sqlite:///{self.data_dir / 'tileplan.db'}"


def normalise_db_url(url: str) -> str:
    """`postgresql://` and `postgres://` mean psycopg 3 (the only PostgreSQL driver we ship)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def is_postgres(url: str) -> bool:
    return url.startswith("postgresql")


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL as libpq/psycopg understands it (procrastinate's connector)."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment on first use."""
    return Settings()
