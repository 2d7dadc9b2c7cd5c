"""Request checks of the classification diagnostics and the error body they answer with.

Failures use the management body `{error: {code, message, timestamp}}`: 400 INVALID_INPUT
(malformed body, empty `text` or `texts`, batch over
`global.services.api.batch_classification.max_batch_size`, default 100), 400
TEXT_TOO_LONG (over the PII detector's own input limit).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from app.api.classify_models import ManagementErrorBody
from app.config.models import RouterConfig

MAX_TEXT_CHARS = 100_000  # the PII detector's own input limit
DEFAULT_MAX_BATCH = 100

M = TypeVar("M", bound=BaseModel)


class ManagementError(Exception):
    """A failure answered with the management error body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, Any]:
        timestamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        return ManagementErrorBody.model_validate(
            {"error": {"code": self.code, "message": self.message, "timestamp": timestamp}}
        ).model_dump()

    def to_response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def invalid(message: str) -> ManagementError:
    return ManagementError(400, "INVALID_INPUT", message)


def max_batch_size(config: RouterConfig) -> int:
    api = (config.global_.services.model_extra or {}).get("api")
    batch = api.get("batch_classification") if isinstance(api, dict) else None
    value = batch.get("max_batch_size") if isinstance(batch, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return DEFAULT_MAX_BATCH


def check_text(text: str, field: str = "text") -> str:
    if not text.strip():
        raise invalid(f"{field} cannot be empty")
    if len(text) > MAX_TEXT_CHARS:
        raise ManagementError(
            400, "TEXT_TOO_LONG", f"{field} has {len(text)} characters; the limit is {MAX_TEXT_CHARS}"
        )
    return text


def parse(model: type[M], raw: bytes | dict[str, Any], what: str = "request body") -> M:
    try:
        if isinstance(raw, dict):
            return model.model_validate(raw)
        if not raw.strip():
            raise invalid(f"{what} is required")
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors()
        first: dict[str, Any] = dict(errors[0]) if errors else {}
        loc = ".".join(str(p) for p in first.get("loc", ()))
        reason = first.get("msg", "invalid value")
        if first.get("type") == "json_invalid":
            raise invalid(f"{what} is not valid JSON") from None
        if isinstance(raw, dict):
            loc = f"{what}.{loc}" if loc else what
        raise invalid(f"{loc}: {reason}" if loc else reason) from None
