"""The error model of every front door: one OpenAI-style body for every failure.

    {"error": {"message": str, "type": str, "code": str | null, "param"?: str, "details"?: {...}}}

`SvcError` carries status, body and headers; the factories below fix the status,
type and code of each documented failure. Transport-free: the HTTP layer
(app/api/errors.py) renders it for FastAPI, the ext_proc bridge as an immediate response.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel

logger = logging.getLogger(__name__)

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


def error_body(
    message: str,
    type: str,
    code: str | None = None,
    param: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The data plane's error body (`ErrorBody`), for an answer, a stream's error event or an
    Envoy local reply: `code` always present (null when none), as in OpenAI's bodies."""
    detail = ErrorDetail(message=message, type=type, code=code, param=param, details=details)
    data = detail.model_dump(exclude_none=True)
    data.setdefault("code", None)
    return {"error": data}


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
        return error_body(self.message, self.type, self.code, self.param, self.details)

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


class UpstreamFailure(Protocol):
    """What the answer to failed upstream attempts needs (app.upstream's UpstreamUnavailable)."""

    timed_out: bool
    retry_after: float | None


def from_upstream_unavailable(exc: UpstreamFailure) -> SvcError:
    """503 (504 when every attempt timed out) for an UpstreamUnavailable."""
    if exc.timed_out:
        return upstream_timeout(exc.retry_after)
    return upstream_unavailable(exc.retry_after)


def security_violation(
    code: str,
    entities: Iterable[str] = (),
    action: str = "block",
    message: str | None = None,
    refusal: dict[str, Any] | None = None,
) -> SvcError:
    """403 for a blocked request, e.g. code "pii_detected" or "jailbreak_detected". `refusal`
    (check, score, threshold, read) joins `details` beside the spec's two fields."""
    found = list(dict.fromkeys(entities))
    if message is None:
        what = {
            "pii_detected": "personally identifiable information",
            "jailbreak_detected": "a jailbreak attempt",
            "harmful_content_detected": "harmful content",
        }
        message = f"request blocked: {what.get(code, code.replace('_', ' '))} detected"
        if found:
            message += f" ({', '.join(found)})"
    details: dict[str, Any] = {"entities_found": found, "action_taken": action}
    if refusal:
        details |= {k: v for k, v in refusal.items() if k not in ("entities", "code")}
    return SvcError(403, message, "security_violation", code, details=details)


def rate_limited(retry_after: float | None = None) -> SvcError:
    """429 RATE_LIMIT_EXCEEDED (the contract's code); Retry-After in whole seconds, at least 1."""
    seconds = 1.0 if retry_after is None or not math.isfinite(retry_after) else max(1.0, retry_after)
    return SvcError(
        429,
        "too many requests: rate limit exceeded",
        "rate_limit_error",
        "RATE_LIMIT_EXCEEDED",
        headers=_retry_after_header(seconds, 1),
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
def validation_message(errors: Iterable[Mapping[str, Any]]) -> tuple[str, str | None]:
    """("<field.path>: <reason>", "field.path") for the first pydantic/FastAPI error."""
    for error in errors:
        loc = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path", "header")]
        path = ".".join(loc) or None
        reason = str(error.get("msg") or "invalid value")
        return (f"{path}: {reason}" if path else reason), path
    return "invalid request", None
