"""Typed results (plain dataclasses, so the client needs no pydantic). Every one keeps the service's JSON in
`raw`, so fields the service adds later are not lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Metrics:
    cycles: float
    energy_pj: float
    utilization: float
    dram_bytes: float
    ideal_cycles: float
    bound: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Metrics:
        return cls(
            cycles=float(d["cycles"]), energy_pj=float(d.get("energy_pj", 0.0)),
            utilization=float(d.get("utilization", 0.0)), dram_bytes=float(d.get("dram_bytes", 0.0)),
            ideal_cycles=float(d.get("ideal_cycles", 0.0)), bound=str(d.get("bound", "")), raw=d,
        )


@dataclass(frozen=True)
class Baseline:
    mapper: str
    mapping: dict[str, Any]
    metrics: Metrics
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Baseline:
        return cls(mapper=d["mapper"], mapping=d["mapping"], metrics=Metrics.from_dict(d["metrics"]),
                   notes=list(d.get("notes") or []))


@dataclass(frozen=True)
class Plan:
    key: str
    layer: dict[str, Any]
    hardware: str
    mapper: str
    mapping: dict[str, Any]
    metrics: Metrics
    baseline: Baseline | None
    solver: dict[str, Any]
    cached: bool
    links: dict[str, str]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    cached_at: str | None = None  # when the service cached it (UTC, ISO 8601); only on cached plans
    notes: list[str] = field(default_factory=list)  # how the mapper found it (time limit reached, fallbacks)

    @property
    def name(self) -> str:
        return str(self.layer.get("name", "") or "")

    @property
    def speedup(self) -> float | None:
        """Baseline cycles / plan cycles (> 1: faster than the baseline, `baseline.mapper`)."""
        if self.baseline is None or not self.metrics.cycles:
            return None
        return self.baseline.metrics.cycles / self.metrics.cycles

    @property
    def slower_than_baseline(self) -> bool:
        return self.baseline is not None and self.metrics.cycles > self.baseline.metrics.cycles * (1 + 1e-9)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        return cls(
            key=d["key"], layer=d.get("layer", {}), hardware=d.get("hardware", ""), mapper=d.get("mapper", ""),
            mapping=d.get("mapping", {}), metrics=Metrics.from_dict(d["metrics"]),
            baseline=Baseline.from_dict(d["baseline"]) if d.get("baseline") else None,
            solver=d.get("solver", {}), cached=bool(d.get("cached", False)), links=d.get("links", {}), raw=d,
            cached_at=d.get("cached_at"), notes=list(d.get("notes") or []),
        )


@dataclass(frozen=True)
class Summary:
    layers: int
    unique_layers: int
    cached: int
    solved: int
    cycles: float
    energy_pj: float
    baseline_cycles: float | None
    speedup: float | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    baseline_mapper: str | None = None  # who planned the baselines `speedup` compares with
    seconds: float | None = None  # how long the request (or its job) took

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Summary:
        return cls(
            layers=int(d.get("layers", 0)), unique_layers=int(d.get("unique_layers", 0)),
            cached=int(d.get("cached", 0)), solved=int(d.get("solved", 0)), cycles=float(d.get("cycles", 0.0)),
            energy_pj=float(d.get("energy_pj", 0.0)), baseline_cycles=d.get("baseline_cycles"),
            speedup=d.get("speedup"), raw=d, baseline_mapper=d.get("baseline_mapper"), seconds=d.get("seconds"),
        )


@dataclass(frozen=True)
class ScheduleResult:
    """The plans of a request, one per layer in request order, with the request's totals."""

    id: str
    status: str
    plans: list[Plan]
    summary: Summary
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    notes: list[str] = field(default_factory=list)  # what reading the request left out (e.g. unplanned ops)
    warnings: list[str] = field(default_factory=list)  # what did not go as asked (e.g. a module not built)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScheduleResult:
        return cls(id=d["id"], status=d["status"], plans=[Plan.from_dict(p) for p in d.get("plans", [])],
                   summary=Summary.from_dict(d.get("summary", {})), raw=d, notes=list(d.get("notes") or []),
                   warnings=list(d.get("warnings") or []))


@dataclass(frozen=True)
class Job:
    """A schedule request being solved (`status` queued | running | done | failed)."""

    id: str
    status: str
    done: int
    total: int
    errors: list[dict[str, Any]]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    created_at: str | None = None  # UTC, ISO 8601
    finished_at: str | None = None

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")

    @property
    def result(self) -> ScheduleResult | None:
        """The plans, once done."""
        return ScheduleResult.from_dict(self.raw) if self.status == "done" and "plans" in self.raw else None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Job:
        p = d.get("progress", {})
        return cls(id=d["id"], status=d["status"], done=int(p.get("done", 0)), total=int(p.get("total", 0)),
                   errors=d.get("errors") or [], raw=d, created_at=d.get("created_at"),
                   finished_at=d.get("finished_at"))


