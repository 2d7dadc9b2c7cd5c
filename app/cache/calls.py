"""A cache backend as an event loop calls it.

The in-process backends answer in well under a millisecond, less than a thread hop, so
they are called inline. A network store (Redis, Milvus, a hybrid over one) can be slow or
down: its calls run in a worker thread, so the loop that serves requests never waits on it
(each backend bounds its own calls by its configured timeout). One wrapper for every
caller: the Router's pipeline, the ResponseCache deployment, its same-node channel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from app.cache.base import (
    CacheEpochs,
    CacheHit,
    CacheScope,
    CacheStats,
    CacheUnavailable,
    FlushOutcome,
    ResponseCacheStore,
    Vector,
)
from app.cache.memory import InMemorySemanticCache

T = TypeVar("T")
log = logging.getLogger(__name__)

# Backends whose state lives in this process: called inline.
IN_PROCESS: tuple[type, ...] = (InMemorySemanticCache,)


def runs_in_process(backend: ResponseCacheStore) -> bool:
    return isinstance(backend, IN_PROCESS)


class AsyncCache:
    """`backend`'s calls, awaitable; `offload` None: in a thread unless the backend is in-process.

    `on_unavailable(operation, error)`: when given, a lookup or store that the store cannot
    answer (CacheUnavailable) degrades instead of raising: the lookup is a miss, the store is
    skipped, and the callback counts it. Stats, clear, count, flush and epochs still raise:
    their callers (the management API) report the outage; so does epoch (its caller then
    writes without a token)."""

    def __init__(
        self,
        backend: ResponseCacheStore,
        offload: bool | None = None,
        on_unavailable: Callable[[str, CacheUnavailable], None] | None = None,
    ) -> None:
        self.backend = backend
        self.offload = not runs_in_process(backend) if offload is None else offload
        self.on_unavailable = on_unavailable

    async def _run(self, call: Callable[..., T], *args: Any) -> T:
        if self.offload:
            return await asyncio.to_thread(call, *args)
        return call(*args)

    async def lookup(self, partition: str, vector: Vector, threshold: float) -> CacheHit | None:
        try:
            return await self._run(self.backend.lookup, partition, vector, threshold)
        except CacheUnavailable as exc:
            self._degrade("lookup", exc)
            return None

    async def store(
        self,
        partition: str,
        vector: Vector,
        response: dict[str, Any],
        ttl_seconds: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        """Whether the entry was written (False: dropped as stale, or the store was down)."""
        try:
            # The token only when there is one: a write without it is the call it always was.
            args = (partition, vector, response, ttl_seconds) + (() if epoch is None else (epoch,))
            return bool(await self._run(self.backend.store, *args))
        except CacheUnavailable as exc:
            self._degrade("store", exc)
            return False

    def _degrade(self, operation: str, exc: CacheUnavailable) -> None:
        if self.on_unavailable is None:
            raise exc
        self.on_unavailable(operation, exc)

    async def stats(self) -> CacheStats:
        return await self._run(self.backend.stats)

    async def clear(self, partition: str | None = None, scope: CacheScope | None = None) -> int:
        return await self._run(self.backend.clear, partition, scope)

    async def count(self, scope: CacheScope | None = None) -> int:
        return await self._run(self.backend.count, scope)

    async def flush(self, scope: CacheScope | None = None) -> FlushOutcome:
        return await self._run(self.backend.flush, scope)

    async def epoch(self, partition: str) -> int:
        return await self._run(self.backend.epoch, partition)

    async def epochs(self) -> CacheEpochs:
        return await self._run(self.backend.epochs)

    async def configure(self, settings: Any) -> None:
        await self._run(self.backend.configure, settings)

    async def open(self) -> str | None:
        """Connect to the store and read it once (every backend's `epochs()` does), so that the
        owner serves from an open store, not one its first request opens. Returns why the
        store did not answer (None: open); the backend then reconnects on later calls, so a
        store that is down degrades the cache and never holds its owner back."""
        try:
            await self._run(self.backend.epochs)
        except CacheUnavailable as exc:
            return str(exc)
        return None

    async def close(self, after_s: float = 0.0) -> None:
        """Release the store's connection (a network or Milvus Lite backend; memory has none),
        after `after_s`: a replaced backend stays open for the calls that took it before."""
        await asyncio.sleep(after_s)
        close = getattr(self.backend, "close", None)
        if not callable(close):
            return
        try:
            await asyncio.to_thread(close)
        except Exception as exc:  # noqa: BLE001 - a backend that cannot close cleanly is dropped anyway
            log.warning("closing a response cache backend failed: %s", exc)
