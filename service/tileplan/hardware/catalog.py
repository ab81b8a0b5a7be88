"""Loading descriptors: the catalog in hw_catalog/, files, inline YAML/JSON, and Timeloop YAML."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tileplan import safe_yaml
from tileplan.errors import InputError, from_validation_error
from tileplan.hardware.model import HardwareDescriptor

# Source checkout: <repo>/service/tileplan/hardware/catalog.py -> <repo>/hw_catalog. Installed images
# point TILEPLAN_CATALOG_DIR at their copy.
_REPO_CATALOG = Path(__file__).resolve().parents[3] / "hw_catalog"
# The entries the project promises (tests check they exist).
REPO_CATALOG_NAMES = ("gemmini-16x16", "gemmini-8x8", "gemmini-32x32", "gemmini-chip", "simba", "eyeriss-os")


def catalog_dir() -> Path:
    return Path(os.environ.get("TILEPLAN_CATALOG_DIR", _REPO_CATALOG))


@lru_cache(maxsize=1)
def _catalog(path: str) -> dict[str, HardwareDescriptor]:
    out = {}
    for f in sorted(Path(path).glob("*.yaml")):
        hw = load_descriptor(f.read_text(), source=f.name)
        out[hw.name] = hw
    return out


def catalog() -> dict[str, HardwareDescriptor]:
    """Every descriptor of the catalog, by name."""
    return _catalog(str(catalog_dir()))


def get_hardware(name: str) -> HardwareDescriptor:
    hw = catalog().get(name)
    if hw is None:
        raise InputError(("hardware",), f"unknown hardware {name!r}; the catalog has {sorted(catalog())}")
    return hw


def load_descriptor(
    text: str | dict[str, Any], fmt: str | None = None, name: str | None = None, source: str = "descriptor"
) -> HardwareDescriptor:
    """A descriptor from YAML text (or already parsed data), Tileplan or Timeloop format.

    `fmt` None detects the format: Timeloop documents have a top-level `architecture:` or `arch:`.
    """
    if isinstance(text, str):
        data = safe_yaml.load(text, ("hardware", "source"), source)
    else:
        data = text
    if not isinstance(data, dict):
        raise InputError(("hardware",), f"{source}: a descriptor is a mapping of fields, got {type(data).__name__}")
    if fmt is None:
        fmt = "timeloop" if ("architecture" in data or "arch" in data) else "tileplan"
    if fmt == "timeloop":
        from tileplan.hardware.timeloop import from_timeloop

        data = from_timeloop(data, name=name or data.get("name") or "timeloop-arch")
    elif fmt != "tileplan":
        raise InputError(("hardware", "format"), f"must be 'tileplan' or 'timeloop', got {fmt!r}")
    elif name and "name" not in data:
        data = {**data, "name": name}
    try:
        return HardwareDescriptor.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def load_descriptor_file(path: str | Path) -> HardwareDescriptor:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InputError(("hardware",), f"cannot read {path}: {exc.strerror}") from None
    return load_descriptor(text, source=p.name, name=p.stem)


def resolve_hardware(ref: str | dict[str, Any] | HardwareDescriptor) -> HardwareDescriptor:
    """What a request or CLI flag names: a catalog name, a file path, an inline descriptor, or
    `{"name", "format", "source"}` with YAML text."""
    if isinstance(ref, HardwareDescriptor):
        return ref
    if isinstance(ref, str):
        if ref in catalog():
            return catalog()[ref]
        if ref.endswith((".yaml", ".yml")) or os.sep in ref:
            return load_descriptor_file(ref)
        return get_hardware(ref)
    if isinstance(ref, dict) and "source" in ref:
        return load_descriptor(str(ref["source"]), fmt=ref.get("format"), name=ref.get("name"))
    if isinstance(ref, dict):
        return load_descriptor(ref)
    raise InputError(("hardware",), "a catalog name, a descriptor, or {name, format, source}")
