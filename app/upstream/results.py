"""What an upstream call gives back: the answer, its attempt records, and its failures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from app.upstream.targets import UpstreamTarget


@dataclass
class AttemptRecord:
    """One try against one backend."""

    model: str
    target: str  # model@host, safe to log
    status: int | None  # upstream status when it answered
    error: str | None  # a FailureKind value, None when the attempt produced the result
    elapsed_s: float
    retry: int = 0  # 0 for the first try on this model
    detail: str | None = None  # short reason, never credentials
    retry_after: float | None = None  # seconds asked by the upstream's Retry-After


@dataclass
class UpstreamResponse:
    """A complete (non-stream) upstream answer, as the upstream sent it (its own wire format).

    `local`: the client answered itself (a request the target's protocol cannot express);
    the body is already a chat error body and must not be translated again.
    """

    status: int
    headers: httpx.Headers
    content: bytes
    json_body: dict[str, Any] | None  # parsed body when it is a JSON object
    target: UpstreamTarget
    attempts: list[AttemptRecord]
    first_byte_s: float | None  # since the call began, retries included
    total_s: float
    local: bool = False

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def usage(self) -> dict[str, Any] | None:
        """The body's `usage` object, in the upstream's own shape."""
        usage = (self.json_body or {}).get("usage")
        return usage if isinstance(usage, dict) else None


class UpstreamError(Exception):
    """Base class of upstream failures."""


class UnsupportedUpstreamFormat(UpstreamError, ValueError):
    """A candidate needs a wire protocol this client does not speak."""


class UpstreamUnavailable(UpstreamError):
    """No attempt produced a usable answer; map to 503 (504 when `timed_out`)."""

    def __init__(
        self,
        attempts: list[AttemptRecord],
        retry_after: float | None = None,
        *,
        timed_out: bool = False,
        last_response: UpstreamResponse | None = None,
        message: str | None = None,
    ) -> None:
        self.attempts = attempts
        self.retry_after = retry_after
        self.timed_out = timed_out
        self.last_response = last_response
        summary = ", ".join(f"{a.target}:{a.status or a.error}" for a in attempts) or "no attempt"
        super().__init__(message or f"all upstream attempts failed ({summary})")

    @property
    def last_status(self) -> int | None:
        return next((a.status for a in reversed(self.attempts) if a.status is not None), None)


class UpstreamStreamError(UpstreamError):
    """The stream broke after its first byte (reset, idle timeout, deadline)."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)
