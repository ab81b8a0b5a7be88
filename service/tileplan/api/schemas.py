"""Request and response bodies of the HTTP API (contracts.md), for validation and the OpenAPI docs.

Layers, descriptors and mappings arrive as plain objects and are parsed by the core (`parse_layer`,
`load_descriptor`, `parse_mapping`), whose errors name the field; the contract types document them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from tileplan.plan import Evaluation, Plan, ScheduleOptions
from tileplan.validation import check_storable

HARDWARE_DOC = (
    "A catalog or registered name (`gemmini-16x16`), a Tileplan descriptor object, or "
    '`{"name": ..., "format": "tileplan" | "timeloop", "source": "<YAML text>"}`.'
)
LAYER_EXAMPLE = {
    "name": "res2_1x1", "op": "conv2d", "in_channels": 64, "out_channels": 256, "in_h": 56, "in_w": 56,
    "kernel": [1, 1],
}


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        check_storable(data)  # an InputError: a 422 at the field, like every other
        return data


class ScheduleRequest(_Request):

    hardware: str | dict[str, Any] = Field(description=HARDWARE_DOC, examples=["gemmini-16x16"])
    layers: list[dict[str, Any]] | None = Field(
        default=None, description="Layers (contracts.md Layer): conv2d or matmul.", examples=[[LAYER_EXAMPLE]]
    )
    model: str | None = Field(default=None, description=(
        "A whole model as base64 ONNX: its convolutions and matrix products are planned, in graph order "
        "(tileplan.workload_onnx); instead of `layers`."
    ))
    options: ScheduleOptions = Field(default_factory=ScheduleOptions)  # (a model default is deep-copied per request)
    wait: bool = Field(default=True, description="Wait (up to the server's limit) for the plans; false: 202 at once.")


class Progress(BaseModel):
    done: int
    total: int
    failed: int = 0


class Summary(BaseModel):
    layers: int
    unique_layers: int
    cached: int
    solved: int
    cycles: float
    energy_pj: float
    baseline_cycles: float | None = None
    baseline_mapper: str | None = Field(default=None, description=(
        "Who planned the baselines `speedup` compares with: gemmini-auto (Gemmini's hand-written tiling) where it "
        "applies, else random (best of N random legal mappings)."))
    speedup: float | None = None
    seconds: float | None = Field(default=None, description="How long the request (or the job) took.")


NOTES_DOC = "What the request's reading left out, e.g. the operators of a model that were not planned."
WARNINGS_DOC = "What did not go as asked, e.g. a plan whose module could not be built."


class ScheduleDone(BaseModel):
    id: str
    status: str = Field(description="done")
    plans: list[Plan]
    summary: Summary
    notes: list[str] = Field(default_factory=list, description=NOTES_DOC)
    warnings: list[str] = Field(default_factory=list, description=WARNINGS_DOC)
    links: dict[str, str] = {}


class JobAccepted(BaseModel):
    id: str
    status: str = Field(description="queued | running")
    progress: Progress
    links: dict[str, str]


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    detail: list[ErrorItem]


class JobView(BaseModel):
    id: str
    status: str = Field(description="queued | running | done | failed")
    progress: Progress
    created_at: str | None = Field(default=None, description="UTC, ISO 8601 with offset")
    updated_at: str | None = None
    finished_at: str | None = None
    plans: list[Plan] | None = None
    summary: Summary | None = None
    notes: list[str] = Field(default_factory=list, description=NOTES_DOC)
    warnings: list[str] = Field(default_factory=list, description=WARNINGS_DOC)
    errors: list[ErrorItem] | None = None
    links: dict[str, str] = {}


class CompileBody(BaseModel):
    """POST /compile as JSON (as multipart: a `model` file part and this object, without `model`, as a `request`
    part)."""

    model_config = ConfigDict(extra="forbid")

    hardware: str | dict[str, Any] = Field(description=HARDWARE_DOC, examples=["gemmini-16x16"])
    model: str | None = Field(default=None, description="The ONNX model (QDQ or QOperator int8; a float one with "
                              "options.quantize), base64.")
    # checked by the compiler, strictly (no coercion) and against the server's bounds, each error at the input
    input_shapes: Annotated[dict[str, Any], WithJsonSchema({"type": "object", "additionalProperties": {
        "type": "array", "items": {"type": "integer", "minimum": 1}}})] | None = Field(default=None, description=(
        "Shapes to compile for, by input name: needed for symbolic dimensions. Positive JSON integers (not `true`, "
        "`\"16\"` or `1e3`), each at most the server's `max_layer_extent`, at most `max_tensor_elements` in all."),
        examples=[{"input": [1, 3, 32, 32]}])
    options: dict[str, Any] = Field(default_factory=dict, description=(
        "As POST /schedule's (mapper, objective, time_limit_s, baseline, seed; every offloaded op is planned with "
        "them) plus quantize (a float model quantized by onnxruntime's static quantizer on random calibration "
        "data, instead of refused), calibration_samples, offload (false: every op on the host), emulate (false: no "
        "compile-time emulated run)."), examples=[{"time_limit_s": 5}])
    calibration: str | None = Field(default=None, description=(
        "With options.quantize: the calibration inputs, base64 of an .npz with one array per model input, samples "
        "along the first axis (as `tileplan compile --calibration`); without it, random ones."))
    wait: bool = Field(default=True, description="Wait (up to the server's limit) for the compile; false: 202 at once.")


class CompileProgress(BaseModel):
    ops_done: int = Field(description="Offloaded ops planned and generated so far (the last step counts one).")
    ops_total: int = Field(description="0 until the model is imported.")


class CompileView(BaseModel):
    id: str = Field(description="Digest of the model, hardware, options, input shapes and solver version.")
    status: str = Field(description="queued | running | done | failed")
    model: str
    hardware: str
    progress: CompileProgress
    created_at: str | None = None
    updated_at: str | None = None
    finished_at: str | None = None
    summary: dict[str, Any] | None = Field(default=None, description=(
        "Once done: the network summary (README, `tileplan compile`): `ops` (per op: name, op, where "
        "accelerator|host, reason, plan_key, cycles_emulated, cycles_model, baseline_cycles_model, speedup), "
        "`total`, `notes`."))
    notes: list[str] = Field(default_factory=list, description="The summary's notes: ops left on the host and why, "
                             "QOperator rewrites, quantisation by Tileplan.")
    artifact: dict[str, Any] | None = Field(default=None, description="Once done: {bytes, sha256} of the tar.")
    error: ErrorItem | None = Field(default=None, description="Once failed: why (`loc` names the node or input).")
    links: dict[str, str] = {}


class CompilePage(BaseModel):
    compiles: list[CompileView] = Field(description="Newest first, without their summaries (`total` only).")
    next_cursor: str | None = None


class PlanPage(BaseModel):
    plans: list[Plan]
    next_cursor: str | None = None


class EvaluateRequest(_Request):

    hardware: str | dict[str, Any] = Field(description=HARDWARE_DOC, examples=["gemmini-16x16"])
    layer: dict[str, Any] = Field(description="One layer (contracts.md Layer).", examples=[LAYER_EXAMPLE])
    mapping: dict[str, Any] = Field(description="A Mapping (contracts.md), levels innermost first.")
    executor: Literal["tileplan", "library", "library-auto"] | None = Field(
        default=None,
        description="On library hardware (Gemmini): cost the mapping as Tileplan's generated code runs it (tiles "
        "kept between calls that share them, kernel columns folded for few-channel convolutions) or as Gemmini's "
        "own library does (every call refetches its tiles; 'library-auto': through tiled_conv_auto, which also "
        "searches for its tile on the host first). Unset: the mapping's own `executor` (a plan's mapping "
        "carries it), else the library.",
    )
    model: Literal["gemmini", "timeloop", "first-order"] | None = Field(
        default=None,
        description="The cost model: 'timeloop' scores (and judges legality) as timeloop-model does, 'gemmini' is the "
        "calibrated model (Gemmini-like hardware), 'first-order' the generic one. Unset: the hardware's default.",
    )


class HardwareSummary(BaseModel):
    name: str
    description: str = ""
    source: str = Field(description="catalog | registered")
    links: dict[str, str]


class HardwareList(BaseModel):
    hardware: list[HardwareSummary]


class Health(BaseModel):
    status: str
    database: str
    queue: str
    version: str
    solver_version: str


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in ((401, "Token missing"), (403, "Token refused"), (413, "Request too large"),
                       (422, "Invalid input; `loc` names the field"))
}

__all__ = ["Evaluation", "Plan"]
