"""Management error body: {"error": {"code", "message", "timestamp", "type", "details"?}}.

A SvcError subclass, so the app's existing handler answers it; `code` is the contract's
upper-case code (INVALID_INPUT, INVALID_CONFIG, PRECONDITION_REQUIRED, CONFIG_CHANGED,
RESTART_REQUIRED, ACTIVATION_FAILED, UNAUTHORIZED, FORBIDDEN, NOT_FOUND, NOT_IMPLEMENTED; and
FEATURE_DISABLED, SERVICE_UNAVAILABLE, STORE_UNAVAILABLE).
`MgmtErrorBody` is the body's wire model: the OpenAPI document names it for every
management failure, and every body is built through it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from app.common.errors import SvcError


class MgmtErrorDetail(BaseModel):
    code: str = Field(description="management error code, e.g. INVALID_INPUT, NOT_FOUND, TEXT_TOO_LONG")
    message: str
    timestamp: str = Field(description="ISO 8601, UTC")
    type: str | None = Field(default=None, description="OpenAI-style error type")
    details: dict[str, Any] | None = None


class MgmtErrorBody(BaseModel):
    error: MgmtErrorDetail


def mgmt_error_body(
    code: str, message: str, type: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The wire body (fields that are None are left out)."""
    timestamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    detail = MgmtErrorDetail(code=code, message=message, timestamp=timestamp, type=type, details=details)
    return MgmtErrorBody(error=detail).model_dump(exclude_none=True)


class MgmtError(SvcError):
    def body(self) -> dict[str, Any]:
        return mgmt_error_body(self.code or "ERROR", self.message, self.type, self.details or None)


def invalid_input(message: str, details: dict[str, Any] | None = None) -> MgmtError:
    return MgmtError(400, message, code="INVALID_INPUT", details=details)


def not_found(message: str) -> MgmtError:
    return MgmtError(404, message, code="NOT_FOUND")


def feature_disabled(message: str) -> MgmtError:
    """404 FEATURE_DISABLED: the route's feature is not configured in this process. Not a fault
    (a 5xx says the server failed): the endpoint is unavailable, as one whose service the
    configuration does not enable; `message` says how to enable it. A configured service that
    is down answers 503 (`unavailable`)."""
    return MgmtError(404, message, code="FEATURE_DISABLED")


def not_implemented(message: str) -> MgmtError:
    return MgmtError(501, message, code="NOT_IMPLEMENTED")


def unavailable(message: str, code: str = "SERVICE_UNAVAILABLE") -> MgmtError:
    return MgmtError(503, message, code=code, headers={"Retry-After": "5"})
