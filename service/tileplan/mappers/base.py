"""The mapper interface and registry.

A mapper takes a Problem and a HardwareDescriptor and returns a Mapping (in contract form) with a
note on how it was found. It may ask `check` and `cost`; nothing else in the core asks a mapper.
Mappers register themselves by name; `get_mapper(name)` imports the built-in ones on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from pydantic import BaseModel, Field, model_validator

from tileplan.errors import InputError
from tileplan.hardware import HardwareDescriptor
from tileplan.mapping import Mapping
from tileplan.problem import Problem
from tileplan.strict import StrictModel

# Every mapper searches for the plan that runs best as Tileplan's generated code (on hardware with a software
# library, where it matters: tileplan.cost.gemmini, executors); the hand-written baseline runs as the library.
TILEPLAN = "tileplan"


class Objective(StrictModel):
    """Weights of the multi-objective (normalised to sum to 1 when used)."""

    unknown_what: ClassVar[str] = "objective"

    latency: float = Field(default=0.6, ge=0)
    energy: float = Field(default=0.3, ge=0)
    memory_utilization: float = Field(default=0.1, ge=0)

    @model_validator(mode="after")
    def _some_weight(self) -> Objective:
        if self.latency + self.energy + self.memory_utilization <= 0:
            raise ValueError("at least one objective weight must be positive")
        return self

    def normalised(self) -> tuple[float, float, float]:
        s = self.latency + self.energy + self.memory_utilization
        return self.latency / s, self.energy / s, self.memory_utilization / s


class MapperOptions(BaseModel):
    objective: Objective = Objective()
    time_limit_s: float = Field(default=10.0, gt=0, le=600)
    seed: int = 0
    samples: int = Field(default=200, gt=0, le=100_000, description="Candidates tried by the random mapper.")
    dataflow: str | None = Field(default=None, description="Fix the dataflow instead of letting the mapper choose.")


class SolverInfo(BaseModel):
    status: str = Field(description="optimal | time_limit | feasible | heuristic")
    seconds: float
    mip_gap: float | None = None
    objective: float | None = None
    candidates: int = Field(default=1, description="Legal candidates the mapper scored.")


@dataclass
class MapperResult:
    mapping: Mapping
    solver: SolverInfo
    notes: list[str] = field(default_factory=list)


class Mapper(Protocol):
    name: str
    version: str

    def map(self, problem: Problem, hw: HardwareDescriptor, options: MapperOptions) -> MapperResult: ...


def searched_dataflows(hw: HardwareDescriptor, requested: str | None) -> list[str]:
    """The dataflows a mapper searches: the one asked for, else those the hardware's software library runs
    (tileplan.execution; that is what executes, and what the calibrated cost model describes; any other
    would be judged by the uncalibrated loop-nest model), else all of them."""
    if requested is not None:
        if requested not in hw.dataflow_names:
            raise InputError(("options", "dataflow"), f"unknown dataflow {requested!r}; {hw.name} has {hw.dataflow_names}")
        return [requested]
    from tileplan.execution import library_dataflows

    return library_dataflows(hw) or hw.dataflow_names


_REGISTRY: dict[str, Callable[[], Mapper]] = {}
_BUILTIN_MODULES = (
    "tileplan.mappers.cosa",
    "tileplan.mappers.gemmini_auto",
    "tileplan.mappers.random_search",
    "tileplan.mappers.exhaustive",
)


def register(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        _REGISTRY[name] = cls
        return cls

    return deco


def _load_builtins() -> None:
    for mod in _BUILTIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:  # a real missing dependency, not a mapper that does not exist yet
                raise


def available_mappers() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get_mapper(name: str) -> Mapper:
    _load_builtins()
    if name == "gemmini_auto":
        name = "gemmini-auto"
    if name not in _REGISTRY:
        raise InputError(("options", "mapper"), f"unknown mapper {name!r}; one of {sorted(_REGISTRY)}")
    return _REGISTRY[name]()
