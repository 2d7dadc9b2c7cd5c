"""Milvus-specific behaviour of MilvusSemanticCache, on Milvus Lite (the shared contract is
test_cache_contract.py): persistence across backend objects, expiry on the wall clock,
partition keys that need no escaping, metrics other than COSINE, the collection's own
dimension, and a server that is down."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from app.cache.base import CacheTuning, CacheUnavailable, VectorDimensionMismatch
from app.cache.milvus_store import RESPONSE_MAX_BYTES, MilvusSemanticCache  # noqa: E402
from app.common.ports import free_port
from app.config.cache_stores import MilvusCacheSettings

DIM = 16


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def settings(uri: str, **extra: Any) -> MilvusCacheSettings:
    collection = extra.pop("collection", {})
    vector_field = {"dimension": DIM, **collection.pop("vector_field", {})}
    return MilvusCacheSettings.model_validate(
        {"uri": uri, "collection": {"vector_field": vector_field, **collection}, **extra}
    )


@pytest.fixture
def make(milvus_uri: str) -> Iterator[Callable[..., MilvusSemanticCache]]:
    built: list[MilvusSemanticCache] = []

    def build(
        clock: Callable[[], float] = time.time, uri: str = milvus_uri, **tuning: Any
    ) -> MilvusSemanticCache:
        extra = tuning.pop("settings", {})
        cache = MilvusSemanticCache(settings(uri, **extra), CacheTuning(**tuning), clock=clock)
        built.append(cache)
        return cache

    yield build
    for cache in built:
        cache.close()


@pytest.fixture
def vectors() -> np.ndarray:
    rows = np.random.default_rng(7).standard_normal((8, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def answer(text: str) -> dict[str, Any]:
    return {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": text}}]}


def text(hit: Any) -> str | None:
    return None if hit is None else hit.response["choices"][0]["message"]["content"]


def test_a_second_backend_on_the_same_path_sees_the_entries(make, vectors) -> None:
    first = make()
    first.store("m|d", vectors[0], answer("persisted"))
    second = make()
    assert text(second.lookup("m|d", vectors[0], 0.99)) == "persisted"
    first.close()
    third = make()
    assert text(third.lookup("m|d", vectors[0], 0.99)) == "persisted"
    assert third.stats().entries == 1


def test_entries_expire_on_the_clock_and_are_purged_on_store(make, vectors) -> None:
    clock = FakeClock()
    cache = make(clock=clock, ttl_seconds=10)
    cache.store("p", vectors[0], answer("default ttl"))
    cache.store("p", vectors[1], answer("own ttl"), ttl_seconds=30)
    cache.store("p", vectors[2], answer("forever"), ttl_seconds=0)
    clock.now += 11
    assert cache.lookup("p", vectors[0], 0.99) is None
    assert text(cache.lookup("p", vectors[1], 0.99)) == "own ttl"
    clock.now += 20
    cache.store("p", vectors[3], answer("new"))
    stats = cache.stats()
    assert (stats.entries, stats.expirations) == (2, 2)
    assert text(cache.lookup("p", vectors[2], 0.99)) == "forever"


@pytest.mark.parametrize("odd", ['say "hi"', "back\\slash", "naïve|décision", "a b:c|d", "x' or 1==1"])
def test_partitions_with_quotes_and_unicode_stay_apart(make, vectors, odd: str) -> None:
    cache = make()
    cache.store(odd, vectors[0], answer("odd"))
    cache.store("plain", vectors[0], answer("plain"))
    assert text(cache.lookup(odd, vectors[0], 0.99)) == "odd"
    assert text(cache.lookup("plain", vectors[0], 0.99)) == "plain"
    assert cache.clear(odd) == 1
    assert cache.lookup(odd, vectors[0], 0.99) is None
    assert text(cache.lookup("plain", vectors[0], 0.99)) == "plain"


@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_every_metric_reports_cosine_similarity(make, vectors, metric: str) -> None:
    cache = make(settings={"collection": {"vector_field": {"metric_type": metric}}})
    base = vectors[0]
    ortho = vectors[1] - vectors[1].dot(base) * base
    ortho /= np.linalg.norm(ortho)
    near = 0.8 * base + 0.6 * ortho  # cosine 0.8 with base
    cache.store("p", base, answer("base"))
    hit = cache.lookup("p", near, 0.5)
    assert hit is not None and hit.similarity == pytest.approx(0.8, abs=1e-3)
    assert cache.lookup("p", near, 0.85) is None


def test_an_existing_collection_keeps_its_dimension(make, vectors) -> None:
    make().store("p", vectors[0], answer("16-d"))
    reopened = make(settings={"collection": {"vector_field": {"dimension": 384}}})
    assert text(reopened.lookup("p", vectors[0], 0.99)) == "16-d"
    with pytest.raises(VectorDimensionMismatch, match="16-d vectors"):  # a CacheUnavailable: callers degrade
        reopened.lookup("p", np.ones(384, dtype=np.float32), 0.5)


def test_lfu_eviction_keeps_the_popular_entry_across_a_refresh(make, vectors) -> None:
    clock = FakeClock()
    cache = make(clock=clock, max_entries=2, eviction_policy="lfu")
    cache.store("p", vectors[0], answer("popular"))
    clock.now += 1
    cache.store("p", vectors[1], answer("ignored"))
    for _ in range(3):
        clock.now += 1
        assert cache.lookup("p", vectors[0], 0.99) is not None
    cache.store("p", vectors[0], answer("popular, refreshed"))  # a duplicate keeps its hits
    clock.now += 1
    cache.store("p", vectors[2], answer("newcomer"))
    assert cache.lookup("p", vectors[1], 0.99) is None
    assert text(cache.lookup("p", vectors[0], 0.99)) == "popular, refreshed"
    assert cache.stats().evictions == 1


def test_an_answer_past_the_varchar_limit_is_not_cached(make, vectors) -> None:
    cache = make()
    cache.store("p", vectors[0], answer("x" * RESPONSE_MAX_BYTES))
    assert cache.lookup("p", vectors[0], 0.5) is None
    assert cache.stats().entries == 0


def test_a_server_that_is_down_raises_cache_unavailable_at_once() -> None:
    port = free_port()  # nothing listens there
    cache = MilvusSemanticCache(settings(f"http://127.0.0.1:{port}", timeout_seconds=5))
    vector = np.ones(DIM, dtype=np.float32)
    with pytest.raises(CacheUnavailable, match=f"127.0.0.1:{port}"):
        cache.lookup("p", vector, 0.9)
    # Within RECONNECT_AFTER_S the backend does not dial the dead server again.
    with pytest.raises(CacheUnavailable, match="unreachable moments ago"):
        cache.store("p", vector, answer("lost"))
