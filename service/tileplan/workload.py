"""Layers as users write them (contracts.md) and their canonical loop bounds.

Two kinds: conv2d (groups = in_channels is a depthwise conv) and matmul (`dense` is an alias).
Validation rejects layers that cannot exist (non-positive sizes, a kernel larger than the padded
input, groups that do not divide the channels) with the field named. `Layer.dims()` gives the
canonical bounds N,G,K,C,P,Q,R,S that everything downstream works on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from tileplan.errors import InputError, from_validation_error
from tileplan.validation import Int, PositiveInt


def _pair(value: Any) -> Any:
    """`3` -> `(3, 3)`; lists pass through for Pydantic to check."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return (value, value)
    return value


Pair = Annotated[tuple[Int, Int], BeforeValidator(_pair)]
Positive = PositiveInt


class _LayerBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    dtype: Literal["int8"] = "int8"
    acc_dtype: Literal["int32"] = "int32"
    count: Positive = Field(default=1, description="How often this shape occurs in its network (benchmarks).")
    bias: bool = Field(
        default=False,
        description="The layer adds a bias per output channel (Gemmini loads it into the accumulator first; "
        "without one the library skips that load).",
    )


class Conv2dLayer(_LayerBase):
    op: Literal["conv2d"] = "conv2d"
    batch: Positive = 1
    in_channels: Positive
    out_channels: Positive
    in_h: Positive
    in_w: Positive
    kernel: Pair = (1, 1)
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    dilation: Pair = (1, 1)
    groups: Positive = 1

    @model_validator(mode="after")
    def _possible(self) -> Conv2dLayer:
        for field in ("kernel", "stride", "dilation"):
            if min(getattr(self, field)) < 1:
                raise InputError((field,), f"must be positive, got {list(getattr(self, field))}")
        if min(self.padding) < 0:
            raise InputError(("padding",), f"must not be negative, got {list(self.padding)}")
        if self.in_channels % self.groups:
            raise InputError(("groups",), f"{self.groups} groups do not divide in_channels={self.in_channels}")
        if self.out_channels % self.groups:
            raise InputError(("groups",), f"{self.groups} groups do not divide out_channels={self.out_channels}")
        for axis, size in ((0, self.in_h), (1, self.in_w)):
            span = self.dilation[axis] * (self.kernel[axis] - 1) + 1
            padded = size + 2 * self.padding[axis]
            if span > padded:
                raise InputError(
                    ("kernel",),
                    f"kernel {self.kernel[axis]} (dilated span {span}) is larger than the padded input "
                    f"{'in_h' if axis == 0 else 'in_w'} {size}+2*{self.padding[axis]}={padded}",
                )
        return self

    @property
    def out_h(self) -> int:
        return (self.in_h + 2 * self.padding[0] - self.dilation[0] * (self.kernel[0] - 1) - 1) // self.stride[0] + 1

    @property
    def out_w(self) -> int:
        return (self.in_w + 2 * self.padding[1] - self.dilation[1] * (self.kernel[1] - 1) - 1) // self.stride[1] + 1

    def dims(self) -> dict[str, int]:
        g = self.groups
        return {
            "N": self.batch, "G": g, "K": self.out_channels // g, "C": self.in_channels // g,
            "P": self.out_h, "Q": self.out_w, "R": self.kernel[0], "S": self.kernel[1],
        }

    @property
    def strides(self) -> tuple[int, int]:
        return self.stride

    @property
    def dilations(self) -> tuple[int, int]:
        return self.dilation


class MatmulLayer(_LayerBase):
    """Y[M, N] = A[M, K] x B[K, N]: the conv with P=M, C=K, K=N."""

    op: Literal["matmul", "dense"] = "matmul"
    M: Positive
    K: Positive
    N: Positive

    def dims(self) -> dict[str, int]:
        return {"N": 1, "G": 1, "K": self.N, "C": self.K, "P": self.M, "Q": 1, "R": 1, "S": 1}

    @property
    def strides(self) -> tuple[int, int]:
        return (1, 1)

    @property
    def dilations(self) -> tuple[int, int]:
        return (1, 1)


