"""What every management route module shares: registering a guarded route (with the
failures it documents), parsing a JSON body into its pydantic model, rendering a model, the
request id, and the audit entries the HTTP layer records (mutations, 403s)."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from app.common.api_docs import BODY_TOO_LARGE, Responses, errors
from app.common.body_limits import DEFAULT_MAX_DEPTH, JsonRejected, decode_json, rejection_message
from app.common.errors import REQUEST_ID_HEADER, validation_message
from app.common.mgmt_errors import MgmtError, MgmtErrorBody, invalid_input
from app.management.auth import AuthError, Principal
from app.management.discovery import RouteGuard, Sensitivity
from app.management.documents import DocumentRejected, Reason
from app.management.service import Management

M = TypeVar("M", bound=BaseModel)


def mgmt_errors(statuses: dict[int, str]) -> Responses:
    """`responses` answered with the management error body."""
    return errors(MgmtErrorBody, statuses)


# Every guarded route: the guard's failures (auth mode bearer).
ERRORS = mgmt_errors({401: "missing or invalid bearer token", 403: "permission missing"})
INVALID = mgmt_errors({400: "INVALID_INPUT: a parameter or the body is invalid"})


class ManagementRoute(APIRoute):
    """A management route: a query or header that fails its declaration answers 400
    INVALID_INPUT in the management error body (the app-wide handler answers the data plane's)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                response: Response = await handler(request)
            except RequestValidationError as exc:
                message, _ = validation_message(exc.errors())
                raise invalid_input(message) from None
            return response

        return route


def documented_failures(endpoint: Callable[..., Any], options: dict[str, Any]) -> Responses:
    """400 where the route takes input (parameters or a body), 413 where it reads a body."""
    takes_body = "requestBody" in (options.get("openapi_extra") or {})
    parameters = [
        p for p in inspect.signature(endpoint).parameters.values() if p.annotation not in (Request, "Request")
    ]
    out: Responses = dict(ERRORS)
    if takes_body or parameters:
        out.update(INVALID)
    if takes_body:
        out.update(BODY_TOO_LARGE)
    return out


def route_guard(
    mgmt: Management, permission: str | None, sensitivity: Sensitivity = "internal"
) -> RouteGuard:
    """The dependency that authenticates and authorizes a route (and audits a 403)."""
    return RouteGuard(
        lambda: mgmt.authenticator, permission, sensitivity, lambda r, e: record_denial(mgmt, r, e)
    )


def record_denial(mgmt: Management, request: Request, exc: AuthError) -> None:
    # 401s are not recorded: an unauthenticated flood must not be able to rotate the ring.
    if exc.status == 403:
        mgmt.audit.record(
            "auth.denied",
            request_id=request_id(request),
            method=request.method,
            path=request.url.path,
            status=403,
            detail={"code": exc.code},
        )


def record_mutation(mgmt: Management, action: str, request: Request, status: int, **extra: Any) -> None:
    principal: Principal | None = getattr(request.state, "principal", None)
    mgmt.audit.record(
        action,
        request_id=request_id(request),
        method=request.method,
        path=request.url.path,
        status=status,
        principal=principal.name if principal else None,
        role=principal.role if principal else None,
        detail=extra or None,
    )


class Registrar:
    """Adds routes to `router`, each behind the guard for its permission and sensitivity."""

    def __init__(self, router: APIRouter, mgmt: Management) -> None:
        self.router = router
        self.mgmt = mgmt

    def add(
        self,
        path: str,
        endpoint: Callable[..., Any],
        method: str,
        permission: str | None,
        sensitivity: Sensitivity = "internal",
        *,
        responses: Responses | None = None,
        tags: list[str | Enum] | None = None,
        **options: Any,
    ) -> None:
        """`options`: response_model, summary, openapi_extra, deprecated (APIRouter.add_api_route's).
        `responses`: the route's own statuses, besides those every route documents."""
        self.router.add_api_route(
            path,
            endpoint,
            methods=[method],
            dependencies=[Depends(route_guard(self.mgmt, permission, sensitivity))],
            responses={**documented_failures(endpoint, options), **(responses or {})},
            tags=tags or ["management"],
            route_class_override=ManagementRoute,
            **options,
        )


def principal_of(request: Request) -> Principal:
    principal: Principal = request.state.principal  # set by RouteGuard
    return principal


def request_id(request: Request) -> str:
    existing = getattr(request.state, "request_id", None)
    if existing:
        return str(existing)
    value = request.headers.get(REQUEST_ID_HEADER) or uuid.uuid4().hex
    request.state.request_id = value
    return value


async def maybe_await(value: Any) -> Any:
    """ReplaySource methods may be sync (ReplayStore) or async (a Ray deployment's handle)."""
    return await value if inspect.isawaitable(value) else value


def json_response(model: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code=status, headers=headers)


def json_depth_limit(request: Request) -> int:
    """global.services.data_plane.max_json_depth of the app serving `request` (create_app keeps
    a reader of the live configuration in the app's state)."""
    limit = getattr(request.app.state, "max_json_depth", None)
    return int(limit()) if callable(limit) else DEFAULT_MAX_DEPTH


async def read_model(model: type[M], request: Request, *, optional: bool = False) -> M:
    """The request's JSON body as `model` (`parse_model`); `optional`: no body reads as `{}`."""
    raw = await request.body()
    return parse_model(model, b"{}" if optional and not raw.strip() else raw, json_depth_limit(request))


def parse_model(model: type[M], raw: bytes, max_depth: int = DEFAULT_MAX_DEPTH) -> M:
    """`raw` under the body limits (app/common/body_limits.py), validated strictly: JSON's own
    types, as the OpenAPI document states them (`0` is no boolean, `"1"` no number)."""
    if not raw.strip():
        raise invalid_input("request body is required")
    try:
        decode_json(raw, max_depth)
    except JsonRejected as exc:
        raise invalid_input(rejection_message(exc)) from None
    try:
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        message, _ = validation_message([dict(e) for e in exc.errors()])
        raise invalid_input(message) from None


def reasons_of(reasons: list[Reason]) -> list[dict[str, Any]]:
    return [r.as_dict() for r in reasons]


def rejected(exc: DocumentRejected) -> MgmtError:
    """400 INVALID_CONFIG naming the first reason (all of them in details)."""
    first = exc.reasons[0] if exc.reasons else None
    message = "invalid configuration"
    if first is not None:
        message += f": {first.path + ': ' if first.path else ''}{first.message}"
        if len(exc.reasons) > 1:
            message += f" (and {len(exc.reasons) - 1} more)"
    return MgmtError(400, message, code="INVALID_CONFIG", details={"reasons": reasons_of(exc.reasons)})


def json_or_yaml_openapi(
    content: str = "configuration document (JSON or YAML)", judged: bool = False
) -> dict[str, Any]:
    """A YAML body is described by what it parses to: a mapping, as the JSON one. `judged`: any
    body (none included) is answered with a verdict, not refused, so any body is valid."""
    schema: dict[str, Any] = {} if judged else {"type": "object"}
    return {
        "requestBody": {
            "required": not judged,
            "description": content,
            "content": {"application/json": {"schema": schema}, "application/yaml": {"schema": schema}},
        }
    }
