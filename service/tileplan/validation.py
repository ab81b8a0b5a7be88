"""Input rules shared by every door: what storage can hold, integers that are not booleans, safe names.

- Text the database cannot keep: NUL (PostgreSQL refuses it in text) and lone UTF-16 surrogates (no UTF-8 form,
  so neither SQLite nor PostgreSQL can store them). `check_storable` walks a parsed document (keys and values) and
  names the first offending field; request bodies, path and query parameters and descriptors all go through it.
- `Int` / `PositiveInt`: JSON's `true` is not the number 1 (pydantic's lax mode would plan `in_channels: true` as
  one channel); strings of digits and whole floats still pass as the numbers they spell.
- `SAFE_NAME`: a name that is one path segment of a URL (`/hardware/{name}`), one line, and bounded.
- Names with control characters: a name a client gives (a layer's, a level's or dataflow's, `?name=`, an ONNX
  graph's, node's, input's or output's) is stored and shown to every other client: in JSON, the browser view, a
  terminal (ESC sequences retitle or clear it, OSC 52 writes some terminals' clipboard), the server's logfmt lines
  (a newline forges one). `control_reason` refuses the C0 and C1 controls, DEL and the bidirectional controls (text
  that reads other than it is) in a name; a `description` is text, and keeps tab and newline.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from tileplan.errors import InputError

Loc = tuple[str | int, ...]

NAME_MAX = 100
SAFE_NAME = rf"^[A-Za-z0-9][A-Za-z0-9._+-]{{0,{NAME_MAX - 1}}}$"
_SAFE_NAME = re.compile(SAFE_NAME)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_TEXT_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
TEXT_FIELDS = {"description"}  # free text: tab, newline and carriage return are its own
NAME_RULE = (f"1-{NAME_MAX} characters: letters, digits, '.', '_', '+', '-', starting with a letter or digit "
             "(it is a path segment of /hardware/{name})")


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not a boolean ({str(value).lower()})")
    return value


Int = Annotated[int, BeforeValidator(_no_bool)]
PositiveInt = Annotated[int, BeforeValidator(_no_bool), Field(gt=0)]
Float = Annotated[float, BeforeValidator(_no_bool)]


def unstorable_reason(text: str) -> str | None:
    """Why `text` cannot be stored, or None."""
    m = _UNSTORABLE.search(text)
    if m is None:
        return None
    what = "a NUL character" if m.group() == "\x00" else f"a lone surrogate (U+{ord(m.group()):04X})"
    return f"contains {what} at position {m.start()}, which cannot be stored"


def control_reason(text: str, *, free: bool = False) -> str | None:
    """Why `text` cannot be a name (`free`: free text, which keeps tab, newline and CR), or None."""
    m = (_TEXT_CONTROL if free else _CONTROL).search(text)
    if m is None:
        return None
    ch = m.group()
    kind = ", a bidirectional control" if ord(ch) > 0x9f else ""
    return (f"contains a control character (U+{ord(ch):04X}{kind}) at position {m.start()}: a name is printable "
            "text (it is shown to every client, in terminals, pages and logs)")


def check_name_text(value: Any, loc: Loc, *, free: bool = False) -> None:
    """InputError at `loc` for a name (or, `free`, a description) holding a control character."""
    why = control_reason(value, free=free) if isinstance(value, str) else None
    if why is not None:
        raise InputError(loc, why, "string_control")


def _strings(doc: Any, loc: Loc, depth: int = 0) -> Iterator[tuple[Loc, str]]:
    # JSON documents are trees (no shared or recursive parts); the depth bound is for safety only
    if depth > 200:
        raise InputError(loc, "nested more than 200 levels deep", "too_deep")
    if isinstance(doc, str):
        yield loc, doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(k, str):
                yield loc + (k,), k
            yield from _strings(v, loc + (str(k),), depth + 1)
    elif isinstance(doc, (list, tuple)):
        for i, v in enumerate(doc):
            yield from _strings(v, loc + (i,), depth + 1)


def check_storable(doc: Any, loc: Loc = ()) -> None:
    """InputError at the first string (key or value) in `doc` that storage cannot hold, or the first `name` (or
    `description`) value holding a control character (`control_reason`)."""
    for where, text in _strings(doc, loc):
        why = unstorable_reason(text)
        if why is not None:
            raise InputError(where, why, "string_unstorable")
        field = where[-1] if where else None
        if field == "name" or field in TEXT_FIELDS:
            check_name_text(text, where, free=field in TEXT_FIELDS)


def is_safe_name(name: str) -> bool:
    return bool(_SAFE_NAME.match(name))


def check_name(name: Any, loc: Loc) -> str:
    """A registered (or looked-up) hardware name: a safe path segment."""
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        shown = name if not isinstance(name, str) or len(name) <= 40 else name[:40] + "..."
        raise InputError(loc, f"{shown!r} is not a valid name: {NAME_RULE}", "string_pattern_mismatch")
    return name
