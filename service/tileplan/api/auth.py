"""Optional bearer tokens (`TILEPLAN_TOKENS`): they guard writes, and every endpoint with `protect_reads`."""

from __future__ import annotations

import hmac

from fastapi import Request

from tileplan.api.errors import ApiError

# A browser cannot attach a bearer header to a page it navigates to: the browser view's sign-in form
# (POST /ui/login) puts an accepted token in this cookie, which reads accept in place of the header.
COOKIE = "tileplan_token"


def token_accepted(request: Request, given: str) -> bool:
    tokens: list[str] = request.app.state.settings.tokens
    return any(hmac.compare_digest(given.strip().encode(), t.encode()) for t in tokens)


def _check(request: Request, cookie: bool = False) -> None:
    tokens: list[str] = request.app.state.settings.tokens
    if not tokens:
        return
    header = request.headers.get("authorization", "")
    if not header and cookie and request.cookies.get(COOKIE):
        if not token_accepted(request, request.cookies[COOKIE]):
            raise ApiError(403, ["cookie", COOKIE], "this token is not accepted", "forbidden")
        return
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, ["header", "authorization"], "a token is required: 'Authorization: Bearer <token>'",
                       "unauthorized", headers={"WWW-Authenticate": "Bearer"})
    if not token_accepted(request, given):
        raise ApiError(403, ["header", "authorization"], "this token is not accepted", "forbidden")


async def require_write(request: Request) -> None:
    """Registering hardware, deleting plans or hardware: the header only (a cookie would let another site's
    form write with the visitor's token)."""
    _check(request)


async def require_read(request: Request) -> None:
    """Everything else, when the server is configured to protect reads too (header, or the view's cookie)."""
    if request.app.state.settings.protect_reads:
        _check(request, cookie=True)
