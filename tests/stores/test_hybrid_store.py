"""Hybrid-specific behaviour of HybridSemanticCache (the shared contract is
test_cache_contract.py): the front answers first, a store hit fills the front, the front is
bounded by max_memory_entries, a flush on one replica reaches another's front within
EPOCH_POLL_S, and a store that is down degrades to the front alone without ever failing a
lookup or a store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from app.cache.base import CacheHit, CacheScope, CacheStats, CacheTuning, CacheUnavailable
from app.cache.hybrid import EPOCH_POLL_S, HybridSemanticCache, hybrid_cache
from app.cache.memory import InMemorySemanticCache
from app.cache.milvus_store import MilvusSemanticCache  # noqa: E402
from app.common.ports import free_port
from app.config.cache_stores import HnswSettings, MilvusCacheSettings

DIM = 16


class DownStore:
    """A store of record whose every call fails the way a dead Redis or Milvus does."""

    def __init__(self) -> None:
        self.calls = 0

    def _fail(self, *_: Any, **__: Any) -> Any:
        self.calls += 1
        raise CacheUnavailable("store is down")

    lookup = store = clear = configure = count = flush = epoch = epochs = _fail

    def stats(self) -> CacheStats:
        return self._fail()


@pytest.fixture
def vectors() -> np.ndarray:
    rows = np.random.default_rng(11).standard_normal((8, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture
def milvus(milvus_uri: str) -> Iterator[MilvusSemanticCache]:
    settings = MilvusCacheSettings.model_validate(
        {"uri": milvus_uri, "collection": {"vector_field": {"dimension": DIM}}}
    )
    store = MilvusSemanticCache(settings, CacheTuning())
    yield store
    store.close()


def answer(text: str) -> dict[str, Any]:
    return {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": text}}]}


def text(hit: CacheHit | None) -> str | None:
    return None if hit is None else hit.response["choices"][0]["message"]["content"]


def test_a_store_hit_fills_the_front(milvus, vectors) -> None:
    writer = hybrid_cache(milvus, CacheTuning(), HnswSettings())
    writer.store("p", vectors[0], answer("shared"))
    reader = HybridSemanticCache(InMemorySemanticCache(), milvus)  # another replica: empty front
    assert reader.front.lookup("p", vectors[0], 0.99) is None
    assert text(reader.lookup("p", vectors[0], 0.99)) == "shared"
    assert text(reader.front.lookup("p", vectors[0], 0.99)) == "shared"
    milvus.clear()
    assert text(reader.lookup("p", vectors[0], 0.99)) == "shared"  # the front answered
    stats = reader.stats()
    assert (stats.hits, stats.misses, stats.entries) == (2, 0, 0)


def test_a_flush_on_one_replica_reaches_another_front(milvus, vectors) -> None:
    now = [0.0]
    flusher = HybridSemanticCache(InMemorySemanticCache(), milvus)
    reader = HybridSemanticCache(InMemorySemanticCache(), milvus, clock=lambda: now[0])
    flusher.store("m|math|tenant:1", vectors[0], answer("flushed"))
    flusher.store("m|code", vectors[1], answer("kept"))
    assert text(reader.lookup("m|math|tenant:1", vectors[0], 0.99)) == "flushed"  # now in its front
    assert text(reader.lookup("m|code", vectors[1], 0.99)) == "kept"
    flusher.flush(CacheScope(model="m", decision="math"))
    assert text(reader.lookup("m|math|tenant:1", vectors[0], 0.99)) == "flushed"  # not polled yet
    now[0] += EPOCH_POLL_S
    assert reader.lookup("m|math|tenant:1", vectors[0], 0.99) is None
    assert text(reader.front.lookup("m|code", vectors[1], 0.99)) == "kept"  # other scopes stay
    assert reader.stats().epochs.by_name() == {"m|math": 1}


def test_a_write_the_store_drops_as_stale_skips_the_front(milvus, vectors) -> None:
    cache = hybrid_cache(milvus, CacheTuning(), HnswSettings())
    token = cache.epoch("m|math")
    cache.flush()
    assert cache.store("m|math", vectors[0], answer("pre-flush"), epoch=token) is False
    assert cache.front.lookup("m|math", vectors[0], 0.0) is None


def test_stores_write_both_tiers(milvus, vectors) -> None:
    cache = hybrid_cache(milvus, CacheTuning(), HnswSettings())
    cache.store("p", vectors[0], answer("both"))
    assert text(cache.front.lookup("p", vectors[0], 0.99)) == "both"
    assert text(milvus.lookup("p", vectors[0], 0.99)) == "both"


def test_the_front_is_bounded_by_max_memory_entries(milvus, vectors) -> None:
    cache = hybrid_cache(milvus, CacheTuning(max_entries=100), HnswSettings(max_memory_entries=2))
    for i in range(4):
        cache.store("p", vectors[i], answer(str(i)))
    assert cache.front.stats().entries == 2
    assert cache.stats().entries == 4
    cache.configure({"max_memory_entries": 1})
    assert cache.front.stats().entries == 1
    assert [text(cache.lookup("p", vectors[i], 0.99)) for i in range(4)] == ["0", "1", "2", "3"]


def test_a_fill_expires_with_the_store_entry(vectors) -> None:
    now = [1_000.0]
    front = InMemorySemanticCache()
    store = InMemorySemanticCache(wall_clock=lambda: now[0])
    store.store("p", vectors[0], answer("old"))
    cache = HybridSemanticCache(front, store, CacheTuning(ttl_seconds=10), wall_clock=lambda: now[0])
    now[0] += 9.5  # half a second of the default lifetime left: not worth a fill
    assert text(cache.lookup("p", vectors[0], 0.99)) == "old"
    assert front.stats().entries == 0


def test_a_store_that_is_down_degrades_to_the_front(vectors) -> None:
    down = DownStore()
    cache = HybridSemanticCache(InMemorySemanticCache(), down, clock=lambda: 0.0)  # one epoch poll
    assert cache.lookup("p", vectors[0], 0.9) is None
    cache.store("p", vectors[0], answer("memory only"))
    assert text(cache.lookup("p", vectors[0], 0.99)) == "memory only"
    stats = cache.stats()
    assert (stats.entries, stats.hits, stats.misses) == (1, 1, 1)
    assert down.calls == 4  # epoch poll, lookup, store, stats: the front hit never asked the store
    with pytest.raises(CacheUnavailable, match="not the shared store"):
        cache.clear()


def test_a_milvus_server_that_is_down_never_fails_a_request(vectors) -> None:
    settings = MilvusCacheSettings.model_validate(
        {"uri": f"http://127.0.0.1:{free_port()}", "collection": {"vector_field": {"dimension": DIM}}}
    )
    cache = hybrid_cache(MilvusSemanticCache(settings), CacheTuning(), HnswSettings(use_hnsw=True))
    assert cache.lookup("p", vectors[0], 0.9) is None
    cache.store("p", vectors[0], answer("still served"))
    assert text(cache.lookup("p", vectors[0], 0.99)) == "still served"
