"""Optional bearer tokens (`TILEPLAN_TOKENS`): they guard writes, and every endpoint with `protect_reads`."""

from __future__ import annotations

import hmac

from fastapi import Request

from tileplan.api.errors import ApiError


def _check(request: Request) -> None:
    tokens: list[str] = request.app.state.settings.tokens
    if not tokens:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, ["header", "authorization"], "a token is required: 'Authorization: Bearer <token>'",
                       "unauthorized", headers={"WWW-Authenticate": "Bearer"})
    if not any(hmac.compare_digest(given.strip().encode(), t.encode()) for t in tokens):
        raise ApiError(403, ["header", "authorization"], "this token is not accepted", "forbidden")


async def require_write(request: Request) -> None:
    """Registering hardware, deleting plans or hardware."""
    _check(request)


async def require_read(request: Request) -> None:
    """Everything else, when the server is configured to protect reads too."""
    if request.app.state.settings.protect_reads:
        _check(request)
