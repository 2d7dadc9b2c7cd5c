"""Management error body: {"error": {"code", "message", "timestamp", "type", "details"?}}.

A SvcError subclass, so the app's existing handler answers it; `code` is the spec 1
upper-case code (INVALID_INPUT, INVALID_CONFIG, PRECONDITION_REQUIRED, CONFIG_CHANGED,
RESTART_REQUIRED, ACTIVATION_FAILED, UNAUTHORIZED, FORBIDDEN, NOT_FOUND, NOT_IMPLEMENTED).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.common.errors import SvcError


class MgmtError(SvcError):
    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "type": self.type,
        }
        if self.details:
            error["details"] = self.details
        return {"error": error}


def invalid_input(message: str, details: dict[str, Any] | None = None) -> MgmtError:
    return MgmtError(400, message, code="INVALID_INPUT", details=details)


def not_found(message: str) -> MgmtError:
    return MgmtError(404, message, code="NOT_FOUND")


def not_implemented(message: str) -> MgmtError:
    return MgmtError(501, message, code="NOT_IMPLEMENTED")


def unavailable(message: str, code: str = "SERVICE_UNAVAILABLE") -> MgmtError:
    return MgmtError(503, message, code=code, headers={"Retry-After": "5"})
