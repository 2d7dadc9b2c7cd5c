"""Calls OpenAI-compatible chat backends with timeouts, retries and cross-model fallback.

One `UpstreamClient` per process owns one pooled `httpx.AsyncClient`. Each call gets
a ranked candidate list (`UpstreamTarget`s; entries sharing `model` are replicas of
that model) and runs this loop:

    for each candidate model (at most fallback.max_attempts, 1 without fallback):
        for try in 0..retry_count:           # same model, an untried replica first
            send; wait for headers and the first body byte
            success or a non-retriable answer -> return it
            retriable failure and tries left -> back-off (or Retry-After) and retry
            else -> fall back to the next model when the failure allows it

Failures are either an upstream status (retried per `ReliabilityConfig.retry_on`,
fallback per `FallbackConfig.retryable_status_codes`) or "no response" (refused
connection, reset, timeout), which standalone mode always lets fall back.

Outcome rules:
- 2xx/3xx, or any 4xx that is not retried: returned as-is; the caller relays it.
- Every attempt failed (no response, or a 5xx once retries/fallbacks are spent):
  `UpstreamUnavailable` is raised (the caller answers 503 with Retry-After, or 504
  when `timed_out`); `last_response` holds the final upstream answer, if any.
- Streaming: retries and fallback only happen before the first body byte is
  received; afterwards a failure ends the stream with `UpstreamStreamError`.

Wire formats: a target's `api_format` picks its protocol. "openai" bodies pass
through; messages-style targets ("anthropic"/"messages") get the chat body translated
to a `POST .../messages` request, and their answers translated back (JSON answers and
error bodies to chat shape, event streams chunk by chunk to `chat.completion.chunk`
events), so callers, the cache and accounting only ever see chat. A chat body a
messages target cannot express is answered locally with a 400 (no upstream call).

Timeouts (all optional, "0s" disables): reliability.total_timeout bounds the whole
call, stream included (default 300 s); per_try_timeout bounds each attempt until its
first body byte; first_byte_timeout bounds the wait from headers to the first body
byte; idle_timeout bounds each gap between streamed chunks; fallback.total_timeout
and per_attempt_timeout bound the chain and each candidate model until a response
starts. Connection setup is bounded by `connect_timeout` (10 s).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from app.upstream.messages_api import (
    MessagesStreamTranslator,
    MessagesTranslationError,
    chat_to_messages,
    messages_to_chat,
)
from app.upstream.policy import FailureKind, FallbackConfig, ReliabilityConfig
from app.upstream.targets import SUPPORTED_API_FORMATS, UpstreamTarget

logger = logging.getLogger(__name__)

DEFAULT_TOTAL_TIMEOUT_S = 300.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
ERROR_BODY_LIMIT = 64 * 1024  # read this much of a failed attempt's body, for the record

# Never forwarded: they describe the client's connection, not the request.
HOP_BY_HOP_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "accept-encoding",
        "expect",
    }
)
# Dropped from relayed response headers: the body is re-framed and already decoded.
_RESPONSE_DROP_HEADERS = HOP_BY_HOP_HEADERS | {"content-encoding", "server", "date"}


# -- results and errors ----------------------------------------------------------------
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
    """A complete (non-stream) upstream answer."""

    status: int
    headers: httpx.Headers
    content: bytes
    json_body: dict[str, Any] | None  # parsed body when it is a JSON object
    target: UpstreamTarget
    attempts: list[AttemptRecord]
    first_byte_s: float | None  # since the call began, retries included
    total_s: float

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def usage(self) -> dict[str, Any] | None:
        usage = (self.json_body or {}).get("usage")
        return usage if isinstance(usage, dict) else None

    def relay_headers(self) -> dict[str, str]:
        return relay_headers(self.headers)


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


# -- helpers ---------------------------------------------------------------------------
def relay_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Upstream response headers that are safe to copy onto the client's response."""
    return {k: v for k, v in headers.items() if k.lower() not in _RESPONSE_DROP_HEADERS}


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds asked by a Retry-After header (delta-seconds or HTTP date); None if absent/bad."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _is_json_type(headers: httpx.Headers) -> bool:
    return "json" in headers.get("content-type", "").lower()


