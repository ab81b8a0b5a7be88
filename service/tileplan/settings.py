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
    # (hide_input_in_errors: a bad setting's error names the variable and why, never echoes tokens into a log)
    model_config = SettingsConfigDict(env_prefix="TILEPLAN_", extra="ignore", hide_input_in_errors=True)

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
    body_idle_s: float = Field(default=30.0, gt=0, description=(
        "A request body that brings no byte for this long is a 408 (a client that stops sending, or sends its "
        "declared Content-Length a byte at a time, no longer holds its connection and the request for ever)."))

    worker_memory_mb: int = Field(default=2048, ge=256, description=(
        "Data-segment limit (RLIMIT_DATA, MiB) of every solver, module-build and compile process (`tileplan serve`'s "
        "and `tileplan worker`'s): a solve or compile past it fails alone, as the request's fault (a 422, or the "
        "compile's error `memory_limit`), and its process is replaced. Measured: a float MLP's compile peaks at "
        "~390 MiB resident (230 MiB of data), TVM and the solvers reserve more address space than that but do not "
        "use it, which is why the data segment, not RLIMIT_AS, is capped."))

    intake_processes: int = Field(default=1, ge=1, le=64, description=(
        "Processes that read POST /compile bodies over 8 MiB and check their models (outside the API, under "
        "worker_memory_mb); smaller bodies have one process of their own, so a large model never holds them up."))
    compile_check_time_limit_s: float = Field(default=120.0, gt=0, description=(
        "Longest reading one POST /compile body or checking its model may take; past it: 422."))

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
    max_tensor_elements: int = Field(default=1 << 27, gt=0, description=(
        "Most elements of one tensor of a model to compile (an input shape given in input_shapes, a declared or "
        "inferred shape, an initializer, a constant an operator would make); past it: 422. 2^27: VGG-16's "
        "classifier weight (102,760,448) fits; a constant bomb of 2^27 float32 (512 MiB) is still bounded by "
        "worker_memory_mb."))
    max_compile_layers: int = Field(default=256, gt=0, description=(
        "Most distinct convolutions / matrix products (operator, input shapes, attributes) one compile plans (each is "
        "a mapper run of up to options.time_limit_s); past it: 422 before anything is stored."))
    compile_plan_budget_s: float = Field(default=600.0, gt=0, description=(
        "Seconds one POST /compile may spend planning its distinct layers with options.mapper; past it the layers "
        "left are planned by gemmini-auto (the library's hand-written tiling, milliseconds each) and the summary's "
        "notes say which (max_compile_layers x options.time_limit_s could otherwise hold the compile for hours)."))
    max_compile_macs: int = Field(default=1 << 37, gt=0, description=(
        "Most multiply-accumulates of a model whose compile runs the emulated run (options.emulate, the default): "
        "~100 s of the emulator; past it: 422 (options.emulate=false compiles without the run)."))
    max_compile_host_ops: int = Field(default=1 << 34, gt=0, description=(
        "Most element operations of a model's other nodes (inputs and outputs, pooling windows, sorts) in the "
        "emulated run: ~100 s of host C; past it: 422 (options.emulate=false compiles without the run)."))
    max_layer_extent: int = Field(default=1 << 20, gt=0, description=(
        "Largest size of any layer field (channels, image sides, M/K/N, kernel, stride, ...); past it: 422."))

    # Access
    tokens: Annotated[list[str], NoDecode] = Field(default_factory=list, description=(
        "Comma-separated API tokens, each `token` or `token:scope` with scope read, write or admin (a plain token "
        "is write: what every token could do before scopes); empty: no tokens needed."))
    protect_reads: bool = Field(default=False, description="With tokens set, require one on every endpoint.")

    # Storage and fairness (per owner: a token's fingerprint, or the client's address without tokens)
    compile_quota_bytes: int = Field(default=1 << 30, gt=0, description=(
        "Bytes of stored compiles (model, request, summary, artifact) one owner may hold; a new compile past it: 409."))
    compile_max_age_s: float = Field(default=30 * 86400.0, gt=0, description=(
        "A finished compile nobody has asked for (POST, GET .../artifact) for this long is deleted."))
    compile_store_max_bytes: int = Field(default=8 << 30, gt=0, description=(
        "Total bytes of stored compiles; past it the least recently used finished ones are deleted."))
    job_max_age_s: float = Field(default=7 * 86400.0, gt=0, description=(
        "Finished /schedule jobs are deleted this long after they finished (their plans stay cached)."))
    retention_interval_s: float = Field(default=300.0, gt=0, description=(
        "How often the server applies the retention settings (also after each compile it stores)."))
    owner_max_layers: int = Field(default=4, ge=1, description=(
        "Layers of one owner solved at once (local: at most the solver processes; procrastinate: over all "
        "workers); the rest wait, served round robin with other owners' layers."))
    owner_max_hardware: int = Field(default=100, ge=1, description=(
        "Descriptors one owner may have registered (POST /hardware, PUT of a new name); past it: 409. Each holds up "
        "to max_descriptor_bytes, and GET /hardware lists every one."))
    owner_max_compiles: int = Field(default=1, ge=1, description=(
        "Compiles of one owner run at once; the rest wait, served round robin with other owners' compiles."))

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

    @field_validator("tokens")
    @classmethod
    def _known_scopes(cls, v: list[str]) -> list[str]:
        token_scopes(v)  # a misspelt scope fails at start, not as a silently different token
        return v

    def db_url(self) -> str:
        if self.database_url:
            return normalise_db_url(self.database_url)
        return f"sqlite:///{self.data_dir / 'tileplan.db'}"


SCOPES = ("read", "write", "admin")  # each allows what the ones before it allow


def token_scopes(tokens: list[str]) -> list[tuple[str, str]]:
    """(token, scope) of each `TILEPLAN_TOKENS` entry: `token:scope` with a scope of SCOPES, or a plain token,
    which is `write` (before scopes every token could write; none could act on others' hardware, as admin may).
    A `:` followed by anything else is refused (naming the entry by position, never the token)."""
    out = []
    for i, entry in enumerate(tokens, 1):
        token, sep, scope = entry.rpartition(":")
        if not sep:
            token, scope = entry, "write"
        elif scope not in SCOPES:
            raise ValueError(f"entry {i}: unknown scope {scope[:20]!r} after ':' (read, write or admin; "
                             "a token without a scope is write)")
        if not token.strip():
            raise ValueError(f"entry {i}: an empty token")
        out.append((token.strip(), scope))
    return out


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
