"""Registries of what code generation is built from.

- core computes: `@register_core_compute(tag="gemmini.conv2d")` on a function that builds the TE compute of a
  layer (int8 operands, int32 accumulation, fused bias + requantize + ReLU/clip epilogue);
- hardware intrinsics: `@register_hw_intrinsic("gemmini.compute_ws")` on a factory that returns the
  (description, implementation) TVMScript pair of a tensor intrinsic for given static parameters.  An intrinsic is
  registered with TVM on first use under a name that encodes its parameters (`intrinsic(name, **params)`).

A new accelerator is one module under `codegen/targets/` that registers its computes and intrinsics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_CORE_COMPUTES: dict[str, Callable[..., Any]] = {}
_HW_INTRINSICS: dict[str, Callable[..., tuple[Any, Any]]] = {}
_TVM_REGISTERED: set[str] = set()


class CodegenError(RuntimeError):
    """A plan cannot be turned into code for this target (the message says why)."""


def register_core_compute(tag: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if tag in _CORE_COMPUTES and _CORE_COMPUTES[tag] is not fn:
            raise ValueError(f"core compute {tag!r} registered twice")
        _CORE_COMPUTES[tag] = fn
        return fn

    return deco


def register_hw_intrinsic(name: str) -> Callable[[Callable[..., tuple[Any, Any]]], Callable[..., tuple[Any, Any]]]:
    def deco(factory: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]:
        if name in _HW_INTRINSICS and _HW_INTRINSICS[name] is not factory:
            raise ValueError(f"hardware intrinsic {name!r} registered twice")
        _HW_INTRINSICS[name] = factory
        return factory

    return deco


def core_compute(tag: str) -> Callable[..., Any]:
    try:
        return _CORE_COMPUTES[tag]
    except KeyError:
        raise CodegenError(f"no core compute {tag!r}; registered: {sorted(_CORE_COMPUTES)}") from None


def core_compute_tags() -> list[str]:
    return sorted(_CORE_COMPUTES)


def hw_intrinsic_names() -> list[str]:
    return sorted(_HW_INTRINSICS)


def intrinsic(name: str, **params: Any) -> str:
    """The TVM TensorIntrin name of `name` instantiated with `params`, registering it on first use."""
    try:
        factory = _HW_INTRINSICS[name]
    except KeyError:
        raise CodegenError(f"no hardware intrinsic {name!r}; registered: {sorted(_HW_INTRINSICS)}") from None
    suffix = "_".join(f"{k}{_fmt(v)}" for k, v in sorted(params.items()))
    full = f"{name}.{suffix}" if suffix else name
    if full not in _TVM_REGISTERED:
        from tvm.s_tir import TensorIntrin

        desc, impl = factory(**params)
        TensorIntrin.register(full, desc, impl, override=True)
        _TVM_REGISTERED.add(full)
    return full


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return repr(v).replace(".", "p").replace("-", "m")
    return str(v)
