"""The attempt loop: retries, cross-model fallback, circuit breakers, back-off and deadlines.

    for each candidate model (at most fallback.max_attempts, 1 without fallback):
        for try in 0..retry_count:           # same model, an untried replica first
            send; wait for headers and the first body byte
            success or a non-retriable answer -> return it
            retriable failure and tries left -> back-off (or Retry-After) and retry
            else -> fall back to the next model when the failure allows it

Failures are either an upstream status (retried per `ReliabilityConfig.retry_on`,
fallback per `FallbackConfig.retryable_status_codes`) or "no response" (refused
connection, reset, timeout), which standalone mode always lets fall back. When every
attempt failed, `UpstreamUnavailable` carries the records and the last failed answer.

Each attempt's request is encoded for its target's wire (fallback may switch protocol);
a chat body a messages target cannot express is refused locally (400) or, when 400
may fall back, left to the next candidate.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.common import tracing
from app.config.reliability import CircuitBreakerConfig, FailureKind, FallbackConfig, ReliabilityConfig
from app.upstream.breaker import CircuitBreakers
from app.upstream.deadlines import min_deadline, resolve_timeout
from app.upstream.headers import parse_retry_after, upstream_request_headers
from app.upstream.messages_api import MessagesTranslationError
from app.upstream.results import (
    AttemptRecord,
    UnsupportedUpstreamFormat,
    UpstreamResponse,
    UpstreamUnavailable,
)
from app.upstream.targets import SUPPORTED_API_FORMATS, UpstreamTarget
from app.upstream.transport import OpenedResponse, ResponseTooLarge, Transport
from app.upstream.wire import json_object, wire_for

logger = logging.getLogger(__name__)

_NO_RESPONSE = (FailureKind.CONNECT, FailureKind.RESET, FailureKind.TIMEOUT, FailureKind.CIRCUIT_OPEN)
Failure = tuple[FailureKind, int | None]  # why an attempt failed, and the upstream's status


@dataclass
class CallPlan:
    groups: list[list[UpstreamTarget]]  # candidate models, each with its replicas
    reliability: ReliabilityConfig
    fallback: FallbackConfig | None
    start: float
    deadline: float | None  # whole call, stream included
    chain_deadline: float | None  # until a response starts
    attempts: list[AttemptRecord] = field(default_factory=list)
    last_failed: UpstreamResponse | None = None

    @property
    def breaker(self) -> CircuitBreakerConfig | None:
        return self.fallback.circuit_breaker if self.fallback else None


def make_plan(
    candidates: list[UpstreamTarget],
    reliability: ReliabilityConfig | None,
    fallback: FallbackConfig | None,
    start: float,
    default_total: float | None,
) -> CallPlan:
    """Candidates grouped by model and the call's deadlines; refuses unusable candidate lists."""
    if not candidates:
        raise ValueError("no upstream candidates")
    unsupported = sorted({t.model for t in candidates if t.api_format not in SUPPORTED_API_FORMATS})
    if unsupported:
        raise UnsupportedUpstreamFormat(
            f"upstream api_format not supported for model(s) {', '.join(unsupported)}; "
            f"supported: {', '.join(sorted(SUPPORTED_API_FORMATS))}"
        )
    groups: dict[str, list[UpstreamTarget]] = {}
    for target in candidates:
        groups.setdefault(target.model, []).append(target)
    limit = fallback.candidate_limit if fallback else 1
    reliability = reliability or ReliabilityConfig()
    total = resolve_timeout(reliability.total_timeout_s, default_total)
    deadline = None if total is None else start + total
    chain_total = fallback.total_timeout_s if fallback else None
    return CallPlan(
        groups=list(groups.values())[:limit],
        reliability=reliability,
        fallback=fallback,
        start=start,
        deadline=deadline,
        chain_deadline=min_deadline(deadline, start + chain_total if chain_total else None),
    )


@dataclass
class _AttemptSpec:
    target: UpstreamTarget
    content: bytes
    deadline: float | None
    retry: int
    can_retry: bool
    can_fall_back: bool
    read_all: bool


