"""Checks every API request's path and query parameters get before its route runs: a value storage cannot hold
(NUL, lone surrogates) is a 422 naming the parameter (PostgreSQL refuses a NUL even in a WHERE clause), so is a
`name` holding a control character (`tileplan.validation.control_reason`), and so is a
query parameter the route does not take (a typo, `?hardwre=`, would otherwise be ignored and answer as if unasked,
as an unknown body option would: see tileplan.strict)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from tileplan.api.errors import ApiError
from tileplan.jobs.fair import current_owner
from tileplan.strict import did_you_mean
from tileplan.validation import control_reason, unstorable_reason


async def note_owner(request: Request) -> None:
    """Whom the request acts for, for work it sends to shared processes (`tileplan.jobs.fair.current_owner`): its
    token's fingerprint, or its address (a token this route would refuse: the address; the route says so itself)."""
    from tileplan.api.auth import address_owner, caller_of

    try:
        owner = caller_of(request).owner
    except ApiError:
        owner = address_owner(request.client.host if request.client else None)
    current_owner.set(owner)


async def storable_params(request: Request) -> None:
    for where, params in (("path", request.path_params.items()), ("query", request.query_params.multi_items())):
        for name, value in params:
            locs: tuple[list[str | int], list[str | int]] = ([where], [where, name])
            for text, loc in zip((name, value), locs):
                why = unstorable_reason(text) if isinstance(text, str) else None
                if why is not None:
                    raise ApiError(422, loc, why, "string_unstorable")
            # (`?name=`: a layer name the answer, its module and its files carry, and the log names)
            why = control_reason(value) if name == "name" and isinstance(value, str) else None
            if why is not None:
                raise ApiError(422, [where, name], why, "string_control")


def _declared_query(route: Any) -> list[str]:
    """The query parameters a route declares, its dependencies' included (kept on the route: found once)."""
    names: list[str] | None = getattr(route, "tileplan_query_params", None)
    if names is None:
        found: set[str] = set()
        todo = [route.dependant]  # the route's own parameters and those of every dependency it has
        while todo:
            dep = todo.pop()
            found.update(p.alias for p in dep.query_params)
            todo.extend(dep.dependencies)
        names = sorted(found)
        route.tileplan_query_params = names
    return names


async def known_query_params(request: Request) -> None:
    route = request.scope.get("route")
    if route is None or not getattr(route, "include_in_schema", False):
        return  # the browser's pages: a link may carry parameters of its own (utm_*, a cache buster)
    known = _declared_query(route)
    for name in request.query_params:
        if name not in known:
            takes = f"it takes {', '.join(known)}" if known else "it takes no query parameters"
            raise ApiError(422, ["query", name], f"unknown query parameter{did_you_mean(name, known)}; {takes}",
                           "extra_forbidden")
