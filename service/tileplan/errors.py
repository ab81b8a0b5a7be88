"""Errors that name the offending field and the reason.

Every door (CLI, API) turns these into one readable line or a 4xx body; the core never
raises bare ValueErrors at users.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any


class TileplanError(Exception):
    """Base class of errors caused by user input."""


class InputError(TileplanError):
    """A descriptor, layer, mapping or option is malformed or impossible.

    `loc` is the path of the field (like Pydantic's), `msg` the reason.
    """

    def __init__(self, loc: Sequence[str | int], msg: str, type_: str = "value_error") -> None:
        self.loc = tuple(loc)
        self.msg = msg
        self.type = type_
        super().__init__(f"{format_loc(self.loc)}: {msg}" if self.loc else msg)

    def to_detail(self) -> dict[str, object]:
        return {"loc": list(self.loc), "msg": self.msg, "type": self.type}


class MappingInfeasible(TileplanError):
    """No legal mapping exists for this layer on this hardware (or none was found in time)."""


def unexpected_error(log: logging.Logger, what: str, type_: str = "internal_error", event: str = "unexpected_error",
                     **context: object) -> dict[str, Any]:
    """The one way an exception that is not one of the project's own (an OSError naming a server path, a bug) becomes
    a client's message: called in its `except` block, it logs the traceback under a new error id and returns the
    client's `{loc, msg, type}` (`what` failed, the id; nothing of the exception's text or type). Expected errors
    (InputError, MappingInfeasible, ArtifactError's `brief`, CodegenError) keep their own messages instead."""
    ref = uuid.uuid4().hex[:12]
    fields = "".join(f" {k}={v}" for k, v in context.items())
    log.exception("event=%s ref=%s%s", event, ref, fields)
    return {"loc": [], "msg": f"{what} failed with an internal error of the server (error id {ref}; the server's "
                              "log has the details)", "type": type_}


def shown(text: str, limit: int = 60) -> str:
    """`text` as an error message quotes it: cut at `limit` characters (a client's 10,000-character id or name is
    not echoed back whole)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def format_loc(loc: Sequence[str | int]) -> str:
    """`('memory_levels', 1, 'capacity')` -> `memory_levels[1].capacity`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def from_validation_error(exc: object, prefix: Sequence[str | int] = ()) -> InputError:
    """First error of a pydantic ValidationError as an InputError (with all errors in the message)."""
    errors = exc.errors()  # type: ignore[attr-defined]
    parts = []
    for err in errors:
        loc = tuple(prefix) + tuple(p for p in error_loc(err) if not _is_union_tag(p))
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{format_loc(loc)}: {msg}" if loc else msg)
    first = errors[0]
    loc0 = tuple(prefix) + tuple(p for p in error_loc(first) if not _is_union_tag(p))
    err = InputError(loc0, first["msg"].removeprefix("Value error, "), first["type"])
    err.args = ("; ".join(parts[:20]) + (f"; and {len(parts) - 20} more" if len(parts) > 20 else ""),)
    err.all_details = [  # type: ignore[attr-defined]
        {"loc": list(tuple(prefix) + error_loc(e)), "msg": e["msg"].removeprefix("Value error, "), "type": e["type"]}
        for e in errors
    ]
    return err


def error_loc(err: Any) -> tuple[Any, ...]:
    """A pydantic error's location; an unknown key refused by tileplan.strict is located at the key itself."""
    loc = tuple(err.get("loc", ()))
    ctx = err.get("ctx") or {}
    if err.get("type") == "extra_forbidden" and "key" in ctx:
        loc += (ctx["key"],)
    return loc


def _is_union_tag(part: object) -> bool:
    # pydantic puts the discriminator value ("conv2d") into loc for tagged unions; users never wrote it.
    return isinstance(part, str) and part in {"conv2d", "matmul", "dense"}
