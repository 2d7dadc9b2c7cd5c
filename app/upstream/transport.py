"""The HTTP side of an upstream call: one pooled httpx client, one attempt's phases, and the
open stream handed to the caller.

An attempt goes through three phases, each under its own deadline (the attempt loop in
`retry` picks them): `send` (until the response headers), `first_byte` (until the first
body byte), then either `read_rest` (a non-stream call reads the whole body inside the
attempt, so a body that breaks off is retried like any failure) or an `UpstreamStream`
(a stream is relayed chunk by chunk; a failure after its first byte ends it with
`UpstreamStreamError`, never a retry). Bodies are relayed as the upstream sent them:
translating them to chat is the exchange's job (`app.upstream.wire`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

import httpx

from app.upstream.deadlines import min_deadline, time_left
from app.upstream.results import AttemptRecord, UpstreamStreamError
from app.upstream.targets import UpstreamTarget

logger = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
ERROR_BODY_LIMIT = 64 * 1024  # read this much of a failed attempt's body, for the record
ERROR_BODY_WAIT_S = 5.0  # at most this long, for the same reason


@dataclass(frozen=True)
class PoolSettings:
    """The connection pool of one process's upstream client."""

    max_connections: int = 1024
    max_keepalive_connections: int = 256
    # Below uvicorn's (hence vLLM's) 5 s keep-alive timeout: a pooled connection the server
    # is closing at that moment resets the next request before any response (measured: 3
    # in 200 concurrent streams with 30 s).
    keepalive_expiry: float = 4.0
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    # Honour HTTP(S)_PROXY / NO_PROXY / SSL_CERT_FILE (off: backends are usually local).
    trust_env: bool = False


class ResponseTooLarge(Exception):
    """A body went over `PoolSettings.max_response_bytes`."""


@dataclass
class OpenedResponse:
    """An attempt that reached a response (headers and the first body byte)."""

    response: httpx.Response
    chunks: AsyncIterator[bytes]
    first_chunk: bytes
    first_byte_at: float
    content: bytes | None = None  # the whole body, when the attempt read it all
    local: bool = False  # answered by the client itself (an untranslatable request)


async def _no_chunks() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


class Transport:
    """The pooled httpx client and the phases of one attempt; `clock` is monotonic seconds."""

    def __init__(
        self,
        pool: PoolSettings,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
        mounts: Mapping[str, httpx.AsyncBaseTransport] | None = None,
    ) -> None:
        """`mounts`: transports for URL patterns that are not sockets (the in-cluster models'
        DeploymentHandle transport, app/llm/addressing.py)."""
        limits = httpx.Limits(
            max_connections=pool.max_connections,
            max_keepalive_connections=pool.max_keepalive_connections,
            keepalive_expiry=pool.keepalive_expiry,
        )
        # Read/write are bounded by our own asyncio deadlines (they differ per phase).
        timeout = httpx.Timeout(None, connect=pool.connect_timeout, pool=pool.connect_timeout)
        self._http = httpx.AsyncClient(
            limits=limits,
            timeout=timeout,
            transport=transport,
            mounts=dict(mounts or {}),
            follow_redirects=False,
            trust_env=pool.trust_env,
        )
        self.clock = clock
        self.max_bytes = pool.max_response_bytes

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    async def aclose(self) -> None:
        await self._http.aclose()

    def timeout_left(self, deadline: float | None, cap: float | None = None) -> float | None:
        return time_left(deadline, self.clock(), cap)

    async def send(
        self, url: str, content: bytes, headers: Mapping[str, str], deadline: float | None
    ) -> httpx.Response:
        """POST and wait for the response headers; the body stays unread."""
        request = self._http.build_request("POST", url, content=content, headers=headers)
        async with asyncio.timeout(self.timeout_left(deadline)):
            return await self._http.send(request, stream=True)

    async def first_byte(self, response: httpx.Response, deadline: float | None) -> OpenedResponse:
        chunks = response.aiter_bytes()
        try:
            async with asyncio.timeout(self.timeout_left(deadline)):
                first = await anext(chunks)
        except StopAsyncIteration:
            first = b""
        return OpenedResponse(response, chunks, first, self.clock())

    async def read_rest(self, opened: OpenedResponse, deadline: float | None) -> bytes:
        """The whole body (first chunk included); raises ResponseTooLarge."""
        parts = [opened.first_chunk]
        size = len(opened.first_chunk)
        async with asyncio.timeout(self.timeout_left(deadline)):
            async for chunk in opened.chunks:
                size += len(chunk)
                if size > self.max_bytes:
                    raise ResponseTooLarge(f"upstream response exceeds {self.max_bytes} bytes")
                parts.append(chunk)
        return b"".join(parts)

    async def read_error_body(self, response: httpx.Response, deadline: float | None) -> bytes:
        """As much of a failed attempt's body as the record needs, then close it."""
        content = b""
        try:
            async with asyncio.timeout(self.timeout_left(deadline, cap=ERROR_BODY_WAIT_S)):
                async for chunk in response.aiter_bytes():
                    content += chunk
                    if len(content) >= ERROR_BODY_LIMIT:
                        break
        except (TimeoutError, httpx.HTTPError):
            pass
        finally:
            await response.aclose()
        return content

    def local_answer(self, status: int, content: bytes) -> OpenedResponse:
        """A response the client makes up itself (no upstream call)."""
        response = httpx.Response(status, headers={"content-type": "application/json"}, content=content)
        return OpenedResponse(response, _no_chunks(), content, self.clock(), content=content, local=True)


