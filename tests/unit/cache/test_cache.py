"""InMemorySemanticCache: similarity, partitions, TTL, eviction policies, stats, concurrency."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from pydantic import BaseModel

from app.cache import CacheHit, CacheStats, InMemorySemanticCache, ResponseCacheStore

DIM = 384
P = "m1|math"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def unit(rng: np.random.Generator, n: int | None = None) -> np.ndarray:
    shape = (DIM,) if n is None else (n, DIM)
    v = rng.standard_normal(shape).astype(np.float32)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def at_similarity(base: np.ndarray, cos: float, rng: np.random.Generator) -> np.ndarray:
    """A unit vector whose cosine with `base` is exactly `cos` (up to float rounding)."""
    noise = rng.standard_normal(base.shape).astype(np.float64)
    b = base.astype(np.float64)
    ortho = noise - noise.dot(b) * b
    ortho /= np.linalg.norm(ortho)
    return (cos * b + np.sqrt(1 - cos**2) * ortho).astype(np.float32)


def completion(text: str) -> dict:
    return {
        "id": f"chatcmpl-{text}",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }


def content(hit: CacheHit | None) -> str | None:
    return None if hit is None else hit.response["choices"][0]["message"]["content"]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_implements_backend_protocol() -> None:
    assert isinstance(InMemorySemanticCache(), ResponseCacheStore)


def test_empty_cache_misses(rng) -> None:
    cache = InMemorySemanticCache()
    assert cache.lookup(P, unit(rng), 0.0) is None
    stats = cache.stats()
    assert (stats.entries, stats.hits, stats.misses, stats.hit_ratio) == (0, 0, 1, 0.0)


def test_exact_vector_hits_with_similarity_one(rng) -> None:
    cache = InMemorySemanticCache(wall_clock=lambda: 1234.5)
    v = unit(rng)
    cache.store(P, v, completion("four"))
    hit = cache.lookup(P, v, 1.0)  # threshold 1.0 still matches the identical vector
    assert content(hit) == "four"
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)
    assert hit.partition == P
    assert hit.created_at == 1234.5


@pytest.mark.parametrize("cos", [0.95, 0.8, 0.5])
def test_threshold_boundary(rng, cos) -> None:
    cache = InMemorySemanticCache()
    base = unit(rng)
    cache.store(P, base, completion("a"))
    query = at_similarity(base, cos, rng)
    hit = cache.lookup(P, query, cos - 1e-4)
    assert hit is not None and hit.similarity == pytest.approx(cos, abs=1e-4)
    assert cache.lookup(P, query, cos + 1e-4) is None


def test_best_match_wins(rng) -> None:
    cache = InMemorySemanticCache()
    base = unit(rng)
    cache.store(P, at_similarity(base, 0.85, rng), completion("far"))
    cache.store(P, at_similarity(base, 0.97, rng), completion("near"))
    cache.store(P, at_similarity(base, 0.90, rng), completion("mid"))
    hit = cache.lookup(P, base, 0.8)
    assert content(hit) == "near"
    assert hit.similarity == pytest.approx(0.97, abs=1e-4)


def test_non_unit_vectors_are_normalised(rng) -> None:
    cache = InMemorySemanticCache()
    v = unit(rng)
    cache.store(P, v * 7.5, completion("x"))
    hit = cache.lookup(P, [float(x) * 0.1 for x in v], 0.99)  # a plain list works too
    assert hit is not None and hit.similarity == pytest.approx(1.0, abs=1e-5)


def test_partitions_never_cross(rng) -> None:
    cache = InMemorySemanticCache()
    v = unit(rng)
    cache.store("m1|math", v, completion("math answer"))
    assert cache.lookup("m2|math", v, 0.5) is None
    assert cache.lookup("m1|code", v, 0.5) is None
    assert cache.lookup("m1|math|stream", v, 0.5) is None
    assert content(cache.lookup("m1|math", v, 0.5)) == "math answer"
    cache.store("m2|math", v, completion("m2 answer"))
    assert content(cache.lookup("m2|math", v, 0.5)) == "m2 answer"
    assert content(cache.lookup("m1|math", v, 0.5)) == "math answer"
    assert cache.stats().partitions == 2


def test_duplicate_store_replaces(rng, clock) -> None:
    cache = InMemorySemanticCache(clock=clock)
    v = unit(rng)
    cache.store(P, v, completion("old"))
    cache.store(P, at_similarity(v, 0.9995, rng), completion("new"))
    assert cache.stats().entries == 1
    assert content(cache.lookup(P, v, 0.9)) == "new"
    # Similar but not a duplicate: both kept.
    cache.store(P, at_similarity(v, 0.99, rng), completion("other"))
    assert cache.stats().entries == 2


def test_replace_refreshes_ttl(rng, clock) -> None:
    cache = InMemorySemanticCache(ttl_seconds=10, clock=clock)
    v = unit(rng)
    cache.store(P, v, completion("old"))
    clock.advance(8)
    cache.store(P, v, completion("new"))
    clock.advance(8)  # 16 s after the first store, 8 s after the refresh
    assert content(cache.lookup(P, v, 0.9)) == "new"
    clock.advance(3)
    assert cache.lookup(P, v, 0.9) is None
    assert cache.stats().expirations == 1


def test_stored_and_returned_responses_are_copies(rng) -> None:
    cache = InMemorySemanticCache()
    v = unit(rng)
    original = completion("kept")
    cache.store(P, v, original)
    original["choices"][0]["message"]["content"] = "mutated by caller"
    hit = cache.lookup(P, v, 0.9)
    hit.response["choices"][0]["message"]["content"] = "mutated by reader"
    assert content(cache.lookup(P, v, 0.9)) == "kept"


def test_ttl_expiry_with_fake_clock(rng, clock) -> None:
    cache = InMemorySemanticCache(ttl_seconds=60, clock=clock)
    v = unit(rng)
    cache.store(P, v, completion("fresh"))
    clock.advance(59.9)
    assert cache.lookup(P, v, 0.9) is not None
    clock.advance(0.1)
    assert cache.lookup(P, v, 0.9) is None
    stats = cache.stats()
    assert stats.entries == 0 and stats.expirations == 1 and stats.partitions == 0


def test_per_store_ttl_overrides_default(rng, clock) -> None:
    cache = InMemorySemanticCache(ttl_seconds=60, clock=clock)
    short, forever, default = unit(rng, 3)
    cache.store(P, short, completion("short"), ttl_seconds=5)
    cache.store(P, forever, completion("forever"), ttl_seconds=0)
    cache.store(P, default, completion("default"))
    clock.advance(6)
    assert cache.lookup(P, short, 0.99) is None
    assert cache.lookup(P, default, 0.99) is not None
    clock.advance(10_000)
    assert cache.lookup(P, default, 0.99) is None
    assert content(cache.lookup(P, forever, 0.99)) == "forever"
    assert cache.stats().expirations == 2


def test_ttl_zero_never_expires(rng, clock) -> None:
    cache = InMemorySemanticCache(ttl_seconds=0, clock=clock)
    v = unit(rng)
    cache.store(P, v, completion("x"))
    clock.advance(10**9)
    assert cache.lookup(P, v, 0.9) is not None


def test_expired_entries_go_before_evicting_live_ones(rng, clock) -> None:
    cache = InMemorySemanticCache(max_entries=2, ttl_seconds=100, clock=clock)
    a, b, c = unit(rng, 3)
    cache.store(P, a, completion("a"), ttl_seconds=1)
    cache.store(P, b, completion("b"))
    clock.advance(2)
    cache.store(P, c, completion("c"))
    stats = cache.stats()
    assert stats.evictions == 0 and stats.expirations == 1
    assert cache.lookup(P, b, 0.99) is not None and cache.lookup(P, c, 0.99) is not None


def test_fifo_evicts_oldest_insert(rng) -> None:
    cache = InMemorySemanticCache(max_entries=3, eviction_policy="fifo")
    a, b, c, d = unit(rng, 4)
    for name, v in zip("abc", (a, b, c), strict=True):
        cache.store(P, v, completion(name))
    cache.lookup(P, a, 0.99)  # hits do not protect an entry under fifo
    cache.store(P, d, completion("d"))
    assert cache.lookup(P, a, 0.99) is None
    assert all(cache.lookup(P, v, 0.99) is not None for v in (b, c, d))
    assert cache.stats().evictions == 1


def test_lru_evicts_least_recently_hit(rng) -> None:
    cache = InMemorySemanticCache(max_entries=3, eviction_policy="lru")
    a, b, c, d = unit(rng, 4)
    for name, v in zip("abc", (a, b, c), strict=True):
        cache.store(P, v, completion(name))
    cache.lookup(P, a, 0.99)
    cache.lookup(P, b, 0.99)
    cache.store(P, d, completion("d"))  # c is least recently used
    assert cache.lookup(P, c, 0.99) is None
    assert all(cache.lookup(P, v, 0.99) is not None for v in (a, b, d))


def test_lfu_evicts_fewest_hits(rng) -> None:
    cache = InMemorySemanticCache(max_entries=3, eviction_policy="lfu")
    a, b, c, d, e = unit(rng, 5)
    for name, v in zip("abc", (a, b, c), strict=True):
        cache.store(P, v, completion(name))
    for _ in range(3):
        cache.lookup(P, a, 0.99)
    cache.lookup(P, b, 0.99)
    cache.lookup(P, c, 0.99)
    cache.lookup(P, c, 0.99)
    cache.store(P, d, completion("d"))  # b has the fewest hits (1)
    assert cache.lookup(P, b, 0.99) is None
    # d (0 hits, newest) is now the least used: the next insert evicts it, not a or c.
    cache.store(P, e, completion("e"))
    assert cache.lookup(P, d, 0.99) is None
    assert all(cache.lookup(P, v, 0.99) is not None for v in (a, c, e))


def test_max_entries_spans_partitions(rng) -> None:
    cache = InMemorySemanticCache(max_entries=4)
    vectors = unit(rng, 6)
    for i, v in enumerate(vectors):
        cache.store(f"m|d{i % 3}", v, completion(str(i)))
    stats = cache.stats()
    assert stats.entries == 4 and stats.evictions == 2
    # Oldest two (partitions d0 and d1) went first.
    assert cache.lookup("m|d0", vectors[0], 0.99) is None
    assert cache.lookup("m|d1", vectors[1], 0.99) is None
    assert content(cache.lookup("m|d2", vectors[2], 0.99)) == "2"


def test_max_entries_zero_is_unbounded(rng) -> None:
    cache = InMemorySemanticCache(max_entries=0)
    for v in unit(rng, 50):
        cache.store(P, v, completion("x"))
    assert cache.stats().entries == 50


def test_many_entries_keep_rows_consistent(rng) -> None:
    """Growth, swap-removal and shrinking must keep every row paired with its response."""
    cache = InMemorySemanticCache(max_entries=40, eviction_policy="lru")
    vectors = unit(rng, 300)
    for i, v in enumerate(vectors):
        cache.store(P, v, completion(str(i)))
        if i % 3 == 0:
            cache.lookup(P, vectors[i // 2], 0.99)
    live = [i for i, v in enumerate(vectors) if cache.lookup(P, v, 0.99) is not None]
    assert len(live) == 40
    for i in live:
        assert content(cache.lookup(P, vectors[i], 0.99)) == str(i)
    cache.configure({"max_entries": 5})  # a partial mapping keeps the other settings
    assert (cache.eviction_policy, cache.ttl_seconds) == ("lru", 3600)
    survivors = [i for i in live if cache.lookup(P, vectors[i], 0.99) is not None]
    assert len(survivors) == 5
    for i in survivors:
        assert content(cache.lookup(P, vectors[i], 0.99)) == str(i)


def test_stats_counts(rng) -> None:
    cache = InMemorySemanticCache()
    v, w = unit(rng, 2)
    cache.store(P, v, completion("x"))
    cache.lookup(P, v, 0.9)
    cache.lookup(P, v, 0.9)
    cache.lookup(P, w, 0.9)
    stats = cache.stats()
    assert isinstance(stats, CacheStats)
    assert (stats.entries, stats.hits, stats.misses) == (1, 2, 1)
    assert stats.hit_ratio == pytest.approx(2 / 3)


def test_clear_partition_and_all(rng) -> None:
    cache = InMemorySemanticCache()
    vectors = unit(rng, 5)
    for v in vectors[:3]:
        cache.store("a|x", v, completion("a"))
    for v in vectors[3:]:
        cache.store("b|x", v, completion("b"))
    assert cache.clear("missing|x") == 0
    assert cache.clear("a|x") == 3
    assert cache.lookup("a|x", vectors[0], 0.5) is None
    assert content(cache.lookup("b|x", vectors[3], 0.99)) == "b"
    assert cache.clear() == 2
    assert cache.stats().entries == 0
    cache.store("a|x", vectors[0], completion("again"))  # usable after clear
    assert content(cache.lookup("a|x", vectors[0], 0.99)) == "again"


def test_configure_keeps_entries_and_switches_policy(rng) -> None:
    cache = InMemorySemanticCache(max_entries=3, eviction_policy="fifo")
    a, b, c, d = unit(rng, 4)
    for name, v in zip("abc", (a, b, c), strict=True):
        cache.store(P, v, completion(name))
    cache.lookup(P, a, 0.99)

    class Settings(BaseModel):  # stands in for the config's ResponseCacheConfig
        enabled: bool = True
        similarity_threshold: float = 0.8
        max_entries: int = 3
        ttl_seconds: int = 120
        eviction_policy: str = "lru"

    cache.configure(Settings())
    assert (cache.max_entries, cache.ttl_seconds, cache.eviction_policy) == (3, 120, "lru")
    assert cache.stats().entries == 3
    cache.store(P, d, completion("d"))  # lru now: b is the least recently used, a was hit
    assert cache.lookup(P, b, 0.99) is None
    assert cache.lookup(P, a, 0.99) is not None


@pytest.mark.parametrize(
    "settings",
    [{"max_entries": -1}, {"ttl_seconds": -5}, {"eviction_policy": "random"}],
)
def test_configure_rejects_bad_settings(settings) -> None:
    cache = InMemorySemanticCache()
    with pytest.raises(ValueError):
        cache.configure(settings)
    assert (cache.max_entries, cache.ttl_seconds, cache.eviction_policy) == (1000, 3600, "fifo")


def test_configure_rejects_non_mapping() -> None:
    with pytest.raises(TypeError):
        InMemorySemanticCache().configure(42)


def test_constructor_rejects_bad_policy() -> None:
    with pytest.raises(ValueError):
        InMemorySemanticCache(eviction_policy="mru")


@pytest.mark.parametrize(
    "vector",
    [np.zeros(DIM), np.full(DIM, np.nan), np.ones((2, DIM)), np.array([]), "not a vector", [[1.0, "x"]]],
)
def test_bad_vectors_raise_value_error(vector) -> None:
    cache = InMemorySemanticCache()
    with pytest.raises(ValueError):
        cache.store(P, vector, completion("x"))
    with pytest.raises(ValueError):
        cache.lookup(P, vector, 0.5)


def test_dimension_mismatch_raises(rng) -> None:
    cache = InMemorySemanticCache()
    cache.store(P, unit(rng), completion("x"))
    with pytest.raises(ValueError, match="dimensions"):
        cache.lookup(P, np.ones(768, dtype=np.float32), 0.5)
    with pytest.raises(ValueError, match="dimensions"):
        cache.store(P, np.ones(768, dtype=np.float32), completion("y"))
    cache.store("other|p", np.ones(768, dtype=np.float32), completion("z"))  # another partition is free


@pytest.mark.parametrize("threshold", [-0.1, 1.5, float("nan"), "0.8", True])
def test_bad_threshold_raises(rng, threshold) -> None:
    with pytest.raises(ValueError):
        InMemorySemanticCache().lookup(P, unit(rng), threshold)


def test_numpy_scalars_accepted(rng) -> None:
    cache = InMemorySemanticCache()
    v = unit(rng)
    cache.store(P, v, completion("x"), ttl_seconds=np.int64(30))
    assert cache.lookup(P, v, np.float32(0.9)) is not None


@pytest.mark.parametrize("bad", [{"partition": ""}, {"partition": None}, {"response": "text"}, {"ttl": -1}])
def test_bad_store_arguments(rng, bad) -> None:
    cache = InMemorySemanticCache()
    with pytest.raises(ValueError):
        cache.store(bad.get("partition", P), unit(rng), bad.get("response", completion("x")), bad.get("ttl"))


def test_concurrent_stores_and_lookups(rng) -> None:
    cache = InMemorySemanticCache(max_entries=200, eviction_policy="lfu")
    vectors = unit(rng, 400)
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            for i in range(offset, 400, 4):
                cache.store(f"m|d{i % 2}", vectors[i], completion(str(i)))
                hit = cache.lookup(f"m|d{i % 2}", vectors[i], 0.99)
                # Another thread may already have evicted it; if present it must be ours.
                if hit is not None:
                    assert content(hit) == str(i)
                cache.stats()
        except BaseException as exc:  # surfaced below; threads swallow exceptions otherwise
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    stats = cache.stats()
    assert stats.entries == 200
    assert stats.evictions == 200
    assert stats.hits + stats.misses == 400
    for i, v in enumerate(vectors):
        hit = cache.lookup(f"m|d{i % 2}", v, 0.99)
        if hit is not None:
            assert content(hit) == str(i)