def _parse_json(content: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


async def _no_chunks() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


def _short(content: bytes, limit: int = 200) -> str:
    text = content[:limit].decode("utf-8", errors="replace").strip()
    return text.replace("\n", " ")


def _min_deadline(*deadlines: float | None) -> float | None:
    present = [d for d in deadlines if d is not None]
    return min(present) if present else None


def _resolve(configured: float | None, default: float | None) -> float | None:
    """Seconds in force: unset -> default; 0 (disabled) -> None (no limit)."""
    if configured is None:
        return default if default else None
    return configured or None


@dataclass
class _Breaker:
    failures: int = 0
    open_until: float = 0.0
    probes: int = 0


class _TooLarge(Exception):
    pass


@dataclass
class _Opened:
    """An attempt that reached a response (headers and the first body byte)."""

    response: httpx.Response
    chunks: AsyncIterator[bytes]
    first_chunk: bytes
    first_byte_at: float
    content: bytes | None = None  # the whole body, when the attempt read it all
    local: bool = False  # answered by the client itself (an untranslatable request)


@dataclass
class _AttemptSpec:
    target: UpstreamTarget
    content: bytes
    deadline: float | None
    retry: int
    can_retry: bool
    can_fall_back: bool
    read_all: bool


@dataclass
class _Plan:
    groups: list[list[UpstreamTarget]]
    reliability: ReliabilityConfig
    fallback: FallbackConfig | None
    start: float
    deadline: float | None  # whole call, stream included
    chain_deadline: float | None  # until a response starts
    attempts: list[AttemptRecord] = field(default_factory=list)
    last_failed: UpstreamResponse | None = None


# -- wire formats ----------------------------------------------------------------------
class BodyTranslator(Protocol):
    """Rewrites a response body as it streams: bytes in, bytes out, then a final flush."""

    def feed(self, raw: bytes) -> bytes: ...

    def finish(self) -> bytes: ...


class _WholeBody:
    """Buffers a (small, non-SSE) body and converts it at the end."""

    def __init__(self, convert: Callable[[bytes], bytes]) -> None:
        self._convert = convert
        self._parts: list[bytes] = []

    def feed(self, raw: bytes) -> bytes:
        self._parts.append(raw)
        return b""

    def finish(self) -> bytes:
        return self._convert(b"".join(self._parts))


class _ChatWire:
    """OpenAI chat completions: bodies pass through untouched."""

    def request_body(self, body: dict[str, Any], target: UpstreamTarget) -> dict[str, Any]:
        return {**body, "model": target.upstream_model}

    def answer(self, status: int, content: bytes, target: UpstreamTarget) -> tuple[int, bytes]:
        return status, content

    def stream_translator(
        self, status: int, headers: httpx.Headers, target: UpstreamTarget, body: dict[str, Any]
    ) -> BodyTranslator | None:
        return None


class _MessagesWire:
    """A messages-style backend: chat requests translated to it, its answers back to chat."""

    def request_body(self, body: dict[str, Any], target: UpstreamTarget) -> dict[str, Any]:
        return chat_to_messages(body, target.upstream_model)

    def answer(self, status: int, content: bytes, target: UpstreamTarget) -> tuple[int, bytes]:
        parsed = _parse_json(content)
        try:
            if parsed is None:
                if 200 <= status < 300:  # a success that is no message cannot become a chat answer
                    raise MessagesTranslationError("the messages upstream answered a body that is not JSON", 502)
                return status, content  # an error page (a proxy's HTML...): relayed as it is
            chat = messages_to_chat(parsed, target.model)
        except MessagesTranslationError as exc:
            status, chat = exc.status, exc.body()
        return status, json.dumps(chat, ensure_ascii=False).encode("utf-8")

    def stream_translator(
        self, status: int, headers: httpx.Headers, target: UpstreamTarget, body: dict[str, Any]
    ) -> BodyTranslator | None:
        if 200 <= status < 300 and "text/event-stream" in headers.get("content-type", "").lower():
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return MessagesStreamTranslator(target.model, include_usage=include_usage)
        return _WholeBody(lambda content: self.answer(status, content, target)[1])


_CHAT_WIRE = _ChatWire()
_MESSAGES_WIRE = _MessagesWire()


def _wire(target: UpstreamTarget) -> _ChatWire | _MessagesWire:
    return _MESSAGES_WIRE if target.wire_format == "messages" else _CHAT_WIRE


# -- streaming result ------------------------------------------------------------------
class UpstreamStream:
    """An open upstream response; `aiter_bytes()` yields chunks as they arrive.

    Always `aclose()` it (or use `async with`), also when the client disconnects.
    For a non-2xx status the body is the upstream's error document (`read()` it).
    With a `translator` (messages-style targets) the chunks yielded are the
    translated ones; `bytes_received` still counts the upstream's bytes.
    """

    def __init__(
        self,
        opened: _Opened,
        target: UpstreamTarget,
        attempts: list[AttemptRecord],
        *,
        started_at: float,
        deadline: float | None,
        idle_timeout: float | None,
        max_bytes: int,
        clock: Callable[[], float],
        translator: BodyTranslator | None = None,
    ) -> None:
        self._opened = opened
        self._translator = translator
        self._clock = clock
        self._deadline = deadline
        self._idle = idle_timeout
        self._max_bytes = max_bytes
        self._consumed = False
        self._closed = False
        self.status: int = opened.response.status_code
        self.headers: httpx.Headers = opened.response.headers
        self.target = target
        self.attempts = attempts
        self.started_at = started_at
        self.first_byte_s: float = opened.first_byte_at - started_at
        self.total_s: float | None = None
        self.bytes_received = len(opened.first_chunk)
        self.completed = False  # upstream ended the body normally
        self.error: UpstreamStreamError | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def finished(self) -> bool:
        """The body ended normally and, when translated, the translation saw the answer end
        (a messages stream's `completed`: stop_reason/message_stop, no error event)."""
        return self.completed and self.translation_completed

    @property
    def translation_completed(self) -> bool:
        """A translated stream saw the answer end; always true for a chat stream."""
        return bool(getattr(self._translator, "completed", True))

    @property
    def is_event_stream(self) -> bool:
        return "text/event-stream" in self.headers.get("content-type", "").lower()

    def relay_headers(self) -> dict[str, str]:
        return relay_headers(self.headers)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """Yield the body chunk by chunk; raises UpstreamStreamError if it breaks."""
        if self._consumed:
            raise RuntimeError("upstream stream already consumed")
        self._consumed = True
        translator = self._translator
        try:
            async for chunk in self._raw_chunks():
                out = chunk if translator is None else translator.feed(chunk)
                if out:
                    yield out
            tail = b"" if translator is None else translator.finish()
            if tail:
                yield tail
        finally:
            await self.aclose()

    async def _raw_chunks(self) -> AsyncIterator[bytes]:
        if self._opened.first_chunk:
            yield self._opened.first_chunk
        while True:
            chunk = await self._next_chunk()
            if chunk is None:
                self.completed = True
                return
            if chunk:
                yield chunk

    async def _next_chunk(self) -> bytes | None:
        now = self._clock()
        remaining = None if self._deadline is None else self._deadline - now
        wait = _min_deadline(remaining, self._idle)
        try:
            async with asyncio.timeout(None if wait is None else max(0.0, wait)):
                chunk = await anext(self._opened.chunks)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            kind = "idle_timeout" if wait == self._idle and remaining != wait else "deadline"
            self._fail(kind, f"upstream stream from {self.target.label} stalled ({kind}, {wait:.3f}s)")
        except httpx.HTTPError as exc:
            self._fail("reset", f"upstream stream from {self.target.label} broke: {type(exc).__name__}")
        self.bytes_received += len(chunk)
        if self.bytes_received > self._max_bytes:
            self._fail("too_large", f"upstream stream exceeds {self._max_bytes} bytes")
        return chunk

    def _fail(self, kind: str, message: str) -> None:
        self.error = UpstreamStreamError(kind, message)
        logger.warning("%s", message)
        raise self.error

    async def read(self) -> bytes:
        """The rest of the body at once (for error documents and tests)."""
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.total_s = self._clock() - self.started_at
        await self._opened.response.aclose()

    async def __aenter__(self) -> UpstreamStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# -- the client ------------------------------------------------------------------------
class UpstreamClient:
    """Pooled HTTP client for chat backends. Create once per process; `aclose()` at shutdown."""

    def __init__(
        self,
        *,
        max_connections: int = 1024,
        max_keepalive_connections: int = 256,
        keepalive_expiry: float = 4.0,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        default_total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT_S,
        default_idle_timeout: float | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        trust_env: bool = False,
    ) -> None:
        """`trust_env=True` honours HTTP(S)_PROXY / NO_PROXY / SSL_CERT_FILE (off: backends
        are usually on the local network). `transport`, `rng` (back-off jitter) and `sleep`
        (wait between retries) are for tests."""
        # keepalive_expiry stays below uvicorn's (hence vLLM's) 5 s keep-alive timeout: a
        # pooled connection the server is closing at that moment resets the next request
        # before any response (measured: 3 in 200 concurrent streams with 30 s).
        limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
            keepalive_expiry=keepalive_expiry,
        )
        # Read/write are bounded by our own asyncio deadlines (they differ per phase).
        timeout = httpx.Timeout(None, connect=connect_timeout, pool=connect_timeout)
        self._http = httpx.AsyncClient(
            limits=limits, timeout=timeout, transport=transport, follow_redirects=False, trust_env=trust_env
        )
        self._default_total = default_total_timeout
        self._default_idle = default_idle_timeout
        self._max_bytes = max_response_bytes
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._breakers: dict[tuple[str, str], _Breaker] = {}

    @staticmethod
    def _clock() -> float:
        return time.monotonic()

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- public calls ------------------------------------------------------------------
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
        plan = self._plan(candidates, reliability, fallback)
        target, opened = await self._run(plan, body, headers or {}, read_all=True)
        status, content = opened.response.status_code, opened.content or b""
        if not opened.local:
            status, content = _wire(target).answer(status, content, target)
        return UpstreamResponse(
            status=status,
            headers=opened.response.headers,
            content=content,
            json_body=_parse_json(content) if content else None,
            target=target,
            attempts=plan.attempts,
            first_byte_s=opened.first_byte_at - plan.start,
            total_s=self._clock() - plan.start,
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
        plan = self._plan(candidates, reliability, fallback)
        target, opened = await self._run(plan, body, headers or {}, read_all=False)
        status, upstream_headers = opened.response.status_code, opened.response.headers
        translator = (
            None if opened.local else _wire(target).stream_translator(status, upstream_headers, target, body)
        )
        return UpstreamStream(
            opened,
            target,
            plan.attempts,
            started_at=plan.start,
            deadline=plan.deadline,
            idle_timeout=_resolve(plan.reliability.idle_timeout_s, self._default_idle),
            max_bytes=self._max_bytes,
            clock=self._clock,
            translator=translator,
        )

    # -- the attempt loop ----------------------------------------------------------------
    def _plan(
        self,
        candidates: list[UpstreamTarget],
        reliability: ReliabilityConfig | None,
        fallback: FallbackConfig | None,
    ) -> _Plan:
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
        start = self._clock()
        total = _resolve(reliability.total_timeout_s, self._default_total)
        deadline = None if total is None else start + total
        chain_total = fallback.total_timeout_s if fallback else None
        return _Plan(
            groups=list(groups.values())[:limit],
            reliability=reliability,
            fallback=fallback,
            start=start,
            deadline=deadline,
            chain_deadline=_min_deadline(deadline, start + chain_total if chain_total else None),
        )

    async def _run(
        self, plan: _Plan, body: dict[str, Any], headers: Mapping[str, str], read_all: bool
    ) -> tuple[UpstreamTarget, _Opened]:
        """Retries and fallback until one attempt yields a relayable response."""
        rel, fb = plan.reliability, plan.fallback
        per_model = fb.per_attempt_timeout_s if fb else None
        per_try = _resolve(rel.per_try_timeout_s, None)
        encoded: dict[tuple[str, str], bytes | MessagesTranslationError] = {}
        for group_index, group in enumerate(plan.groups):
            is_last_group = group_index == len(plan.groups) - 1
            group_deadline = _min_deadline(
                plan.chain_deadline, self._clock() + per_model if per_model else None
            )
            tried: set[int] = set()
            for retry in range(rel.retry_count + 1):
                if plan.chain_deadline is not None and self._clock() >= plan.chain_deadline:
                    plan.attempts.append(
                        AttemptRecord(
                            group[0].model,
                            group[0].label,
                            None,
                            FailureKind.DEADLINE.value,
                            0.0,
                            retry,
                            "time budget spent",
                        )
                    )
                    raise self._unavailable(plan, timed_out=True)
                if group_deadline is not None and self._clock() >= group_deadline:
                    break  # this model's time is spent: next candidate
                target = self._pick(plan, group, tried, allow_open=is_last_group)
                if target is None:
                    plan.attempts.append(
                        AttemptRecord(
                            group[0].model, group[0].label, None, FailureKind.CIRCUIT_OPEN.value, 0.0
                        )
                    )
                    break
                tried.add(id(target))
                key = (target.wire_format, target.upstream_model)
                if key not in encoded:
                    encoded[key] = self._encode(body, target)
                payload = encoded[key]
                if isinstance(payload, MessagesTranslationError):
                    record = AttemptRecord(
                        target.model, target.label, 400, None, 0.0, retry, str(payload)[:200]
                    )
                    plan.attempts.append(record)
                    if not is_last_group and self._falls_back(fb, FailureKind.STATUS, 400):
                        record.error = FailureKind.STATUS.value
                        break  # another candidate may take the request as it is
                    return target, self._refused(payload)
                attempt = _AttemptSpec(
                    target=target,
                    content=payload,
                    deadline=_min_deadline(group_deadline, self._clock() + per_try if per_try else None),
                    retry=retry,
                    can_retry=retry < rel.retry_count,
                    can_fall_back=not is_last_group,
                    read_all=read_all,
                )
                outcome = await self._attempt(plan, attempt, headers)
                if isinstance(outcome, _Opened):
                    return target, outcome
                kind, status = outcome
                if kind in (FailureKind.DEADLINE, FailureKind.TOO_LARGE):
                    raise self._unavailable(plan, timed_out=kind is FailureKind.DEADLINE)
                retry_ok = rel.retries_status(status) if status is not None else rel.retries_failure(kind)
                if retry_ok and attempt.can_retry:
                    wait = self._back_off(rel, retry + 1, plan.attempts[-1])
                    if group_deadline is None or self._clock() + wait < group_deadline:
                        await self._sleep(wait)
                        continue
                if not is_last_group and self._falls_back(fb, kind, status):
                    break
                raise self._unavailable(plan)
        raise self._unavailable(plan)

    @staticmethod
    def _encode(body: dict[str, Any], target: UpstreamTarget) -> bytes | MessagesTranslationError:
        try:
            payload = _wire(target).request_body(body, target)
        except MessagesTranslationError as exc:
            return exc
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")

    def _refused(self, exc: MessagesTranslationError) -> _Opened:
        """A local 400 for a request the target's protocol cannot express."""
        content = json.dumps(exc.body(), ensure_ascii=False).encode("utf-8")
        response = httpx.Response(400, headers={"content-type": "application/json"}, content=content)
        return _Opened(response, _no_chunks(), content, self._clock(), content=content, local=True)

    @staticmethod
    def _falls_back(fb: FallbackConfig | None, kind: FailureKind, status: int | None) -> bool:
        if fb is None or not fb.enabled:
            return False
        if status is not None:
            return fb.falls_back_on(status)
        # Standalone mode also falls back when no backend answered at all.
        return kind in (FailureKind.CONNECT, FailureKind.RESET, FailureKind.TIMEOUT, FailureKind.CIRCUIT_OPEN)

    async def _attempt(
        self, plan: _Plan, spec: _AttemptSpec, headers: Mapping[str, str]
    ) -> _Opened | tuple[FailureKind, int | None]:
        """One try. Returns the opened response, or (failure kind, status) after recording it."""
        rel, target = plan.reliability, spec.target
        began = self._clock()
        record = AttemptRecord(target.model, target.label, None, None, 0.0, spec.retry)
        plan.attempts.append(record)
        request = self._http.build_request(
            "POST", target.request_url, content=spec.content, headers=self._request_headers(target, headers)
        )
        probe = self._breaker_enter(plan, target)
        response: httpx.Response | None = None
        phase = "headers"
        try:
            async with asyncio.timeout(self._timeout_left(spec.deadline)):
                response = await self._http.send(request, stream=True)
            status = record.status = response.status_code
            consumed = (
                status >= 500
                or (spec.can_retry and rel.retries_status(status))
                or (spec.can_fall_back and self._falls_back(plan.fallback, FailureKind.STATUS, status))
            )
            if consumed:
                return await self._failed_status(plan, record, target, response, began)
            phase = "first byte"
            chunks = response.aiter_bytes()
            first_byte = _resolve(rel.first_byte_timeout_s, None)
            first_deadline = _min_deadline(spec.deadline, self._clock() + first_byte if first_byte else None)
            try:
                async with asyncio.timeout(self._timeout_left(first_deadline)):
                    first = await anext(chunks)
            except StopAsyncIteration:
                first = b""
            opened = _Opened(response, chunks, first, self._clock())
            if spec.read_all:
                phase = "body"
                opened.content = await self._read_rest(opened, plan.deadline)
                await response.aclose()
            record.elapsed_s = self._clock() - began
            self._breaker_result(plan, target, ok=True, probe=probe)
            return opened
        except BaseException as exc:
            if response is not None:
                await response.aclose()
            if not isinstance(exc, TimeoutError | httpx.HTTPError | _TooLarge):
                raise  # cancellation and programming errors propagate
            kind = self._classify(exc, plan)
            record.error = kind.value
            record.elapsed_s = self._clock() - began
            record.detail = f"{type(exc).__name__} waiting for {phase}"
            self._breaker_result(plan, target, ok=False, probe=probe)
            logger.warning("upstream attempt %s failed: %s (%s)", target.label, kind.value, record.detail)
            return kind, None

    async def _failed_status(
        self,
        plan: _Plan,
        record: AttemptRecord,
        target: UpstreamTarget,
        response: httpx.Response,
        began: float,
    ) -> tuple[FailureKind, int | None]:
        status = response.status_code
        content = b""
        try:
            async with asyncio.timeout(self._timeout_left(plan.deadline, cap=5.0)):
                async for chunk in response.aiter_bytes():
                    content += chunk
                    if len(content) >= ERROR_BODY_LIMIT:
                        break
        except (TimeoutError, httpx.HTTPError):
            pass
        finally:
            await response.aclose()
        record.error = FailureKind.STATUS.value
        record.elapsed_s = self._clock() - began
        record.detail = _short(content) or None
        record.retry_after = parse_retry_after(response.headers.get("retry-after"))
        _, content = _wire(target).answer(status, content, target)  # the record keeps the upstream's words
        plan.last_failed = UpstreamResponse(
            status=status,
            headers=response.headers,
            content=content,
            json_body=_parse_json(content) if _is_json_type(response.headers) else None,
            target=target,
            attempts=plan.attempts,
            first_byte_s=None,
            total_s=self._clock() - plan.start,
        )
        self._breaker_result(plan, target, ok=status < 500, probe=False)
        logger.warning("upstream attempt %s answered %d", target.label, status)
        return FailureKind.STATUS, status

    async def _read_rest(self, opened: _Opened, deadline: float | None) -> bytes:
        parts = [opened.first_chunk]
        size = len(opened.first_chunk)
        async with asyncio.timeout(self._timeout_left(deadline)):
            async for chunk in opened.chunks:
                size += len(chunk)
                if size > self._max_bytes:
                    raise _TooLarge(f"upstream response exceeds {self._max_bytes} bytes")
                parts.append(chunk)
        return b"".join(parts)

    # -- small policies ----------------------------------------------------------------
    def _request_headers(self, target: UpstreamTarget, headers: Mapping[str, str]) -> httpx.Headers:
        out = httpx.Headers({k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP_HEADERS})
        out["content-type"] = "application/json"
        out["accept-encoding"] = "identity"  # relay bytes as received; no decoder buffering
        out.update(target.auth_headers())  # per protocol: Authorization or x-api-key
        out.update(target.extra_headers)
        return out

    def _timeout_left(self, deadline: float | None, cap: float | None = None) -> float | None:
        if deadline is None:
            return cap
        left = max(0.0, deadline - self._clock())
        return left if cap is None else min(left, cap)

    def _classify(self, exc: BaseException, plan: _Plan) -> FailureKind:
        if isinstance(exc, _TooLarge):
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
        self, plan: _Plan, group: list[UpstreamTarget], tried: set[int], allow_open: bool
    ) -> UpstreamTarget | None:
        """The first replica not tried yet, in the caller's order (selection applied the
        weights), skipping open circuits unless this is the last model left."""
        fresh = [t for t in group if id(t) not in tried] or group
        usable = [t for t in fresh if not self._circuit_open(plan, t)]
        if not usable:
            return fresh[0] if allow_open else None
        return usable[0]

    # -- circuit breaker (only with fallback.circuit_breaker) ---------------------------
    # closed -> (consecutive_failures) -> open for cooldown_period -> half-open: up to
    # half_open_probes attempts at once; a success closes it, a failure reopens it.
    def _circuit_open(self, plan: _Plan, target: UpstreamTarget) -> bool:
        config = plan.fallback.circuit_breaker if plan.fallback else None
        state = self._breakers.get((target.model, target.base_url))
        if config is None or state is None or state.failures < config.consecutive_failures:
            return False
        return state.open_until > self._clock() or state.probes >= config.half_open_probes

    def _breaker_enter(self, plan: _Plan, target: UpstreamTarget) -> bool:
        """Counts a half-open probe; returns whether this attempt is one."""
        config = plan.fallback.circuit_breaker if plan.fallback else None
        state = self._breakers.get((target.model, target.base_url))
        if config is None or state is None or state.failures < config.consecutive_failures:
            return False
        state.probes += 1
        return True

    def _breaker_result(self, plan: _Plan, target: UpstreamTarget, ok: bool, probe: bool) -> None:
        config = plan.fallback.circuit_breaker if plan.fallback else None
        if config is None:
            return
        state = self._breakers.setdefault((target.model, target.base_url), _Breaker())
        if probe:
            state.probes = max(0, state.probes - 1)
        if ok:
            state.failures, state.open_until = 0, 0.0
            return
        state.failures += 1
        if state.failures >= config.consecutive_failures:
            state.open_until = self._clock() + config.cooldown_s

    def _unavailable(self, plan: _Plan, timed_out: bool = False) -> UpstreamUnavailable:
        failed = [a for a in plan.attempts if a.error]
        timeouts = (FailureKind.TIMEOUT.value, FailureKind.DEADLINE.value)
        timed_out = timed_out or (bool(failed) and all(a.error in timeouts for a in failed))
        retry_after = next(
            (a.retry_after for a in reversed(plan.attempts) if a.retry_after is not None), None
        )
        return UpstreamUnavailable(
            plan.attempts, retry_after, timed_out=timed_out, last_response=plan.last_failed
        )


__all__ = [
    "AttemptRecord",
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_TOTAL_TIMEOUT_S",
    "UnsupportedUpstreamFormat",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamResponse",
    "UpstreamStream",
    "UpstreamUnavailable",
    "UpstreamStreamError",
    "parse_retry_after",
    "relay_headers",
]
