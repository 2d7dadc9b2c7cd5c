"""Request parsing of the classification diagnostics and the error body they answer with.

The constraints live in the request models (`classify_schemas`: non-blank texts of at most
MAX_TEXT_CHARS characters, option ranges, task types), so the served OpenAPI document
states what is enforced; `parse` turns a violation into the management body
`{error: {code, message, timestamp}}`: 400 INVALID_INPUT (malformed body, empty `text` or
`texts`), 400 TEXT_TOO_LONG (a text over the PII detector's input limit). The batch size
limit (`global.services.api.batch_classification.max_batch_size`, default 100) is live
configuration, checked by the service.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from fastapi.responses import JSONResponse
from pydantic import BaseModel, RootModel, ValidationError

from app.api.classify_schemas import DEFAULT_MAX_BATCH, MAX_TEXT_CHARS
from app.common.body_limits import DEFAULT_MAX_DEPTH, JsonRejected, decode_json, rejection_message
from app.common.mgmt_errors import mgmt_error_body
from app.config.document import RouterConfig

M = TypeVar("M", bound=BaseModel)


class ManagementError(Exception):
    """A failure answered with the management error body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, Any]:
        return mgmt_error_body(self.code, self.message)

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


def parse(model: type[M], raw: bytes, max_depth: int = DEFAULT_MAX_DEPTH, what: str = "request body") -> M:
    """`raw` under the body limits (app/common/body_limits.py), validated strictly: JSON's own
    types, as the OpenAPI document states them (`0` is no boolean)."""
    if not raw.strip():
        raise invalid(f"{what} is required")
    try:
        decode_json(raw, max_depth)
    except JsonRejected as exc:
        raise invalid(rejection_message(exc)) from None
    try:
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        errors = exc.errors()
        first: dict[str, Any] = dict(errors[0]) if errors else {}
        loc = list(first.get("loc", ()))
        if issubclass(model, RootModel) and loc:
            loc = loc[1:]  # a tagged union's first location is the variant's tag
        raise _rejection(first, _where(loc)) from None


def _where(loc: Sequence[Any]) -> str:
    """("texts", 2) -> "texts[2]"."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _rejection(error: dict[str, Any], where: str) -> ManagementError:
    kind, value = error.get("type"), error.get("input")
    if kind == "string_too_long" and isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
        return ManagementError(
            400, "TEXT_TOO_LONG", f"{where} has {len(value)} characters; the limit is {MAX_TEXT_CHARS}"
        )
    if kind in ("string_pattern_mismatch", "string_too_short") and isinstance(value, str):
        return invalid(f"{where} cannot be empty")
    reason = str(error.get("msg", "invalid value"))
    return invalid(f"{where}: {reason}" if where else reason)