Layer = Annotated[Conv2dLayer | MatmulLayer, Field(discriminator="op")]
_LAYER = TypeAdapter(Layer)


def parse_layer(data: Any, loc: tuple[str | int, ...] = ()) -> Conv2dLayer | MatmulLayer:
    if isinstance(data, (Conv2dLayer, MatmulLayer)):
        return data
    if not isinstance(data, dict):
        raise InputError(loc, f"a layer is a mapping of fields, got {type(data).__name__}")
    if "op" not in data:
        raise InputError(loc + ("op",), "missing; one of conv2d, matmul, dense")
    try:
        return _LAYER.validate_python(data)
    except ValidationError as exc:
        raise from_validation_error(exc, loc) from None
    except InputError as exc:  # raised by a model validator, which knows the field but not where the layer sits
        raise InputError(loc + exc.loc, exc.msg, exc.type) from None


def check_extents(layer: Conv2dLayer | MatmulLayer, limit: int, loc: tuple[str | int, ...] = ()) -> None:
    """InputError at the first size field over `limit` (a service's bound on the work one layer may ask for)."""
    for field, value in layer:
        values = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, int) and not isinstance(v, bool) and v > limit for v in values):
            shown = list(value) if isinstance(value, tuple) else value
            raise InputError(loc + (field,), f"{shown} is over this server's bound of {limit} (max_layer_extent)",
                             "less_than_equal")


def layer_doc(layer: Conv2dLayer | MatmulLayer) -> dict[str, Any]:
    """The layer as echoed in a Plan: its fields plus canonical dims, stride and dilation."""
    doc = layer.model_dump(mode="json", exclude={"count"})
    doc["dims"] = layer.dims()
    doc["stride"] = list(layer.strides)
    doc["dilation"] = list(layer.dilations)
    return doc


def layer_fields(echo: dict[str, Any]) -> dict[str, Any]:
    """A Plan's layer echo back to the layer's own fields (drop the derived dims, stride/dilation of matmuls)."""
    out = {k: v for k, v in echo.items() if k != "dims"}
    if out.get("op") in ("matmul", "dense"):
        out.pop("stride", None)
        out.pop("dilation", None)
    return out


def parse_layer_spec(spec: str) -> Conv2dLayer | MatmulLayer:
    """CLI shorthand: `conv2d:in_channels=64,out_channels=64,in_h=56,in_w=56,kernel=3,padding=1`."""
    op, _, rest = spec.partition(":")
    fields: dict[str, Any] = {"op": op.strip()}
    for item in filter(None, (p.strip() for p in _split_top(rest))):
        key, eq, value = item.partition("=")
        if not eq:
            raise InputError(("layer",), f"expected key=value, got {item!r}")
        fields[key.strip()] = _spec_value(value.strip())
    return parse_layer(fields)


def _spec_value(text: str) -> Any:
    """`3x3` -> [3, 3]; anything else as YAML (`[3, 3]`, `64`, `name`)."""
    parts = text.split("x")
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return [int(p) for p in parts]
    return yaml.safe_load(text)


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets, so `kernel=[3,3]` stays one item."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def load_workload(path: str | Path) -> tuple[str, list[Conv2dLayer | MatmulLayer]]:
    """A YAML file `{network: name, layers: [...]}` (or a bare list of layers)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise InputError(("workload",), f"not valid YAML: {exc}") from None
    except OSError as exc:
        raise InputError(("workload",), f"cannot read {path}: {exc.strerror}") from None
    if isinstance(data, list):
        data = {"layers": data}
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list):
        raise InputError(("layers",), "a workload file has a list under 'layers'")
    layers = [parse_layer(item, ("layers", i)) for i, item in enumerate(data["layers"])]
    return str(data.get("network", Path(path).stem)), layers