@dataclass(frozen=True)
class Evaluation:
    valid: bool
    metrics: Metrics | None
    violations: list[str]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evaluation:
        return cls(valid=bool(d["valid"]), metrics=Metrics.from_dict(d["metrics"]) if d.get("metrics") else None,
                   violations=list(d.get("violations", [])), raw=d)


@dataclass(frozen=True)
class Hardware:
    """A descriptor the service knows: from its catalog or registered."""

    name: str
    description: str
    source: str  # catalog | registered
    links: dict[str, str]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Hardware:
        return cls(name=d["name"], description=str(d.get("description", "")), source=str(d.get("source", "")),
                   links=d.get("links", {}), raw=d)


@dataclass(frozen=True)
class Module:
    """A plan's generated code: `text` for C and TVMScript, `data` for the tar (the bytes of either in `data`)."""

    key: str
    format: str  # c | tvmscript | tar
    data: bytes
    filename: str | None = None  # the tar's name as the service suggests it (`<layer>.tar`)
    model_cycles: float | None = None  # the cost model's cycles for the realised tiles
    notes: list[str] = field(default_factory=list)  # how the plan was realised (deviations from its tiles)

    @property
    def text(self) -> str:
        if self.format == "tar":
            raise ValueError("a tar module has no text: use .data (or save it)")
        return self.data.decode("utf-8")

    def save(self, path: str) -> str:
        """Write the module to `path` (bytes as served) and return the path. A tar is written only if it is one as
        the service packs it (`tileplan_client.archive.check_tar`), else ServiceError and nothing is written."""
        if self.format == "tar":
            from tileplan_client.archive import write_checked

            return write_checked(self.data, path, "module tar")
        with open(path, "wb") as f:
            f.write(self.data)
        return path


@dataclass(frozen=True)
class CompiledOp:
    """One op of a compiled model: where it runs (`accelerator` | `host`) and why, its plan and cycles."""

    name: str  # the ONNX node
    op: str
    where: str
    reason: str
    plan_key: str | None
    cycles_emulated: float | None  # the compile-time emulated run (accelerator ops)
    cycles_model: float | None  # the cost model's, for the tiles the code runs
    speedup: float | None  # modelled, over the hand-written library's tiling
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompiledOp:
        return cls(name=str(d.get("name", "")), op=str(d.get("op", "")), where=str(d.get("where", "")),
                   reason=str(d.get("reason", "")), plan_key=d.get("plan_key"), cycles_emulated=d.get("cycles_emulated"),
                   cycles_model=d.get("cycles_model"), speedup=d.get("speedup"), raw=d)


@dataclass(frozen=True)
class Compile:
    """A whole-model compile (`status` queued | running | done | failed); once done, its network summary: `ops`,
    `total`, `notes` (what stayed on the host and why, ...). The program itself: `client.artifact(compile)`."""

    id: str
    status: str
    model: str
    hardware: str
    ops_done: int
    ops_total: int
    ops: list[CompiledOp]
    total: dict[str, Any]
    notes: list[str]
    error: dict[str, Any] | None
    links: dict[str, str]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")

    @property
    def summary(self) -> dict[str, Any] | None:
        """The network summary as the service wrote it (None until done)."""
        s = self.raw.get("summary")
        return s if isinstance(s, dict) else None

    @property
    def host_ops(self) -> list[CompiledOp]:
        """The ops left on the host CPU (each with its `reason`)."""
        return [o for o in self.ops if o.where == "host"]

    @property
    def artifact_sha256(self) -> str | None:
        art = self.raw.get("artifact")
        return art.get("sha256") if isinstance(art, dict) else None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Compile:
        p = d.get("progress", {})
        summary = d.get("summary")
        s: dict[str, Any] = summary if isinstance(summary, dict) else {}
        return cls(id=d["id"], status=d["status"], model=str(d.get("model", "")), hardware=str(d.get("hardware", "")),
                   ops_done=int(p.get("ops_done", 0)), ops_total=int(p.get("ops_total", 0)),
                   ops=[CompiledOp.from_dict(o) for o in s.get("ops", [])], total=dict(s.get("total", d.get("total", {}))),
                   notes=list(d.get("notes") or s.get("notes") or []), error=d.get("error"), links=d.get("links", {}),
                   raw=d)
