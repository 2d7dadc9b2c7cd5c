"""Route metadata: the permission and sensitivity each management route declares.

`RouteGuard` is the FastAPI dependency that authenticates and authorizes a request;
discovery (GET /api/v1) reads the guards back from the app's routes, so what it reports
is exactly what is enforced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.routing import Route

from app.management.auth import Authenticator, AuthError, Principal

Sensitivity = Literal["public", "internal", "sensitive", "secret"]


class RouteGuard:
    def __init__(
        self,
        authenticator: Callable[[], Authenticator],
        permission: str | None,
        sensitivity: Sensitivity = "internal",
        on_denied: Callable[[Request, AuthError], None] | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.permission = permission
        self.sensitivity = sensitivity
        self.on_denied = on_denied

    async def __call__(self, request: Request) -> Principal:
        from app.common.mgmt_errors import MgmtError

        auth = self.authenticator()
        try:
            principal = auth.authenticate(request.headers.get("authorization"))
            auth.authorize(principal, self.permission)
        except AuthError as exc:
            if self.on_denied is not None:
                self.on_denied(request, exc)
            headers = {"WWW-Authenticate": 'Bearer realm="svc-sr"'} if exc.status == 401 else None
            raise MgmtError(exc.status, exc.message, code=exc.code, headers=headers) from None
        request.state.principal = principal
        return principal


def guard_of(route: Any) -> RouteGuard | None:
    for dependency in getattr(route, "dependencies", None) or ():
        call = getattr(dependency, "dependency", None)
        if isinstance(call, RouteGuard):
            return call
    return None


PUBLIC_PATHS = frozenset({"/health"})


def describe_routes(app: FastAPI) -> list[dict[str, Any]]:
    out = []
    # iter_route_contexts flattens included routers, with their dependencies combined
    for route in iter_route_contexts(app.routes):
        if not isinstance(route.original_route, APIRoute | Route):
            continue
        guard = guard_of(route)
        methods = sorted((route.methods or set()) - {"HEAD"})
        for method in methods:
            sensitivity: Sensitivity = guard.sensitivity if guard else "public"
            out.append(
                {
                    "method": method,
                    "path": route.path,
                    "permission": guard.permission if guard else None,
                    "sensitivity": sensitivity,
                    "summary": getattr(route, "summary", None) or getattr(route, "name", None),
                    "deprecated": bool(getattr(route, "deprecated", False)),
                    "authenticated": guard is not None,
                }
            )
    return sorted(out, key=lambda r: (r["path"], r["method"]))
