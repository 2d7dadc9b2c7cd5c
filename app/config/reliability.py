"""Reliability (timeouts, retries) and cross-model fallback policies.

These config shapes are shared by the config file (a decision's `reliability:` and
`fallback:` blocks, `global.router.fallback`) and by `UpstreamClient`, so key names
follow the reference router exactly and its users' files load unchanged.

Semantics (reference router, standalone gateway):
- Durations are strings such as "30s" or "250ms"; "0s" turns a timeout off; an unset
  timeout falls back to the client's defaults.
- `retry_count` retries happen on the SAME model (another replica when it has several);
  fallback moves on to the NEXT candidate model.
- A connection failure, a reset or a per-try timeout counts as "no response", so
  `5xx`, `gateway-error` and `reset` all retry it; `connect-failure` retries connection
  failures only; `timeout` (svc-sr extension) retries timeouts only.
- `FallbackConfig.max_attempts` counts attempts across candidate models, the first
  one included (reference semantics): 3 means the first model plus two fallbacks;
  0 or 1 means no fallback.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from app.common.durations import format_duration, parse_duration

# Envoy's retry_on vocabulary as the reference router documents it, plus `timeout`.
RETRY_ON_CONDITIONS: frozenset[str] = frozenset(
    {
        "5xx",
        "gateway-error",
        "reset",
        "connect-failure",
        "refused-stream",
        "retriable-status-codes",
        "retriable-4xx",
        "reset-before-request",
        "timeout",
    }
)
DEFAULT_RETRY_ON: tuple[str, ...] = ("connect-failure", "refused-stream")
DEFAULT_BACK_OFF_BASE = "25ms"
DEFAULT_FALLBACK_STATUS_CODES: tuple[int, ...] = (500, 502, 503, 504)


class FailureKind(StrEnum):
    """Why an upstream attempt produced no usable response."""

    CONNECT = "connect-failure"  # refused, DNS, TLS, connect timeout, pool exhausted
    RESET = "reset"  # connection dropped or malformed HTTP while waiting for the response
    TIMEOUT = "timeout"  # per-try, per-attempt or first-byte timeout
    DEADLINE = "deadline"  # the whole call's budget is spent: never retried
    STATUS = "status"  # upstream answered with a retriable / fallback status
    CIRCUIT_OPEN = "circuit-open"  # skipped: the model's circuit breaker is open
    TOO_LARGE = "too-large"  # the answer exceeds the client's size limit: never retried


def _normalize_duration(value: Any) -> str | None:
    if value is None:
        return None
    seconds = parse_duration(value)  # raises ValueError with a clear message
    if isinstance(value, str):
        return value.strip()
    return format_duration(seconds or 0.0)


def _split_conditions(value: Any) -> Any:
    # The reference writes retry_on as one comma-separated string; lists are accepted too.
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


Duration = Annotated[str | None, BeforeValidator(_normalize_duration)]
StatusCode = Annotated[int, Field(ge=100, le=599)]


def _seconds(value: str | None) -> float | None:
    return parse_duration(value)


def _dedupe(items: list[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


def _check_status_codes(codes: list[int], field: str) -> list[int]:
    for code in codes:
        if isinstance(code, bool) or not 100 <= code <= 599:
            raise ValueError(f"{field}: {code!r} is not an HTTP status code (100 to 599)")
    return _dedupe(codes)


class ReliabilityConfig(BaseModel):
    """Timeouts and same-model retries (a decision's or a provider model's `reliability:`)."""

    model_config = ConfigDict(extra="forbid")

    total_timeout: Duration = Field(None, description="Whole call: every attempt and the streamed response.")
    per_try_timeout: Duration = Field(None, description="Each attempt, until its response starts.")
    idle_timeout: Duration = Field(None, description="Longest gap between streamed chunks.")
    first_byte_timeout: Duration = Field(None, description="Wait for the first body byte; still retriable.")
    retry_count: int = Field(0, ge=0, le=5, description="Retries after the first attempt (0 to 5).")
    retry_on: list[str] = Field(default_factory=list, description="Envoy retry_on conditions.")
    retriable_status_codes: list[int] = Field(default_factory=list)
    retry_back_off_base: Duration = Field(DEFAULT_BACK_OFF_BASE)
    retry_back_off_max: Duration = Field(None, description="Default: ten times retry_back_off_base.")
    retry_after_max: Duration = Field(None, description="Honour Retry-After up to this bound; unset: ignore.")

    @field_validator("retry_on", mode="before")
    @classmethod
    def _parse_retry_on(cls, value: Any) -> Any:
        return _split_conditions(value)

    @field_validator("retry_on")
    @classmethod
    def _check_retry_on(cls, value: list[str]) -> list[str]:
        unknown = [item for item in value if item not in RETRY_ON_CONDITIONS]
        if unknown:
            raise ValueError(
                f"unknown retry_on condition(s) {', '.join(map(repr, unknown))}; "
                f"allowed: {', '.join(sorted(RETRY_ON_CONDITIONS))}"
            )
        return _dedupe(value)

    @field_validator("retriable_status_codes")
    @classmethod
    def _check_codes(cls, value: list[int]) -> list[int]:
        return _check_status_codes(value, "retriable_status_codes")

    @model_validator(mode="after")
    def _check_back_off(self) -> ReliabilityConfig:
        base, top = self.back_off_base_s, _seconds(self.retry_back_off_max)
        if top is not None and top < base:
            raise ValueError(
                f"retry_back_off_max ({self.retry_back_off_max}) must be >= "
                f"retry_back_off_base ({self.retry_back_off_base})"
            )
        return self

    # Seconds. None = unset (client default applies); 0.0 = explicitly disabled.
    @property
    def total_timeout_s(self) -> float | None:
        return _seconds(self.total_timeout)

    @property
    def per_try_timeout_s(self) -> float | None:
        return _seconds(self.per_try_timeout)

    @property
    def idle_timeout_s(self) -> float | None:
        return _seconds(self.idle_timeout)

    @property
    def first_byte_timeout_s(self) -> float | None:
        return _seconds(self.first_byte_timeout)

    @property
    def back_off_base_s(self) -> float:
        return _seconds(self.retry_back_off_base) or 0.0

    @property
    def back_off_max_s(self) -> float:
        top = _seconds(self.retry_back_off_max)
        return top if top is not None else 10 * self.back_off_base_s

    @property
    def retry_after_max_s(self) -> float | None:
        return _seconds(self.retry_after_max)

    @property
    def effective_retry_on(self) -> frozenset[str]:
        """Conditions in force: the configured ones, or connect-failure,refused-stream.

        Listing retriable_status_codes implies `retriable-status-codes`, since a list
        that is never consulted is almost certainly a configuration slip.
        """
        conditions = set(self.retry_on or DEFAULT_RETRY_ON)
        if self.retriable_status_codes:
            conditions.add("retriable-status-codes")
        return frozenset(conditions)

    def retries_status(self, status: int) -> bool:
        """Whether an upstream answer with this status is retried on the same model."""
        on = self.effective_retry_on
        return (
            ("5xx" in on and status >= 500)
            or ("gateway-error" in on and status in (502, 503, 504))
            or ("retriable-4xx" in on and status == 409)
            or ("retriable-status-codes" in on and status in self.retriable_status_codes)
        )

    def retries_failure(self, kind: FailureKind) -> bool:
        """Whether an attempt that got no response (connect/reset/timeout) is retried."""
        on = self.effective_retry_on
        no_response = bool(on & {"5xx", "gateway-error", "reset"})
        if kind is FailureKind.CONNECT:
            return no_response or bool(on & {"connect-failure", "reset-before-request"})
        if kind is FailureKind.RESET:
            return no_response
        if kind is FailureKind.TIMEOUT:
            return no_response or "timeout" in on
        return False

    def merged_over(self, base: ReliabilityConfig | None) -> ReliabilityConfig:
        """This (more specific, e.g. decision) block layered over `base` (provider model).

        Fields written here replace base's; retry_on and retriable_status_codes add to
        base's, as in the reference router.
        """
        if base is None:
            return self
        merged = base.model_dump()
        for name in self.model_fields_set:
            merged[name] = getattr(self, name)
        merged["retry_on"] = _dedupe([*base.retry_on, *self.retry_on])
        merged["retriable_status_codes"] = _dedupe(
            [*base.retriable_status_codes, *self.retriable_status_codes]
        )
        return ReliabilityConfig.model_validate(merged)


class CircuitBreakerConfig(BaseModel):
    """Skip a model that keeps failing for a cool-down (global and recipe fallback only)."""

    model_config = ConfigDict(extra="forbid")

    consecutive_failures: int = Field(3, ge=1)
    cooldown_period: Duration = Field("30s")
    half_open_probes: int = Field(1, ge=1)

    @property
    def cooldown_s(self) -> float:
        return _seconds(self.cooldown_period) or 0.0


class FallbackConfig(BaseModel):
    """Cross-model fallback to the decision's next ranked candidate (`fallback:`)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    max_attempts: int = Field(3, ge=0, description="Attempts across candidate models, the first included.")
    total_timeout: Duration = Field(None, description="Whole fallback chain (until a response starts).")
    per_attempt_timeout: Duration = Field(None, description="Each candidate model, its retries included.")
    retryable_status_codes: list[int] = Field(default_factory=lambda: list(DEFAULT_FALLBACK_STATUS_CODES))
    circuit_breaker: CircuitBreakerConfig | None = None

    @field_validator("retryable_status_codes")
    @classmethod
    def _check_codes(cls, value: list[int]) -> list[int]:
        return _check_status_codes(value, "retryable_status_codes")

    @model_validator(mode="after")
    def _check_timeouts(self) -> FallbackConfig:
        total, each = self.total_timeout_s, self.per_attempt_timeout_s
        if total and each and each > total:
            raise ValueError(
                f"per_attempt_timeout ({self.per_attempt_timeout}) cannot exceed total_timeout ({self.total_timeout})"
            )
        return self

    @property
    def total_timeout_s(self) -> float | None:
        return _seconds(self.total_timeout)

    @property
    def per_attempt_timeout_s(self) -> float | None:
        return _seconds(self.per_attempt_timeout)

    @property
    def candidate_limit(self) -> int:
        """How many candidate models may be tried (1 when fallback is off)."""
        return max(1, self.max_attempts) if self.enabled else 1

    def falls_back_on(self, status: int) -> bool:
        return self.enabled and status in self.retryable_status_codes

    def merged_over(self, base: FallbackConfig | None) -> FallbackConfig:
        """This (more specific) block over `base`: only fields written here replace base's."""
        if base is None:
            return self
        merged = base.model_dump()
        for name in self.model_fields_set:
            merged[name] = getattr(self, name)
        return FallbackConfig.model_validate(merged)
