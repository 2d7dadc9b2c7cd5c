"""AsyncCache (app/cache/calls.py): in-process backends inline, network stores in a thread,
and a store that is down degrades a lookup to a miss and skips a write, counted."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from app.cache.base import CacheStats, CacheUnavailable
from app.cache.calls import AsyncCache
from app.cache.memory import InMemorySemanticCache

VECTOR = np.full(8, 1 / np.sqrt(8), np.float32)


class DownStore:
    """A network store that is down: every call raises, and records the thread it ran on."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def _down(self) -> None:
        self.threads.append(threading.get_ident())
        raise CacheUnavailable("connection refused")

    def lookup(self, partition: str, vector: Any, threshold: float) -> None:
        self._down()

    def store(
        self,
        partition: str,
        vector: Any,
        response: dict[str, Any],
        ttl_seconds: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        self._down()
        return False

    def stats(self) -> CacheStats:
        self._down()
        return CacheStats()

    def clear(self, partition: str | None = None) -> int:
        self._down()
        return 0

    def configure(self, settings: Any) -> None:
        self._down()


async def test_an_in_process_backend_is_called_inline() -> None:
    cache = AsyncCache(InMemorySemanticCache())
    assert not cache.offload
    await cache.store("m|d", VECTOR, {"choices": [{"message": {"content": "x"}}]})
    hit = await cache.lookup("m|d", VECTOR, 0.9)
    assert hit is not None and hit.response["choices"][0]["message"]["content"] == "x"


async def test_a_store_that_is_down_degrades_and_is_counted() -> None:
    store = DownStore()
    skipped: list[str] = []
    cache = AsyncCache(store, on_unavailable=lambda operation, exc: skipped.append(operation))  # type: ignore[arg-type]
    assert cache.offload  # a network store: off the event loop
    assert await cache.lookup("m|d", VECTOR, 0.9) is None  # a miss
    assert await cache.store("m|d", VECTOR, {"choices": []}, epoch=3) is False  # skipped
    assert skipped == ["lookup", "store"]
    assert threading.get_ident() not in store.threads  # both ran in a worker thread
    with pytest.raises(CacheUnavailable):  # the management API reports the outage
        await cache.stats()


async def test_without_a_callback_the_outage_is_raised() -> None:
    cache = AsyncCache(DownStore())  # type: ignore[arg-type]
    with pytest.raises(CacheUnavailable):
        await cache.lookup("m|d", VECTOR, 0.9)
