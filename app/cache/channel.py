"""The same-node channel to the ResponseCache replica: length-prefixed JSON frames over a
Unix socket.

Why: every routed request looks the cache up once and writes it once. Through a Serve
DeploymentHandle each of those calls costs ~1.2 ms on a quiet 2-core machine and 4 ms under
load, with ~2.5 ms of CPU in the cache replica for a lookup that itself takes 0.04 ms. Over
this channel a call costs a socket round trip. The cache stays one shared store (the
ResponseCache replica owns it); only the transport changes, and only between processes on
the same node. Callers on other nodes, or when the channel fails, use the handle
(the caller's lane, app/cache/lane.py, decides).

Frames: 4-byte big-endian length, then a pydantic model as JSON (`CacheCall` in,
`CacheReply` out); ops: lookup, store (with an optional epoch token), epoch, ping. One call at a time per connection; the client keeps a small pool.
The socket file is created 0600: only processes of the same user can connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ValidationError

from app.cache.base import CacheHit, CacheUnavailable, ResponseCacheStore
from app.cache.calls import AsyncCache

log = logging.getLogger("svc_sr.cache.channel")

_LENGTH = struct.Struct(">I")
MAX_FRAME_BYTES = 64 * 1024 * 1024  # a cached answer is a chat.completion; 64 MiB is far above any


class ChannelInfo(BaseModel):
    """Where a cache replica's channel listens: its Ray node and socket path."""

    node_id: str
    path: str


class CacheCall(BaseModel):
    op: Literal["lookup", "store", "epoch", "ping"]
    partition: str = ""
    vector: list[float] = []
    threshold: float | None = None
    response: dict[str, Any] | None = None
    ttl_seconds: int | None = None
    epoch: int | None = None  # store: the partition's token (app/cache/base.py)


class CacheReply(BaseModel):
    ok: bool
    hit: CacheHit | None = None
    stored: bool | None = None  # store: whether the entry was written
    epoch: int | None = None  # epoch: the partition's token
    error: str | None = None


class ChannelError(ConnectionError):
    """The channel could not carry the call (closed, refused, bad frame): use the handle."""


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if size > MAX_FRAME_BYTES:
        raise ChannelError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    return await reader.readexactly(size)


def _frame(model: BaseModel) -> bytes:
    payload = model.model_dump_json().encode()
    return _LENGTH.pack(len(payload)) + payload


class CacheChannelServer:
    """Serves a backend's lookup/store on a Unix socket, on the running loop: an in-process
    backend inline (sub-millisecond, cheaper than a thread hop), a network store in a thread
    (app/cache/calls.py). `on_store` runs after each store (the replica updates its size
    gauge). `cache` may be swapped while serving (a reload that changes the backend)."""

    def __init__(
        self, cache: AsyncCache | ResponseCacheStore, path: str, on_store: Callable[[], None] | None = None
    ) -> None:
        self.cache = cache if isinstance(cache, AsyncCache) else AsyncCache(cache)
        self.path = path
        self._on_store = on_store
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    async def start(self) -> CacheChannelServer:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        # umask, not chmod after bind: the socket is never reachable with wider permissions.
        previous = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=self.path)
        finally:
            os.umask(previous)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._connections):  # clients notice at once and use the handle
            writer.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                try:
                    raw = await _read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client closed its end, or sent a frame over the limit
                writer.write(_frame(await self.answer(raw)))
                await writer.drain()
        finally:
            self._connections.discard(writer)
            writer.close()

    async def answer(self, raw: bytes) -> CacheReply:
        """One call; never raises (a bad frame or value, a store that is down: answered, not a
        dropped link; the caller counts a miss)."""
        try:
            call = CacheCall.model_validate_json(raw)
        except ValidationError as exc:
            return CacheReply(ok=False, error=f"bad call: {exc.error_count()} error(s)")
        try:
            if call.op == "lookup":
                vector = np.asarray(call.vector, dtype=np.float32)
                return CacheReply(
                    ok=True, hit=await self.cache.lookup(call.partition, vector, call.threshold or 0.0)
                )
            if call.op == "store":
                vector = np.asarray(call.vector, dtype=np.float32)
                stored = await self.cache.store(
                    call.partition, vector, call.response or {}, call.ttl_seconds, call.epoch
                )
                if self._on_store is not None:
                    self._on_store()
                return CacheReply(ok=True, stored=stored)
            if call.op == "epoch":
                return CacheReply(ok=True, epoch=await self.cache.epoch(call.partition))
            return CacheReply(ok=True)
        except (ValueError, TypeError, CacheUnavailable) as exc:  # bad values; a store that is down
            return CacheReply(ok=False, error=f"{type(exc).__name__}: {exc}")


class CacheChannelClient:
    """Calls a CacheChannelServer; connections are pooled and reused, one call at a time each."""

    def __init__(self, path: str, max_idle: int = 16, timeout_s: float = 5.0) -> None:
        self.path = path
        self.max_idle = max_idle
        self.timeout_s = timeout_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def lookup(self, partition: str, vector: np.ndarray, threshold: float) -> CacheHit | None:
        reply = await self._call(
            CacheCall(op="lookup", partition=partition, vector=_floats(vector), threshold=threshold)
        )
        return reply.hit

    async def store(
        self,
        partition: str,
        vector: np.ndarray,
        response: dict[str, Any],
        ttl_seconds: int | None,
        epoch: int | None = None,
    ) -> bool:
        reply = await self._call(
            CacheCall(
                op="store",
                partition=partition,
                vector=_floats(vector),
                response=response,
                ttl_seconds=ttl_seconds,
                epoch=epoch,
            )
        )
        return bool(reply.stored)

    async def epoch(self, partition: str) -> int:
        reply = await self._call(CacheCall(op="epoch", partition=partition))
        return int(reply.epoch or 0)

    async def ping(self) -> None:
        await self._call(CacheCall(op="ping"))

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()

    async def _call(self, call: CacheCall) -> CacheReply:
        try:
            reader, writer = (
                self._idle.pop()
                if self._idle
                else await asyncio.wait_for(asyncio.open_unix_connection(self.path), self.timeout_s)
            )
        except (OSError, TimeoutError) as exc:
            raise ChannelError(f"cache channel {self.path}: {exc}") from exc
        try:
            writer.write(_frame(call))
            await writer.drain()
            raw = await asyncio.wait_for(_read_frame(reader), self.timeout_s)
            reply = CacheReply.model_validate_json(raw)
        except BaseException as exc:
            writer.close()  # a half-read connection is never reused
            if isinstance(exc, (OSError, asyncio.IncompleteReadError, TimeoutError, ValidationError)):
                raise ChannelError(f"cache channel {self.path}: {type(exc).__name__}: {exc}") from exc
            raise
        if len(self._idle) < self.max_idle:
            self._idle.append((reader, writer))
        else:
            writer.close()
        if not reply.ok:
            # The server understood the frame and refused the values: the same call through the
            # handle would fail the same way, so this is the caller's error, not the channel's.
            raise ValueError(reply.error or "cache call refused")
        return reply


def _floats(vector: Any) -> list[float]:
    return np.asarray(vector, dtype=np.float32).reshape(-1).tolist()
