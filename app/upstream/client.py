"""Calls chat backends with timeouts, retries and cross-model fallback: the facade.

One `UpstreamClient` per process owns one pooled transport (`transport`). Each call
gets a ranked candidate list (`UpstreamTarget`s; entries sharing `model` are replicas
of that model) and runs the attempt loop (`retry`).

Outcome rules:
- 2xx/3xx, or any 4xx that is not retried: returned as the upstream sent it (its own
  wire format: translating it to chat is the exchange's job, `app.upstream.wire`).
- A request a messages target cannot express: a local 400 with a chat error body
  (`local=True`: nothing to translate), or the next candidate when 400 may fall back.
- Every attempt failed (no response, or a 5xx once retries/fallbacks are spent):
  `UpstreamUnavailable` is raised (the caller answers 503 with Retry-After, or 504
  when `timed_out`); `last_response` holds the final upstream answer, in chat shape.
- A replica the request never reached (connect failure: refused, no live in-cluster
  replica) hands the attempt to the model's next untried replica without spending a
  retry; an in-cluster engine's HTTP backend_refs take over this way.
- Streaming: retries and fallback only happen before the first body byte is
  received; afterwards a failure ends the stream with `UpstreamStreamError`.

Timeouts (all optional, "0s" disables): reliability.total_timeout bounds the whole
call, stream included (default 300 s); per_try_timeout bounds each attempt until its
first body byte; first_byte_timeout bounds the wait from headers to the first body
byte; idle_timeout bounds each gap between streamed chunks; fallback.total_timeout
and per_attempt_timeout bound the chain and each candidate model until a response
starts. Connection setup is bounded by `PoolSettings.connect_timeout` (10 s).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from app.config.reliability import FallbackConfig, ReliabilityConfig
from app.upstream.deadlines import resolve_timeout
from app.upstream.results import (
    UpstreamResponse,
)
from app.upstream.retry import AttemptLoop, make_plan
from app.upstream.targets import UpstreamTarget
from app.upstream.transport import (
    PoolSettings,
    StreamLimits,
    Transport,
    UpstreamStream,
)
from app.upstream.wire import json_object

DEFAULT_TOTAL_TIMEOUT_S = 300.0


class UpstreamClient:
    """Pooled HTTP client for chat backends. Create once per process; `aclose()` at shutdown."""

    def __init__(
        self,
        *,
        pool: PoolSettings | None = None,
        default_total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT_S,
        default_idle_timeout: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        mounts: Mapping[str, httpx.AsyncBaseTransport] | None = None,
    ) -> None:
        """`transport`, `rng` (back-off jitter) and `sleep` (wait between retries) are for tests;
        `mounts` route URL patterns to other transports (in-cluster models)."""
        self._transport = Transport(pool or PoolSettings(), time.monotonic, transport, mounts)
        self._loop = AttemptLoop(self._transport, rng or random.Random(), sleep)
        self._clock = self._transport.clock
        self._default_total = default_total_timeout
        self._default_idle = default_idle_timeout

    @property
    def closed(self) -> bool:
        return self._transport.closed

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def complete(
        self,
        candidates: list[UpstreamTarget],
        body: dict[str, Any],
        headers: Mapping[str, str] | None = None,
        reliability: ReliabilityConfig | None = None,
        fallback: FallbackConfig | None = None,
    ) -> UpstreamResponse:
        """Non-stream chat completion (body["stream"] is forced off).

        The whole body is read inside the attempt, so a body that breaks off is
        retried like any other failed attempt.
        """
        body = dict(body)
        if body.get("stream"):
            body["stream"] = False
            body.pop("stream_options", None)
        plan = make_plan(candidates, reliability, fallback, self._clock(), self._default_total)
        target, opened = await self._loop.run(plan, body, headers or {}, read_all=True)
        content = opened.content or b""
        return UpstreamResponse(
            status=opened.response.status_code,
            headers=opened.response.headers,
            content=content,
            json_body=json_object(content) if content else None,
            target=target,
            attempts=plan.attempts,
            first_byte_s=opened.first_byte_at - plan.start,
            total_s=self._clock() - plan.start,
            local=opened.local,
        )

    async def stream(
        self,
        candidates: list[UpstreamTarget],
        body: dict[str, Any],
        headers: Mapping[str, str] | None = None,
        reliability: ReliabilityConfig | None = None,
        fallback: FallbackConfig | None = None,
    ) -> UpstreamStream:
        """Open a streaming chat completion (body["stream"] is forced on).

        Returns once the chosen backend has sent its first body byte. `stream_options`
        is left to the caller (add {"include_usage": true} to get a usage chunk).
        """
        body = {**body, "stream": True}
        plan = make_plan(candidates, reliability, fallback, self._clock(), self._default_total)
        target, opened = await self._loop.run(plan, body, headers or {}, read_all=False)
        limits = StreamLimits(
            deadline=plan.deadline,
            idle_timeout=resolve_timeout(plan.reliability.idle_timeout_s, self._default_idle),
            max_bytes=self._transport.max_bytes,
            clock=self._clock,
        )
        return UpstreamStream(opened, target, plan.attempts, started_at=plan.start, limits=limits)


__all__ = ["DEFAULT_TOTAL_TIMEOUT_S", "UpstreamClient"]