class _Encoder:
    """The chat body encoded once per (wire, upstream model); a refusal is kept as the error."""

    def __init__(self, body: dict[str, Any]) -> None:
        self._body = body
        self._encoded: dict[tuple[str, str], bytes | MessagesTranslationError] = {}

    def encode(self, target: UpstreamTarget) -> bytes | MessagesTranslationError:
        key = (target.wire_format, target.upstream_model)
        if key not in self._encoded:
            try:
                payload = wire_for(target).request_body(self._body, target)
                self._encoded[key] = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            except MessagesTranslationError as exc:
                self._encoded[key] = exc
        return self._encoded[key]


def falls_back(fb: FallbackConfig | None, kind: FailureKind, status: int | None) -> bool:
    if fb is None or not fb.enabled:
        return False
    if status is not None:
        return fb.falls_back_on(status)
    return kind in _NO_RESPONSE  # standalone mode also falls back when no backend answered


def _short(content: bytes, limit: int = 200) -> str:
    text = content[:limit].decode("utf-8", errors="replace").strip()
    return text.replace("\n", " ")


class AttemptLoop:
    """Runs a plan until one attempt yields a relayable response (or raises UpstreamUnavailable)."""

    def __init__(
        self,
        transport: Transport,
        rng: random.Random,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._transport = transport
        self._clock = transport.clock
        self._rng = rng
        self._sleep = sleep
        self._breakers = CircuitBreakers(transport.clock)

    async def run(
        self, plan: CallPlan, body: dict[str, Any], headers: Mapping[str, str], read_all: bool
    ) -> tuple[UpstreamTarget, OpenedResponse]:
        encoder = _Encoder(body)
        for index, group in enumerate(plan.groups):
            is_last = index == len(plan.groups) - 1
            outcome = await self._try_model(plan, group, is_last, encoder, headers, read_all)
            if outcome is not None:
                return outcome
        raise self.unavailable(plan)

    async def _try_model(
        self,
        plan: CallPlan,
        group: list[UpstreamTarget],
        is_last: bool,
        encoder: _Encoder,
        headers: Mapping[str, str],
        read_all: bool,
    ) -> tuple[UpstreamTarget, OpenedResponse] | None:
        """Tries one model's replicas; None: fall back to the next model."""
        rel, fb = plan.reliability, plan.fallback
        per_model = fb.per_attempt_timeout_s if fb else None
        per_try = resolve_timeout(rel.per_try_timeout_s, None)
        group_deadline = min_deadline(plan.chain_deadline, self._clock() + per_model if per_model else None)
        tried: set[int] = set()
        retry = 0
        while retry <= rel.retry_count:
            self._check_chain_deadline(plan, group[0], retry)
            if group_deadline is not None and self._clock() >= group_deadline:
                return None  # this model's time is spent: next candidate
            target = self._pick(plan, group, tried, allow_open=is_last)
            if target is None:
                plan.attempts.append(
                    AttemptRecord(group[0].model, group[0].label, None, FailureKind.CIRCUIT_OPEN.value, 0.0)
                )
                return None
            tried.add(id(target))
            payload = encoder.encode(target)
            if isinstance(payload, MessagesTranslationError):
                return self._refused(plan, target, retry, payload, is_last)
            spec = _AttemptSpec(
                target=target,
                content=payload,
                deadline=min_deadline(group_deadline, self._clock() + per_try if per_try else None),
                retry=retry,
                can_retry=retry < rel.retry_count,
                can_fall_back=not is_last,
                read_all=read_all,
            )
            outcome = await self._attempt(plan, spec, headers)
            if isinstance(outcome, OpenedResponse):
                return target, outcome
            if outcome[0] is FailureKind.CONNECT and any(id(t) not in tried for t in group):
                # The request never reached that replica (an in-cluster engine with no live
                # replica, a refused port): a sibling takes the attempt, no retry spent.
                continue
            if not await self._waited_to_retry(plan, spec, outcome, group_deadline):
                if spec.can_fall_back and falls_back(fb, *outcome):
                    return None
                raise self.unavailable(plan)
            retry += 1
        return None

    def _check_chain_deadline(self, plan: CallPlan, first: UpstreamTarget, retry: int) -> None:
        if plan.chain_deadline is not None and self._clock() >= plan.chain_deadline:
            plan.attempts.append(
                AttemptRecord(
                    first.model,
                    first.label,
                    None,
                    FailureKind.DEADLINE.value,
                    0.0,
                    retry,
                    "time budget spent",
                )
            )
            raise self.unavailable(plan, timed_out=True)

    def _refused(
        self, plan: CallPlan, target: UpstreamTarget, retry: int, exc: MessagesTranslationError, is_last: bool
    ) -> tuple[UpstreamTarget, OpenedResponse] | None:
        """A request the target's protocol cannot express: a local 400, or the next candidate
        when 400 may fall back (another candidate may take the request as it is)."""
        record = AttemptRecord(target.model, target.label, 400, None, 0.0, retry, str(exc)[:200])
        plan.attempts.append(record)
        if not is_last and falls_back(plan.fallback, FailureKind.STATUS, 400):
            record.error = FailureKind.STATUS.value
            return None
        content = json.dumps(exc.body(), ensure_ascii=False).encode("utf-8")
        return target, self._transport.local_answer(400, content)

    async def _waited_to_retry(
        self, plan: CallPlan, spec: _AttemptSpec, failure: Failure, group_deadline: float | None
    ) -> bool:
        """After a failed attempt: True once the back-off is slept and the same model may be
        tried again; raises when the failure ends the call."""
        kind, status = failure
        if kind in (FailureKind.DEADLINE, FailureKind.TOO_LARGE):
            raise self.unavailable(plan, timed_out=kind is FailureKind.DEADLINE)
        rel = plan.reliability
        retry_ok = rel.retries_status(status) if status is not None else rel.retries_failure(kind)
        if not (retry_ok and spec.can_retry):
            return False
        wait = self._back_off(rel, spec.retry + 1, plan.attempts[-1])
        if group_deadline is not None and self._clock() + wait >= group_deadline:
            return False
        await self._sleep(wait)
        return True

    async def _attempt(
        self, plan: CallPlan, spec: _AttemptSpec, headers: Mapping[str, str]
    ) -> OpenedResponse | Failure:
        """One try. Returns the opened response, or the failure after recording it."""
        target = spec.target
        began = self._clock()
        record = AttemptRecord(target.model, target.label, None, None, 0.0, spec.retry)
        plan.attempts.append(record)
        with tracing.span(
            "svc_sr.upstream.attempt",
            parent=headers,  # the plan's upstream headers carry the request span's traceparent
            kind=tracing.SpanKind.CLIENT,
            attributes={
                "svc_sr.model": target.model,
                "server.address": target.label,
                "svc_sr.attempt": len(plan.attempts),
                "svc_sr.retry": spec.retry,
                "svc_sr.fallback": target.model != plan.groups[0][0].model,
            },
        ) as span:
            outcome = await self._attempt_in(plan, spec, headers, record, began, span)
            if not isinstance(outcome, OpenedResponse):
                tracing.fail(span, record.error or f"status {record.status}")
            tracing.set_attributes(span, {"http.response.status_code": record.status})
            return outcome

    async def _attempt_in(
        self,
        plan: CallPlan,
        spec: _AttemptSpec,
        headers: Mapping[str, str],
        record: AttemptRecord,
        began: float,
        span: tracing.Span,
    ) -> OpenedResponse | Failure:
        target, transport = spec.target, self._transport
        wire = wire_for(target)
        request_headers = upstream_request_headers(headers, wire.request_headers(target))
        tracing.inject(request_headers, span)  # the upstream's spans join this attempt's trace
        probe = self._breakers.enter(plan.breaker, target)
        response: httpx.Response | None = None
        phase = "headers"
        try:
            response = await transport.send(wire.url(target), spec.content, request_headers, spec.deadline)
            record.status = response.status_code
            if self._consumes(plan, spec, response.status_code):
                return await self._failed_status(plan, record, target, response, began)
            phase = "first byte"
            first_byte = resolve_timeout(plan.reliability.first_byte_timeout_s, None)
            opened = await transport.first_byte(
                response, min_deadline(spec.deadline, self._clock() + first_byte if first_byte else None)
            )
            if spec.read_all:
                phase = "body"
                opened.content = await transport.read_rest(opened, plan.deadline)
                await response.aclose()
            record.elapsed_s = self._clock() - began
            self._breakers.record(plan.breaker, target, ok=True, probe=probe)
            return opened
        except BaseException as exc:
            if response is not None:
                await response.aclose()
            if not isinstance(exc, TimeoutError | httpx.HTTPError | ResponseTooLarge):
                raise  # cancellation and programming errors propagate
            kind = self._classify(exc, plan)
            record.error = kind.value
            record.elapsed_s = self._clock() - began
            record.detail = f"{type(exc).__name__} waiting for {phase}"
            self._breakers.record(plan.breaker, target, ok=False, probe=probe)
            logger.warning("upstream attempt %s failed: %s (%s)", target.label, kind.value, record.detail)
            return kind, None

    @staticmethod
    def _consumes(plan: CallPlan, spec: _AttemptSpec, status: int) -> bool:
        """The status is a failure this call handles (retry, fallback, or 503) instead of relaying it."""
        return (
            status >= 500
            or (spec.can_retry and plan.reliability.retries_status(status))
            or (spec.can_fall_back and falls_back(plan.fallback, FailureKind.STATUS, status))
        )

    async def _failed_status(
        self,
        plan: CallPlan,
        record: AttemptRecord,
        target: UpstreamTarget,
        response: httpx.Response,
        began: float,
    ) -> Failure:
        status = response.status_code
        content = await self._transport.read_error_body(response, plan.deadline)
        record.error = FailureKind.STATUS.value
        record.elapsed_s = self._clock() - began
        record.detail = _short(content) or None  # the record keeps the upstream's words
        record.retry_after = parse_retry_after(response.headers.get("retry-after"))
        _, content = wire_for(target).answer(status, content, target)
        is_json = "json" in response.headers.get("content-type", "").lower()
        plan.last_failed = UpstreamResponse(
            status=status,
            headers=response.headers,
            content=content,
            json_body=json_object(content) if is_json else None,
            target=target,
            attempts=plan.attempts,
            first_byte_s=None,
            total_s=self._clock() - plan.start,
        )
        self._breakers.record(plan.breaker, target, ok=status < 500, probe=False)
        logger.warning("upstream attempt %s answered %d", target.label, status)
        return FailureKind.STATUS, status

    # -- small policies ----------------------------------------------------------------
    def _classify(self, exc: BaseException, plan: CallPlan) -> FailureKind:
        if isinstance(exc, ResponseTooLarge):
            return FailureKind.TOO_LARGE
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return FailureKind.CONNECT
        if isinstance(exc, TimeoutError | httpx.TimeoutException):
            if plan.deadline is not None and self._clock() >= plan.deadline - 1e-3:
                return FailureKind.DEADLINE
            return FailureKind.TIMEOUT
        return FailureKind.RESET

    def _back_off(self, rel: ReliabilityConfig, retry_number: int, last: AttemptRecord) -> float:
        """Retry-After (bounded by retry_after_max) or randomized exponential back-off."""
        bound = rel.retry_after_max_s
        if bound is not None and last.retry_after is not None:
            return min(last.retry_after, bound)
        base, top = rel.back_off_base_s, rel.back_off_max_s
        upper = min(top, base * (2**retry_number))
        return self._rng.uniform(min(base, upper), upper)

    def _pick(
        self, plan: CallPlan, group: list[UpstreamTarget], tried: set[int], allow_open: bool
    ) -> UpstreamTarget | None:
        """The first replica not tried yet, in the caller's order (selection applied the
        weights), skipping open circuits unless this is the last model left."""
        fresh = [t for t in group if id(t) not in tried] or group
        usable = [t for t in fresh if not self._breakers.is_open(plan.breaker, t)]
        if not usable:
            return fresh[0] if allow_open else None
        return usable[0]

    @staticmethod
    def unavailable(plan: CallPlan, timed_out: bool = False) -> UpstreamUnavailable:
        failed = [a for a in plan.attempts if a.error]
        timeouts = (FailureKind.TIMEOUT.value, FailureKind.DEADLINE.value)
        timed_out = timed_out or (bool(failed) and all(a.error in timeouts for a in failed))
        retry_after = next(
            (a.retry_after for a in reversed(plan.attempts) if a.retry_after is not None), None
        )
        return UpstreamUnavailable(
            plan.attempts, retry_after, timed_out=timed_out, last_response=plan.last_failed
        )
