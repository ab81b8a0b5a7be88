"""Models that refuse unknown keys with a hint: `{"mapperr": "random"}` is an error naming `mapperr` and
suggesting `mapper`, not a silent plan with the defaults.

Pydantic's `extra="forbid"` refuses the key but cannot say what was meant; the check here runs first and raises
an `extra_forbidden` error whose context holds the key (`ctx["key"]`): the renderers (tileplan.errors for the
library and CLI, tileplan.api.errors for the API) add it to the error's location, so it points at the key as
pydantic's own error would.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError


def did_you_mean(key: str, known: list[str]) -> str:
    """' (did you mean "mapper"?)' for a close known name, else ''."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key_error(data: Any, model: type[BaseModel], what: str = "key") -> PydanticCustomError | None:
    if not isinstance(data, dict):
        return None
    known = [name for name, f in model.model_fields.items() if not f.exclude]
    known += [f.alias for f in model.model_fields.values() if f.alias]
    unknown = sorted(str(k) for k in data if k not in known)
    if not unknown:
        return None
    key = unknown[0]
    return PydanticCustomError(
        "extra_forbidden", "unknown {what} {key_repr}{hint}; known: {known}",
        {"key": key, "what": what, "key_repr": repr(key), "hint": did_you_mean(key, known),
         "known": ", ".join(sorted(model.model_fields))},
    )


class StrictModel(BaseModel):
    """A model whose unknown keys are errors naming the key and, where one is close, the intended one."""

    model_config = ConfigDict(extra="forbid")
    unknown_what: ClassVar[str] = "key"  # how the error calls an unknown key ("option", "field")

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_keys(cls, data: Any) -> Any:
        err = unknown_key_error(data, cls, cls.unknown_what)
        if err is not None:
            raise err
        return data