@dataclass(frozen=True)
class StreamLimits:
    deadline: float | None  # the whole call's
    idle_timeout: float | None  # each gap between chunks
    max_bytes: int
    clock: Callable[[], float]


class UpstreamStream:
    """An open upstream response; `aiter_bytes()` yields its RAW chunks as they arrive.

    Always `aclose()` it (or use `async with`), also when the client disconnects.
    For a non-2xx status the body is the upstream's error document (`read()` it).
    `completed`: the upstream body ended normally. `local`: the client answered itself
    (a chat error body, not to be translated).
    """

    def __init__(
        self,
        opened: OpenedResponse,
        target: UpstreamTarget,
        attempts: list[AttemptRecord],
        *,
        started_at: float,
        limits: StreamLimits,
    ) -> None:
        self._opened = opened
        self._limits = limits
        self._consumed = False
        self._closed = False
        self.status: int = opened.response.status_code
        self.headers: httpx.Headers = opened.response.headers
        self.target = target
        self.attempts = attempts
        self.local = opened.local
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
    def is_event_stream(self) -> bool:
        return "text/event-stream" in self.headers.get("content-type", "").lower()

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """Yield the body chunk by chunk; raises UpstreamStreamError if it breaks."""
        if self._consumed:
            raise RuntimeError("upstream stream already consumed")
        self._consumed = True
        try:
            if self._opened.first_chunk:
                yield self._opened.first_chunk
            while (chunk := await self._next_chunk()) is not None:
                if chunk:
                    yield chunk
            self.completed = True
        finally:
            await self.aclose()

    async def _next_chunk(self) -> bytes | None:
        limits = self._limits
        remaining = None if limits.deadline is None else limits.deadline - limits.clock()
        wait = min_deadline(remaining, limits.idle_timeout)
        try:
            async with asyncio.timeout(None if wait is None else max(0.0, wait)):
                chunk = await anext(self._opened.chunks)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            kind = "idle_timeout" if wait == limits.idle_timeout and remaining != wait else "deadline"
            self._fail(kind, f"upstream stream from {self.target.label} stalled ({kind}, {wait:.3f}s)")
        except httpx.HTTPError as exc:
            self._fail("reset", f"upstream stream from {self.target.label} broke: {type(exc).__name__}")
        self.bytes_received += len(chunk)
        if self.bytes_received > limits.max_bytes:
            self._fail("too_large", f"upstream stream exceeds {limits.max_bytes} bytes")
        return chunk

    def _fail(self, kind: str, message: str) -> NoReturn:
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
        self.total_s = self._limits.clock() - self.started_at
        await self._opened.response.aclose()

    async def __aenter__(self) -> UpstreamStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
