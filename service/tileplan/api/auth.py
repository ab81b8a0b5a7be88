"""Optional bearer tokens (`TILEPLAN_TOKENS`) with scopes, and who a request acts for (its owner).

With tokens configured, every write (POST /schedule, /compile, /hardware, PUT, DELETE) needs a `write` or `admin`
token in the header; reads need a `read` token (or better) when `protect_reads` is set, in the header or the
browser view's cookie. POST /evaluate is a read: it stores nothing, answers a pure function of its body, and runs
in the sandbox under its time and memory budget, as GET /plans/{key}/module runs under codegen's.

The owner of what a request stores (compiles, registered hardware) and whose share of the solvers its work takes is
a fingerprint of its token (never the token), or without tokens the client's address (an IPv6 client's /64,
which one host can fill with addresses): an accounting identity for quotas and fair shares. Without tokens nothing
authenticates a client, so an address only keeps one client from deleting another's compiles by mistake.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass

from fastapi import Request

from tileplan.api.errors import ApiError
from tileplan.settings import SCOPES, token_scopes

# A browser cannot attach a bearer header to a page it navigates to: the browser view's sign-in form
# (POST /ui/login) puts an accepted token in this cookie, which reads accept in place of the header.
COOKIE = "tileplan_token"


@dataclass(frozen=True)
class Caller:
    """Who a request acts for. `scope` None: no tokens are configured (anyone may do anything but act on another
    address's compiles and hardware); else the token's scope, or "" for a request without one."""

    owner: str
    scope: str | None

    @property
    def admin(self) -> bool:
        return self.scope == "admin"

    def may_act_on(self, owner: str | None) -> bool:
        """Whether this caller may replace or delete something `owner` stored (None: stored before owners)."""
        return owner is None or self.admin or owner == self.owner


def fingerprint(token: str) -> str:
    """What a token's owner is stored as: 16 hex digits of its SHA-256."""
    return hashlib.sha256(token.strip().encode()).hexdigest()[:16]


def address_owner(host: str | None) -> str:
    """The owner of a request without tokens: its TCP peer's address (a v4-mapped IPv6 one as IPv4, other IPv6 as
    its /64). Proxy headers are not read (`tileplan serve` turns them off): a client could name any address."""
    if not host:
        return "addr:unknown"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"addr:{host[:58]}"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"addr:{ip.ipv4_mapped}"
        return f"addr:{ipaddress.ip_network(f'{ip}/64', strict=False)}"
    return f"addr:{ip}"


def _scope_of(request: Request, given: str) -> str | None:
    """The scope of an accepted token, None if it is not one (compared in constant time, every entry)."""
    found = None
    for token, scope in _tokens(request):
        if hmac.compare_digest(given.strip().encode(), token.encode()):
            found = scope
    return found


def _tokens(request: Request) -> list[tuple[str, str]]:
    state = request.app.state
    parsed: list[tuple[str, str]] | None = getattr(state, "scoped_tokens", None)
    if parsed is None:
        parsed = state.scoped_tokens = token_scopes(state.settings.tokens)
    return parsed


def token_accepted(request: Request, given: str) -> bool:
    return _scope_of(request, given) is not None


def caller(request: Request, *, cookie: bool = False) -> Caller:
    """Who the request acts for, from its header (or with `cookie`, the view's cookie when there is no header).
    A token that is not accepted is a 403; no token at all is an anonymous caller (scope "")."""
    if not request.app.state.settings.tokens:
        return Caller(address_owner(request.client.host if request.client else None), None)
    header = request.headers.get("authorization", "")
    loc: list[str | int] = ["header", "authorization"]
    if not header and cookie and request.cookies.get(COOKIE):
        given, loc = request.cookies[COOKIE], ["cookie", COOKIE]
    else:
        scheme, _, given = header.partition(" ")
        if not header:
            return Caller(address_owner(request.client.host if request.client else None), "")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(401, loc, "a token is required: 'Authorization: Bearer <token>'", "unauthorized",
                           headers={"WWW-Authenticate": "Bearer"})
    scope = _scope_of(request, given)
    if scope is None:
        raise ApiError(403, loc, "this token is not accepted", "forbidden")
    return Caller(fingerprint(given), scope)


def _need(request: Request, scope: str, *, cookie: bool) -> Caller:
    who = caller(request, cookie=cookie)
    if who.scope is None or (who.scope and SCOPES.index(who.scope) >= SCOPES.index(scope)):
        return who
    if who.scope == "":
        raise ApiError(401, ["header", "authorization"], f"a token with the {scope} scope is required: "
                       "'Authorization: Bearer <token>'", "unauthorized", headers={"WWW-Authenticate": "Bearer"})
    raise ApiError(403, ["header", "authorization"], f"this token's scope is {who.scope}; this needs {scope}",
                   "insufficient_scope")


async def require_write(request: Request) -> None:
    """Everything that stores or deletes: the header only (a cookie would let another site's form write with the
    visitor's token)."""
    request.state.caller = _need(request, "write", cookie=False)


async def require_read(request: Request) -> None:
    """Everything else, when the server is configured to protect reads too (header, or the view's cookie)."""
    if request.app.state.settings.protect_reads and request.app.state.settings.tokens:
        _need(request, "read", cookie=True)


def caller_of(request: Request) -> Caller:
    """The caller `require_write` established (a write route's owner), else the request's caller."""
    found: Caller | None = getattr(request.state, "caller", None)
    return found if found is not None else caller(request)
