"""Path and query parameters storage cannot hold (NUL, lone surrogates) are a 422 naming the parameter, before any
route looks them up (PostgreSQL refuses a NUL even in a WHERE clause)."""

from __future__ import annotations

from fastapi import Request

from tileplan.api.errors import ApiError
from tileplan.validation import unstorable_reason


async def storable_params(request: Request) -> None:
    for where, params in (("path", request.path_params.items()), ("query", request.query_params.multi_items())):
        for name, value in params:
            locs: tuple[list[str | int], list[str | int]] = ([where], [where, name])
            for text, loc in zip((name, value), locs):
                why = unstorable_reason(text) if isinstance(text, str) else None
                if why is not None:
                    raise ApiError(422, loc, why, "string_unstorable")
