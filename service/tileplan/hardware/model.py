"""The hardware descriptor (Pydantic v2) and its resolved, per-dataflow view.

A descriptor lists memory levels innermost first; the last one is the backing store (DRAM, no
capacity). Spatial fan-out is not written down but derived: a level with `instances` copies feeds
the level below it, so fanout(i) = instances(i-1) / instances(i), with the MAC array (rows x cols) below
level 0. Which tensor a level keeps and which dimensions its fan-out may unroll can differ per
dataflow (weight-stationary keeps W in the PE registers, output-stationary keeps O there): a
`Dataflow` carries those per-level overrides, and `HardwareDescriptor.resolve(dataflow)` returns the
`Architecture` the checker, cost model and mappers work on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tileplan.dims import DIMS, TENSORS, Dim, Tensor
from tileplan.units import parse_size
from tileplan.validation import NAME_MAX, SAFE_NAME, Float, Int


def _size(value: Any) -> int:
    return parse_size(value)


Size = Annotated[int, BeforeValidator(_size)]
DType = Literal["int4", "int8", "int16", "int32", "fp16", "bf16", "fp32"]
DTYPE_BITS: dict[str, int] = {"int4": 4, "int8": 8, "int16": 16, "int32": 32, "fp16": 16, "bf16": 16, "fp32": 32}


# Bounds that keep every derived quantity finite and every enumeration small (a descriptor is user input): far
# beyond any real accelerator, and each 422 names its bound.
MAX_PES = 1 << 24  # PEs in the array (rows x cols)
MAX_INSTANCES = 1 << 24
MAX_CAPACITY = 1 << 50  # bytes of one level
MAX_BLOCK = 1 << 16  # words per access (Timeloop block-size)
MIN_BANDWIDTH, MAX_BANDWIDTH = 1e-6, 1e12  # bytes per cycle per instance
MAX_ENERGY_PJ = 1e6
MAX_LEVELS = 16  # memory levels (the catalog's deepest: 6; CoSA's program and the random and exhaustive searches grow
# with them: 1,000 levels spent each request's whole solve budget, then failed it)
MAX_DATAFLOWS = 16  # dataflows of the array (the catalog's most: 2; a mapper searches each: 13,000 did likewise)


STORED = {"stored": True}  # model_validate(doc, context=STORED): a descriptor the store kept with a plan


def _at_most(field: str, limit: int, what: str) -> Any:
    """A before-validator: a list of more than `limit` items is refused before any item is read, unless the
    descriptor is one the store kept (context STORED: a plan solved before the bound keeps its descriptor readable)."""
    def check(v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, list) and len(v) > limit and not (info.context or {}).get("stored"):
            raise ValueError(f"{len(v)} {what}; at most {limit} on this server")
        return v
    return field_validator(field, mode="before")(check)


def _no_repeats(v: list[str] | None) -> list[str] | None:
    if v is not None and len(set(v)) != len(v):
        raise ValueError(f"names one more than once: {sorted(v)[:12]}{' ...' if len(v) > 12 else ''}")
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class AccessEnergy(_Strict):
    """Energy of moving one byte in or out of a level, in picojoules."""

    read_pj_per_byte: Float = Field(ge=0, le=MAX_ENERGY_PJ)
    write_pj_per_byte: Float = Field(ge=0, le=MAX_ENERGY_PJ)


class NetworkEnergy(_Strict):
    """Energy of the network between a level and the level (or MACs) below it, as Timeloop's inferred network charges
    it: per word a parent instance sends, `router_pj` for each router it passes and `hop_pj` for each hop, the hops
    estimated from the multicast factor and the fan-out (see cost/timeloop_network.py)."""

    hop_pj: Float = Field(default=0.0, ge=0, le=MAX_ENERGY_PJ, description="pJ per word per hop (Timeloop energy-per-hop, "
                          "or wire-energy x network word bits x tile width)")
    router_pj: Float = Field(default=0.0, ge=0, le=MAX_ENERGY_PJ, description="pJ per word per router (router-energy)")
    reduces: bool | None = Field(
        default=None, description="Whether the level adds partial sums in place (Timeloop reduction_supported); where "
        "it does not, outputs cross the network twice (read, then written back). None: all but a DRAM do.")


class MemoryLevel(_Strict):
    name: str = Field(min_length=1, max_length=NAME_MAX)
    capacity: Size | None = Field(
        default=None, description="Total bytes over all instances; omitted for the backing store (DRAM)."
    )
    word_bits: Int = Field(default=8, gt=0, le=1024, description="Bits per stored element (32 for an int32 accumulator).")
    instances: Int = Field(default=1, gt=0, le=MAX_INSTANCES)
    keeps: list[Tensor] = Field(description="Tensors stored at this level; the others bypass it.")
    partition: dict[Tensor, Float] | None = Field(
        default=None, description="Fixed share of capacity per tensor; omitted means one shared pool."
    )
    bandwidth: Float | None = Field(
        default=None, ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH, description="Bytes per cycle per instance, reads and writes together."
    )
    read_bandwidth: Float | None = Field(default=None, ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH)
    write_bandwidth: Float | None = Field(default=None, ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH)
    buffer_count: Literal[1, 2] = Field(default=1, description="2: tiles may be double buffered here.")
    spatial_dims: list[Dim] | None = Field(
        default=None, description="Dimensions that may be unrolled across this level's fan-out (None: any)."
    )
    array_axis: Literal["rows", "cols"] | None = Field(
        default=None, description="Which PE-array axis this level's fan-out spans, for code generation."
    )
    energy: AccessEnergy | None = None
    mesh_x: Int | None = Field(
        default=None, gt=0,
        description="Timeloop meshX: how many of this level's instances lie along the mesh's X axis (the rest "
        "along Y); a fan-out then splits into an X and a Y part. None: all along X (Timeloop's default).",
    )
    source_instances: int | None = Field(
        default=None, gt=0,
        description="Instances the Timeloop source file declares, where Tileplan splits the level differently "
        "(Gemmini's one accumulator becomes one slice per array column); Timeloop bundles follow the source.",
    )
    block_size: Int | None = Field(
        default=None, gt=0, le=MAX_BLOCK,
        description="Timeloop block-size: words one access of an instance moves (one row of its array). Under "
        "Timeloop's energy table an access costs one block's energy and a run's words count as ceil(words / block) "
        "accesses. None: 1.",
    )
    cluster_size: Int | None = Field(
        default=None, gt=0, le=MAX_INSTANCES,
        description="Timeloop cluster-size: instances built as one physical array, so one access serves the whole "
        "cluster (Simba's 64 PE registers per PE). Must divide the (source) instances. None: 1.",
    )

    technology: Literal["DRAM", "SRAM"] | None = Field(
        default=None,
        description="How Timeloop's energy table prices this level's accesses: 'DRAM' or 'SRAM' (an array by its "
        "size). None: DRAM for the backing store, SRAM on chip.",
    )
    source_entries: Int | None = Field(
        default=None, gt=0,
        description="Words the Timeloop source file states for its outermost level (a backing store with a size, "
        "e.g. an SRAM 'MainMemory'): timeloop-model checks the whole problem's tiles against them. Backing store "
        "only; the mappers still treat it as unbounded.",
    )
    multiple_buffering: Float | None = Field(
        default=None, gt=0, le=64,
        description="Timeloop multiple-buffering: a tile may use only floor(entries / this) of an instance's words "
        "(2.0: double buffering); the array, and so its access energy, stays the whole capacity. None: 1.",
    )
    addr_gen_energy_pj: Float | None = Field(
        default=None, ge=0, le=MAX_ENERGY_PJ,
        description="Timeloop addr-gen-energy: pJ per address generated (per word read or filled; per output word "
        "updated or filled), charged once per cluster used. None: Timeloop's table, which charges nothing.",
    )
    network: NetworkEnergy | None = Field(
        default=None,
        description="Energy of the network from this level to the one below (Timeloop's inferred network: "
        "energy-per-hop / wire-energy with tile-width, router-energy). None: free, as Timeloop's table has it.",
    )
    min_utilization: Float | None = Field(
        default=None, ge=0, le=1,
        description="Timeloop min-utilization: the kept tiles must fill at least this share of the usable words "
        "(timeloop-model refuses a map that leaves more empty). None: 0.",
    )

    @field_validator("keeps")
    @classmethod
    def _unique_keeps(cls, v: list[Tensor]) -> list[Tensor]:
        if len(set(v)) != len(v):
            raise ValueError(f"lists a tensor twice: {v}")
        return v

    _unique_dims = field_validator("spatial_dims")(_no_repeats)

    @model_validator(mode="after")
    def _partition_valid(self) -> MemoryLevel:
        if self.partition is not None:
            extra = set(self.partition) - set(self.keeps)
            if extra:
                raise ValueError(f"partition names {sorted(extra)}, which this level does not keep")
            if any(f <= 0 for f in self.partition.values()) or sum(self.partition.values()) > 1 + 1e-9:
                raise ValueError("partition shares must be positive and sum to at most 1")
            if set(self.partition) != set(self.keeps):
                raise ValueError(f"partition must give a share to every kept tensor {self.keeps}")
        if self.capacity is not None and not 0 < self.capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity {self.capacity} B is outside 1 B .. {MAX_CAPACITY} B")
        if self.mesh_x is not None and self.instances % self.mesh_x:
            raise ValueError(f"mesh_x {self.mesh_x} does not divide the {self.instances} instances")
        if self.capacity is not None and self.capacity % self.instances:
            raise ValueError(f"capacity {self.capacity} B does not divide into {self.instances} instances")
        if self.cluster_size is not None and (self.source_instances or self.instances) % self.cluster_size:
            raise ValueError(f"cluster_size {self.cluster_size} does not divide the "
                             f"{self.source_instances or self.instances} instances")
        if self.cluster_size not in (None, 1) and self.capacity is None:
            raise ValueError("cluster_size: the backing store is one array (Timeloop allows no cluster for DRAM)")
        if self.source_entries is not None and self.capacity is not None:
            raise ValueError("source_entries: only for the backing store (an on-chip level states its capacity)")
        return self


class DataflowLevel(_Strict):
    keeps: list[Tensor] | None = None
    spatial_dims: list[Dim] | None = None

    _unique = field_validator("keeps", "spatial_dims")(_no_repeats)


class Dataflow(_Strict):
    name: str = Field(min_length=1, max_length=NAME_MAX)
    levels: dict[str, DataflowLevel] = Field(
        default_factory=dict, description="Per-level overrides of keeps / spatial_dims under this dataflow."
    )


class PEArray(_Strict):
    rows: Int = Field(gt=0, le=MAX_PES)
    cols: Int = Field(gt=0, le=MAX_PES)
    dataflows: list[Dataflow] = Field(min_length=1)
    input_dtype: DType = "int8"
    weight_dtype: DType = "int8"
    acc_dtype: DType = "int32"
    output_dtype: DType = "int8"
    mac_energy_pj: Float | None = Field(default=None, ge=0, le=MAX_ENERGY_PJ)
    mesh_x: Int | None = Field(
        default=None, gt=0, le=MAX_PES, description="Timeloop meshX of the MACs (see MemoryLevel.mesh_x); None: all along X."
    )

    _bounded_dataflows = _at_most("dataflows", MAX_DATAFLOWS, "dataflows")

    @model_validator(mode="after")
    def _bounded(self) -> PEArray:
        if self.rows * self.cols > MAX_PES:
            raise ValueError(f"{self.rows} x {self.cols} PEs; at most {MAX_PES} in all")
        return self

    @property
    def macs(self) -> int:
        return self.rows * self.cols


class LoopConstraint(_Strict):
    """A Timeloop `temporal` or `spatial` constraint on one level's loops (a file's architecture_constraints), which
    timeloop-model checks every map against ("mapping violates architecture constraints")."""

    factors: dict[Dim, Int] = Field(
        default_factory=dict,
        description="Exact factor per dimension at this level (0: the whole bound; above the bound: the bound).",
    )
    max_factors: dict[Dim, Int] = Field(default_factory=dict, description="Largest factor per dimension (`D<=n`).")
    permutation: list[Dim] | None = Field(
        default=None, description="Loop order, innermost first, as Timeloop checks it (a prefix of the map's loops "
        "with factor > 1 followed by its unit dimensions).")
    split: Int | None = Field(default=None, ge=0, description="Spatial only: how many loops go along the mesh's X.")

    _unique = field_validator("permutation")(_no_repeats)

    @field_validator("factors", "max_factors")
    @classmethod
    def _non_negative(cls, v: dict[str, int]) -> dict[str, int]:
        if any(f < 0 for f in v.values()):
            raise ValueError("factors must not be negative")
        return v


class Constraints(_Strict):
    max_tile: dict[str, dict[Dim, Int]] = Field(
        default_factory=dict,
        description="Largest tile extent per dimension held at a level, e.g. {Accumulator: {K: 16}}.",
    )
    loops: dict[str, dict[Literal["temporal", "spatial"], LoopConstraint]] = Field(
        default_factory=dict,
        description="Timeloop loop constraints per level (factors, max factors, permutation, spatial split), as a "
        "Timeloop file's architecture_constraints state them; a plan keeps them, so timeloop-model accepts its map.",
    )


class HardwareDescriptor(_Strict):
    name: str = Field(pattern=SAFE_NAME, description="Letters, digits, '.', '_', '+', '-' (a URL path segment).")
    description: str = Field(default="", max_length=10_000)
    pe_array: PEArray
    memory_levels: list[MemoryLevel] = Field(min_length=2, description="Innermost first; the last is DRAM.")
    _bounded_levels = _at_most("memory_levels", MAX_LEVELS, "memory levels")
    constraints: Constraints = Constraints()
    cost_params: dict[str, Float] = Field(
        default_factory=dict, description="Calibrated cost-model parameters (see tileplan.cost.params)."
    )
    input_tiles: Literal["exact", "bounding_box"] = Field(
        default="exact",
        description="How much of the input a strided tile occupies and moves: 'exact' = only the rows and columns "
        "its filter taps touch (hardware that fetches strided windows exactly), 'bounding_box' = the whole span "
        "(p-1)*stride+(r-1)*dilation+1, as Timeloop sizes tiles (set when importing Timeloop YAML).",
    )
    word_elements: bool = Field(
        default=False,
        description="Every element occupies one word of the level holding it, whatever its type (Timeloop's rule: "
        "a partial sum spilled to an 8-bit DRAM moves as one 8-bit word); set when importing Timeloop YAML.",
    )
    cost_model: Literal["gemmini", "timeloop", "first-order"] | None = Field(
        default=None,
        description="The cost model plans are scored with unless a request names one: None picks by shape (the "
        "calibrated Gemmini model on Gemmini-like hierarchies, else first-order); Timeloop imports set 'timeloop'.",
    )

    @field_validator("cost_params")
    @classmethod
    def _known_params(cls, v: dict[str, float]) -> dict[str, float]:
        from tileplan.cost.params import CostParams  # the cost model imports this module

        unknown = sorted(set(v) - set(CostParams.model_fields))
        if unknown:
            raise ValueError(f"unknown parameters {unknown}; known: {sorted(CostParams.model_fields)}")
        try:
            CostParams.model_validate(v)  # each one's own range
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ValueError(f"{err['loc'][0]}: {err['msg']}") from None
        return v

    @model_validator(mode="after")
    def _hierarchy_valid(self) -> HardwareDescriptor:
        names = [lv.name for lv in self.memory_levels]
        if len(set(names)) != len(names):
            raise ValueError(f"memory_levels: level names must be unique, got {names}")
        *inner, top = self.memory_levels
        if top.capacity is not None:
            raise ValueError("memory_levels: the last (outermost) level is the backing store and has no capacity")
        if set(top.keeps) != set(TENSORS):
            raise ValueError("memory_levels: the last level must keep W, I and O")
        if top.instances != 1:
            raise ValueError("memory_levels: the last level must have 1 instance")
        for i, lv in enumerate(inner):
            if lv.capacity is None:
                raise ValueError(f"memory_levels[{i}].capacity: required for on-chip level {lv.name!r}")
        below = self.pe_array.macs
        for i, lv in enumerate(self.memory_levels):
            if below % lv.instances:
                raise ValueError(
                    f"memory_levels[{i}].instances: {lv.instances} does not divide the {below} instances below it"
                )
            below = lv.instances
        for df in self.pe_array.dataflows:
            for lname in df.levels:
                if lname not in names:
                    raise ValueError(f"pe_array.dataflows: {df.name!r} overrides unknown level {lname!r}")
        if len({df.name for df in self.pe_array.dataflows}) != len(self.pe_array.dataflows):
            raise ValueError("pe_array.dataflows: names must be unique")
        if self.pe_array.mesh_x is not None and self.pe_array.macs % self.pe_array.mesh_x:
            raise ValueError(f"pe_array.mesh_x: {self.pe_array.mesh_x} does not divide the {self.pe_array.macs} MACs")
        for lname in self.constraints.loops:
            if lname not in names:
                raise ValueError(f"constraints.loops: unknown level {lname!r}")
        for lname, dims in self.constraints.max_tile.items():
            if lname not in names:
                raise ValueError(f"constraints.max_tile: unknown level {lname!r}")
            if any(v <= 0 for v in dims.values()):
                raise ValueError(f"constraints.max_tile.{lname}: extents must be positive")
        return self

    @property
    def dataflow_names(self) -> list[str]:
        return [df.name for df in self.pe_array.dataflows]

    def level_index(self, name: str) -> int:
        for i, lv in enumerate(self.memory_levels):
            if lv.name == name:
                return i
        raise KeyError(name)

    def resolve(self, dataflow: str | None = None) -> Architecture:
        """The hierarchy as seen under one dataflow (default: the first listed)."""
        df = self.pe_array.dataflows[0] if dataflow is None else _find(self.pe_array.dataflows, dataflow)
        levels = []
        below = self.pe_array.macs
        in_bits = DTYPE_BITS[self.pe_array.input_dtype]
        for i, lv in enumerate(self.memory_levels):
            ov = df.levels.get(lv.name, DataflowLevel())
            keeps = frozenset(ov.keeps if ov.keeps is not None else lv.keeps)
            sdims = ov.spatial_dims if ov.spatial_dims is not None else lv.spatial_dims
            read_bw = lv.read_bandwidth or lv.bandwidth
            write_bw = lv.write_bandwidth or lv.bandwidth
            levels.append(
                ResolvedLevel(
                    index=i,
                    name=lv.name,
                    capacity=None if lv.capacity is None else _usable(lv),
                    array_bytes=None if lv.capacity is None else lv.capacity // lv.instances,
                    min_utilization=lv.min_utilization or 0.0,
                    addr_gen_pj=lv.addr_gen_energy_pj or 0.0,
                    hop_pj=lv.network.hop_pj if lv.network else 0.0,
                    router_pj=lv.network.router_pj if lv.network else 0.0,
                    reduces=(lv.network.reduces if lv.network and lv.network.reduces is not None
                             else (lv.technology or ("DRAM" if lv.capacity is None else "SRAM")) != "DRAM"),
                    word_bytes=lv.word_bits / 8,
                    instances=lv.instances,
                    fanout=below // lv.instances,
                    keeps=keeps,
                    partition={t: s for t, s in lv.partition.items()} if lv.partition else None,
                    spatial_dims=frozenset(sdims) if sdims is not None else frozenset(DIMS),
                    read_bandwidth=read_bw,
                    write_bandwidth=write_bw,
                    shared_bandwidth=lv.bandwidth is not None and lv.read_bandwidth is None,
                    buffer_count=lv.buffer_count,
                    energy=lv.energy,
                    max_tile={d: n for d, n in self.constraints.max_tile.get(lv.name, {}).items()},
                    is_backing_store=lv.capacity is None,
                    array_axis=lv.array_axis,
                    mesh_x=lv.mesh_x or lv.instances,
                    block_size=lv.block_size or 1,
                    cluster_size=lv.cluster_size or 1,
                    source_instances=lv.source_instances,
                    technology=lv.technology or ("DRAM" if lv.capacity is None else "SRAM"),
                    source_entries=lv.source_entries,
                )
            )
            below = lv.instances
        return Architecture(
            hardware=self,
            dataflow=df.name,
            levels=tuple(levels),
            macs=self.pe_array.macs,
            input_bytes=in_bits / 8,
            acc_bytes=DTYPE_BITS[self.pe_array.acc_dtype] / 8,
            output_bytes=DTYPE_BITS[self.pe_array.output_dtype] / 8,
            mac_mesh_x=self.pe_array.mesh_x or self.pe_array.macs,
        )


def mesh_split(
    factors: list[tuple[str, int]], x: int, y: int
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]] | None:
    """Spatial factors split over an x-by-y fan-out: (along X, along Y), the X side as full as it can be;
    None when no split fits (Timeloop's `split`: the factors before it go along X, the rest along Y)."""
    best: tuple[int, list[tuple[str, int]], list[tuple[str, int]]] | None = None
    for mask in range(1 << len(factors)):
        xs = [f for i, f in enumerate(factors) if mask >> i & 1]
        ys = [f for i, f in enumerate(factors) if not mask >> i & 1]
        px, py = math.prod(f for _, f in xs), math.prod(f for _, f in ys)
        if px <= x and py <= y and (best is None or px > best[0]):
            best = (px, xs, ys)
    return None if best is None else (best[1], best[2])


def _usable(lv: MemoryLevel) -> int:
    """Bytes per instance a tile may use: the capacity, less Timeloop's multiple-buffering (floor(entries / it) words,
    as timeloop-model's effective size)."""
    assert lv.capacity is not None
    per = lv.capacity // lv.instances
    if lv.multiple_buffering is None or lv.multiple_buffering == 1:
        return per
    words = math.floor(per * 8 / lv.word_bits / lv.multiple_buffering + 1e-9)
    return max(1, math.ceil(words * lv.word_bits / 8))


def _find(dataflows: list[Dataflow], name: str) -> Dataflow:
    for df in dataflows:
        if df.name == name:
            return df
    raise ValueError(f"unknown dataflow {name!r}; this hardware has {[d.name for d in dataflows]}")


@dataclass(frozen=True)
class ResolvedLevel:
    index: int
    name: str
    capacity: int | None  # bytes per instance; None for the backing store
    word_bytes: float
    instances: int
    fanout: int  # instances of the level below (or MACs) fed by one instance of this level
    keeps: frozenset[str]
    partition: dict[str, float] | None
    spatial_dims: frozenset[str]
    read_bandwidth: float | None  # bytes/cycle/instance; None = not a limit
    write_bandwidth: float | None
    shared_bandwidth: bool  # reads and writes share one port budget
    buffer_count: int
    energy: AccessEnergy | None
    max_tile: dict[str, int]
    is_backing_store: bool
    array_axis: str | None
    mesh_x: int = 1  # instances along the mesh's X axis (all of them unless the descriptor says otherwise)
    block_size: int = 1  # words per access (Timeloop block-size)
    cluster_size: int = 1  # instances one access serves (Timeloop cluster-size)
    source_instances: int | None = None  # instances as the Timeloop source declares them, where Tileplan splits
    technology: str = "SRAM"  # Timeloop's energy table: "DRAM" or "SRAM"
    source_entries: int | None = None  # the Timeloop source's size of its outermost level, in words
    array_bytes: int | None = None  # bytes per instance of the whole array (capacity less Timeloop's multiple-buffering)
    min_utilization: float = 0.0  # Timeloop's: the kept tiles fill at least this share of `capacity`
    addr_gen_pj: float = 0.0  # Timeloop's addr-gen-energy, pJ per address generated
    hop_pj: float = 0.0  # the network below this level: pJ per word per hop
    router_pj: float = 0.0  # and per word per router
    reduces: bool = True  # adds partial sums in place (outputs cross its network once per update)


@dataclass(frozen=True)
class Architecture:
    """A descriptor resolved under one dataflow: what the checker, cost model and mappers see."""

    hardware: HardwareDescriptor
    dataflow: str
    levels: tuple[ResolvedLevel, ...]
    macs: int
    input_bytes: float
    acc_bytes: float
    output_bytes: float
    mac_mesh_x: int = 1  # MACs along the mesh's X axis

    @property
    def name(self) -> str:
        return self.hardware.name

    def level(self, name: str) -> ResolvedLevel:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(name)

    def element_bytes(self, tensor: str, level: ResolvedLevel) -> float:
        """Bytes one element of `tensor` occupies at `level`.

        DRAM holds operands in the input type and final outputs in the output type. On chip, a stored
        element takes at least one word (Gemmini's 32-bit PE register holds one int8 weight), and
        outputs are partial sums: as wide as the level's word when that is an accumulator word
        (int32, or Simba's 24 bit), else the accumulation type.
        """
        if self.hardware.word_elements:
            return level.word_bytes
        if level.is_backing_store:
            return self.output_bytes if tensor == "O" else self.input_bytes
        if tensor == "O":
            return level.word_bytes if level.word_bytes >= 2 else self.acc_bytes
        return max(level.word_bytes, self.input_bytes)

    def fanout_xy(self, index: int) -> tuple[int, int]:
        """(X, Y) parts of level `index`'s fan-out on a 2-D mesh: its child's mesh over its own."""
        lv = self.levels[index]
        child_x = self.mac_mesh_x if index == 0 else self.levels[index - 1].mesh_x
        x = max(1, child_x // lv.mesh_x)
        return (x, lv.fanout // x) if lv.fanout % x == 0 else (lv.fanout, 1)

    @property
    def total_fanout(self) -> int:
        return math.prod(lv.fanout for lv in self.levels)
