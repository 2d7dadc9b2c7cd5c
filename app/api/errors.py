"""The data plane's error model: one OpenAI-style body for every failure.

    {"error": {"message": str, "type": str, "code": str | null, "param"?: str, "details"?: {...}}}

`SvcError` carries status, body and headers; the factories below fix the status,
type and code of each documented failure. `install_error_handlers(app)` makes a
FastAPI app answer every failure in this shape: SvcError, request validation (400),
unknown routes/methods (404/405), and any other exception (500 with a request id,
logged, never a hang). `BodySizeLimitMiddleware` answers 413 before an oversized
body is read.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

if TYPE_CHECKING:
    from app.upstream.client import UpstreamUnavailable

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REQUEST_ID_HEADER = "x-request-id"
NO_ROUTE_MESSAGE = "unable to route request: no model selected and no default model configured"

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    501: "not_implemented_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


def error_type_for(status: int) -> str:
    if status in _TYPE_BY_STATUS:
        return _TYPE_BY_STATUS[status]
    return "internal_error" if status >= 500 else "invalid_request_error"


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: str | None = None
    param: str | None = None
    details: dict[str, Any] | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class SvcError(Exception):
    """A failure with a documented status and body; raise it anywhere in a handler."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str | None = None,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or error_type_for(status)
        self.code = code
        self.details = details
        self.headers = dict(headers or {})
        self.param = param

    def body(self) -> dict[str, Any]:
        detail = ErrorDetail(
            message=self.message, type=self.type, code=self.code, param=self.param, details=self.details
        )
        data = detail.model_dump(exclude_none=True)
        data.setdefault("code", None)  # always present, as in OpenAI's bodies
        return {"error": data}

    def to_response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)

    def __repr__(self) -> str:
        return f"SvcError({self.status}, {self.message!r}, code={self.code!r})"


# -- factories -------------------------------------------------------------------------
def bad_request(message: str, code: str = "invalid_request", param: str | None = None) -> SvcError:
    return SvcError(400, message, "invalid_request_error", code, param=param)


def model_not_found(model: str) -> SvcError:
    return SvcError(
        404, f"The model `{model}` does not exist", "invalid_request_error", "model_not_found", param="model"
    )


def no_route() -> SvcError:
    return SvcError(400, NO_ROUTE_MESSAGE, "invalid_request_error", "no_route", param="model")


def body_too_large(limit: int) -> SvcError:
    return SvcError(
        413, f"request body exceeds the limit of {limit} bytes", "invalid_request_error", "body_too_large"
    )


def _retry_after_header(seconds: float | None, default: int) -> dict[str, str]:
    value = default if seconds is None or not math.isfinite(seconds) else max(0, math.ceil(seconds))
    return {"Retry-After": str(value)}


def upstream_unavailable(retry_after: float | None = None, message: str | None = None) -> SvcError:
    """503: no backend produced an answer; Retry-After is the upstream's, or 1 s."""
    return SvcError(
        503,
        message or "upstream model backends are unavailable; retry later",
        "service_unavailable_error",
        "upstream_unavailable",
        headers=_retry_after_header(retry_after, 1),
    )


def upstream_timeout(retry_after: float | None = None) -> SvcError:
    """504: every attempt timed out."""
    return SvcError(
        504,
        "upstream model backend timed out",
        "timeout_error",
        "upstream_timeout",
        headers=_retry_after_header(retry_after, 1),
    )


def from_upstream_unavailable(exc: UpstreamUnavailable) -> SvcError:
    """503 (504 when every attempt timed out) for an UpstreamUnavailable."""
    if exc.timed_out:
        return upstream_timeout(exc.retry_after)
    return upstream_unavailable(exc.retry_after)


def security_violation(
    code: str, entities: Iterable[str] = (), action: str = "block", message: str | None = None
) -> SvcError:
    """403 for a blocked request, e.g. code "pii_detected" or "jailbreak_detected"."""
    found = list(dict.fromkeys(entities))
    if message is None:
        what = {
            "pii_detected": "personally identifiable information",
            "jailbreak_detected": "a jailbreak attempt",
        }
        message = f"request blocked: {what.get(code, code.replace('_', ' '))} detected"
        if found:
            message += f" ({', '.join(found)})"
    return SvcError(
        403, message, "security_violation", code, details={"entities_found": found, "action_taken": action}
    )


def rate_limited(retry_after: float | None = None) -> SvcError:
    return SvcError(
        429,
        "too many requests",
        "rate_limit_error",
        "rate_limit_exceeded",
        headers=_retry_after_header(retry_after, 1),
    )


def internal_error(request_id: str) -> SvcError:
    return SvcError(
        500,
        f"internal error (request id {request_id})",
        "internal_error",
        "internal_error",
        details={"request_id": request_id},
        headers={REQUEST_ID_HEADER: request_id},
    )


# -- FastAPI wiring --------------------------------------------------------------------
def validation_message(errors: Iterable[dict[str, Any]]) -> tuple[str, str | None]:
    """("<field.path>: <reason>", "field.path") for the first pydantic/FastAPI error."""
    for error in errors:
        loc = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path", "header")]
        path = ".".join(loc) or None
        reason = str(error.get("msg") or "invalid value")
        return (f"{path}: {reason}" if path else reason), path
    return "invalid request", None


def install_error_handlers(app: FastAPI) -> None:
    """Make every failure of `app` answer with the error body. Call before the app starts."""

    async def svc_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SvcError)
        return exc.to_response()

    async def validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        message, path = validation_message(exc.errors())
        return bad_request(message, param=path).to_response()

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        codes = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        err = SvcError(
            exc.status_code, message, code=codes.get(exc.status_code), headers=dict(exc.headers or {})
        )
        return err.to_response()

    app.add_exception_handler(SvcError, svc_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_middleware(CatchAllMiddleware)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _send_error(send: Send, err: SvcError) -> None:
    body = json.dumps(err.body()).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in err.headers.items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class CatchAllMiddleware:
    """Pure ASGI: an unexpected exception becomes a logged 500 body with a request id.

    If the response had already started (a stream), it is logged and the response
    ends; the exception is not re-raised, so the server stays quiet and healthy.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            request_id = _header(scope, REQUEST_ID_HEADER.encode()) or uuid.uuid4().hex
            logger.exception(
                "unhandled error on %s %s (request id %s)", scope.get("method"), scope.get("path"), request_id
            )
            if not started:
                await _send_error(send, internal_error(request_id))


class _BodyTooLarge(Exception):
    pass


class BodySizeLimitMiddleware:
    """Pure ASGI: 413 when the request body exceeds `max_bytes`.

    A Content-Length over the limit is refused before anything is read. Without one
    (chunked upload), reading stops as soon as the running total passes the limit;
    whatever the app then does, the client gets the 413 body (unless the app had
    already started its response, in which case the response is cut short).
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.max_bytes
            except ValueError:
                await _send_error(send, bad_request("invalid Content-Length header"))
                return
            if too_large:
                await _send_error(send, body_too_large(self.max_bytes))
                return

        received = 0
        exceeded = False
        app_started = False
        replied = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                raise _BodyTooLarge()
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    raise _BodyTooLarge()
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal app_started, replied
            if exceeded and not app_started:
                # The app reacted to the aborted read (e.g. with a 400): answer 413 instead.
                if not replied:
                    replied = True
                    await _send_error(send, body_too_large(self.max_bytes))
                return
            if message["type"] == "http.response.start":
                app_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
        if exceeded and not app_started and not replied:
            await _send_error(send, body_too_large(self.max_bytes))
