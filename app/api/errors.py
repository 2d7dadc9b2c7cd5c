"""The Ingress's HTTP rendering of the error model (app/common/errors.py).

`install_error_handlers(app)` makes a FastAPI app answer every failure in the one
OpenAI-style shape: SvcError, request validation (400), unknown routes/methods
(404/405), and any other exception (500 with a request id, logged, never a hang).
`BodySizeLimitMiddleware` answers 413 before an oversized body is read.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.common.errors import (
    REQUEST_ID_HEADER,
    SvcError,
    bad_request,
    body_too_large,
    internal_error,
    validation_message,
)

logger = logging.getLogger(__name__)
SERVER_ERROR = 500
LOGGED_BODY_BYTES = 1024  # of a 5xx answer's body, in its log line (the error body fits)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def error_response(exc: SvcError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def install_error_handlers(app: FastAPI) -> None:
    """Make every failure of `app` answer with the error body. Call before the app starts."""

    async def svc_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SvcError)
        return error_response(exc)

    async def validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        message, path = validation_message(exc.errors())
        return error_response(bad_request(message, param=path))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        codes = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request, headers.get("Allow")))
        err = SvcError(exc.status_code, message, code=codes.get(exc.status_code), headers=headers)
        return error_response(err)

    app.add_exception_handler(SvcError, svc_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_middleware(CatchAllMiddleware)


def allowed_methods(request: Request, given: str | None = None) -> list[str]:
    """Every method the request's path answers: those the app's OpenAPI document lists for the
    path's template (generated from the registered routes; cached by FastAPI), and `given`,
    Starlette's Allow, which names only the first route matching the path while each method is
    a route of its own here (and covers the few routes the document leaves out)."""
    methods = {m.strip().upper() for m in (given or "").split(",") if m.strip()}
    paths: dict[str, dict[str, Any]] = request.app.openapi().get("paths", {})
    matching = [t for t in paths if _template(t).fullmatch(request.url.path)]
    # The most specific template names the path (`/recipes/validate`, not `/recipes/{name}`).
    fewest = min((t.count("{") for t in matching), default=0)
    for template in (t for t in matching if t.count("{") == fewest):
        methods |= {m.upper() for m in paths[template] if m.upper() in _METHODS}
    return sorted(methods)


_METHODS = frozenset({"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"})


@functools.lru_cache(maxsize=1024)
def _template(path: str) -> re.Pattern[str]:
    """An OpenAPI path template (`/a/{id}`) as the pattern of the paths it names."""
    return re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path)))


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
    """Pure ASGI: an unexpected exception becomes a 500 body with a request id, and every 5xx
    the app answers is logged as it is sent, at ERROR with its request id: the exception's
    traceback, or the answer's own error body (a store or backend that is down). ERROR also
    makes a Serve replica write its buffered log at once (deployments/replica_logs.py), so an
    operator finds the id a client quotes in `svc-sr logs service`.

    If the response had already started (a stream), the exception is logged and the response
    ends; it is not re-raised, so the server stays quiet and healthy.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _header(scope, REQUEST_ID_HEADER.encode()) or uuid.uuid4().hex
        where = f"{scope.get('method')} {scope.get('path')} (request id {request_id})"
        status = 0

        async def tracking_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and status >= SERVER_ERROR:
                status = -status  # logged once, with the first part of its body
                excerpt = bytes(message.get("body", b""))[:LOGGED_BODY_BYTES]
                logger.error("answered %d on %s: %s", -status, where, excerpt.decode("utf-8", "replace"))
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            logger.exception("unhandled error on %s", where)
            if status == 0:
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
        refusal = self._refuse_declared(_header(scope, b"content-length"))
        if refusal is not None:
            await _send_error(send, refusal)
            return
        limited = _LimitedBody(self.max_bytes, receive, send)
        try:
            await self.app(scope, limited.receive, limited.send)
        except Exception:
            if not limited.exceeded:
                raise
        await limited.finish()

    def _refuse_declared(self, declared: str | None) -> SvcError | None:
        """A Content-Length that is invalid or over the limit is refused before anything is read."""
        if declared is None:
            return None
        try:
            too_large = int(declared) > self.max_bytes
        except ValueError:
            return bad_request("invalid Content-Length header")
        return body_too_large(self.max_bytes) if too_large else None


class _LimitedBody:
    """One request's receive/send under a body limit: reading stops past it, and whatever the
    app answers then (e.g. a 400 for the aborted read), the client gets the 413."""

    def __init__(self, max_bytes: int, receive: Receive, send: Send) -> None:
        self.max_bytes = max_bytes
        self._receive = receive
        self._send = send
        self.received = 0
        self.exceeded = False
        self.app_started = False
        self.replied = False

    async def receive(self) -> Message:
        if self.exceeded:
            raise _BodyTooLarge()
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.max_bytes:
                self.exceeded = True
                raise _BodyTooLarge()
        return message

    async def send(self, message: Message) -> None:
        if self.exceeded and not self.app_started:
            await self._reply_once()
            return
        if message["type"] == "http.response.start":
            self.app_started = True
        await self._send(message)

    async def finish(self) -> None:
        if self.exceeded and not self.app_started:
            await self._reply_once()

    async def _reply_once(self) -> None:
        if not self.replied:
            self.replied = True
            await _send_error(self._send, body_too_large(self.max_bytes))
