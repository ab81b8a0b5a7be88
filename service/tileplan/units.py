"""Parsing of sizes written the way hardware people write them ("256KiB", "64 KB", 1024)."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "kib": 1024, "kb": 1024, "k": 1024,
    "mib": 1024**2, "mb": 1024**2, "m": 1024**2,
    "gib": 1024**3, "gb": 1024**3, "g": 1024**3,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(value: object) -> int:
    """Bytes in `value`. KB/MB are taken as binary units, as memory datasheets use them."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"{value} must be positive")
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m and m.group(2).lower() in _UNITS:
            size = float(m.group(1)) * _UNITS[m.group(2).lower()]
            if size > 0 and size.is_integer():
                return int(size)
    raise ValueError(f"{value!r} is not a size")


def format_size(nbytes: float) -> str:
    """Short human form: 262144 -> '256 KiB'."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= scale:
            v = nbytes / scale
            return f"{v:.0f} {unit}" if v.is_integer() else f"{v:.1f} {unit}"
    return f"{nbytes:.0f} B"
