"""What only the Redis backend has: a shared index and shared state, key expiry, partition
tags, and an outage that surfaces as CacheUnavailable within the configured timeout.

The behaviour every backend shares (thresholds, duplicates, eviction order, TTL semantics)
is tests/stores/test_cache_contract.py's. A real server runs (tests/stores/conftest.py).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import redis

from app.cache.base import CacheTuning, CacheUnavailable, ResponseCacheStore, VectorDimensionMismatch
from app.cache.factory import backend_name, open_cache_store
from app.cache.redis_store import RedisSemanticCache
from app.common.ports import free_port
from app.config.cache_stores import RedisCacheSettings
from app.config.global_config import ResponseCacheConfig
from tests.fakes.stores import redis_with_search

DIM = 8


def unit(seed: int, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def answer(text: str) -> dict:
    return {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": text}}]}


def content(hit) -> str:
    return hit.response["choices"][0]["message"]["content"]


@pytest.fixture
def settings(redis_url: str) -> RedisCacheSettings:
    """Settings of a cache of its own: a fresh index and key prefix on the shared server."""
    name = uuid.uuid4().hex[:12]
    return RedisCacheSettings(url=redis_url, index_name=f"t_{name}", key_prefix=f"t:{name}:")


@pytest.fixture
def cache(settings: RedisCacheSettings) -> Iterator[RedisSemanticCache]:
    backend = RedisSemanticCache(settings, CacheTuning(max_entries=100, ttl_seconds=0))
    yield backend
    backend.clear()
    backend.close()


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_the_factory_builds_it_from_the_config(settings: RedisCacheSettings) -> None:
    config = ResponseCacheConfig(backend_type="redis", redis=settings, max_entries=7, eviction_policy="lru")
    backend = open_cache_store(config)
    assert isinstance(backend, RedisSemanticCache)
    assert isinstance(backend, ResponseCacheStore)
    assert backend_name(backend) == "redis"
    assert backend.tuning == CacheTuning(max_entries=7, ttl_seconds=3600, eviction_policy="lru")
    backend.close()


def test_a_stored_answer_is_found_again(cache: RedisSemanticCache) -> None:
    cache.store("m|d", unit(1), answer("hello"))
    hit = cache.lookup("m|d", unit(1), 0.99)
    assert hit is not None
    assert content(hit) == "hello"
    assert hit.partition == "m|d"
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)
    assert cache.lookup("m|d", unit(2), 0.9) is None  # an unrelated prompt


def test_the_index_is_created_once_and_reused_after_a_restart(
    settings: RedisCacheSettings, cache: RedisSemanticCache, raw: redis.Redis
) -> None:
    cache.store("m|d", unit(1), answer("before the restart"))
    restarted = RedisSemanticCache(settings, CacheTuning(ttl_seconds=0))
    try:
        hit = restarted.lookup("m|d", unit(1), 0.99)
        assert hit is not None and content(hit) == "before the restart"
        restarted.store("m|d", unit(3), answer("after"))
        indexes = [
            name.decode() if isinstance(name, bytes) else name for name in raw.execute_command("FT._LIST")
        ]
        assert indexes.count(settings.index_name) == 1
        assert restarted.stats().entries == 2
    finally:
        restarted.close()


def test_stats_are_shared_by_every_replica(settings: RedisCacheSettings, cache: RedisSemanticCache) -> None:
    other = RedisSemanticCache(settings, CacheTuning(ttl_seconds=0))
    try:
        cache.store("p", unit(1), answer("x"))
        assert other.lookup("p", unit(1), 0.9) is not None
        assert cache.lookup("p", unit(2), 0.9) is None
        for view in (cache.stats(), other.stats()):
            assert (view.entries, view.hits, view.misses, view.partitions) == (1, 1, 1, 1)
            assert view.hit_ratio == pytest.approx(0.5)
    finally:
        other.close()


def test_entries_expire_with_their_redis_key(
    settings: RedisCacheSettings, cache: RedisSemanticCache, raw: redis.Redis
) -> None:
    cache.store("p", unit(1), answer("short-lived"), ttl_seconds=1)
    cache.store("p", unit(2), answer("forever"), ttl_seconds=0)
    ttls = sorted(raw.ttl(key) for key in raw.scan_iter(match=f"{settings.key_prefix}e:*"))
    assert ttls[0] == -1 and 0 < ttls[1] <= 1  # -1: no expiry
    deadline = time.monotonic() + 10  # Redis expires the key within its own second
    while cache.lookup("p", unit(1), 0.99) is not None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling until Redis expires the key
    assert cache.lookup("p", unit(1), 0.99) is None
    assert cache.lookup("p", unit(2), 0.99) is not None


def test_the_bookkeeping_counts_expired_entries(settings: RedisCacheSettings) -> None:
    now = [1_000.0]
    cache = RedisSemanticCache(settings, CacheTuning(ttl_seconds=60), wall_clock=lambda: now[0])
    try:
        cache.store("p", unit(1), answer("a"))
        cache.store("p", unit(2), answer("b"), ttl_seconds=0)
        now[0] += 61
        stats = cache.stats()
        assert (stats.entries, stats.expirations, stats.partitions) == (1, 1, 1)
        assert cache.lookup("p", unit(1), 0.99) is None  # the purge deleted the key too
    finally:
        cache.clear()
        cache.close()


@pytest.mark.parametrize("partition", ["model|decision", "a:b:c", "with spaces here", "x,y", "{tag}", "@p:*"])
def test_partitions_with_query_syntax_never_cross(cache: RedisSemanticCache, partition: str) -> None:
    neighbours = ["model", "decision", "a", "with", "x", "y", "tag", "MODEL|DECISION"]
    for other in neighbours:
        cache.store(other, unit(1), answer(other))
    cache.store(partition, unit(1), answer(partition))
    hit = cache.lookup(partition, unit(1), 0.99)
    assert hit is not None and content(hit) == partition and hit.partition == partition
    assert cache.clear(partition) == 1
    assert cache.lookup(partition, unit(1), 0.99) is None
    assert cache.stats().entries == len(neighbours)


def test_partition_tags_are_case_sensitive(cache: RedisSemanticCache) -> None:
    cache.store("Model|x", unit(1), answer("upper"))
    assert cache.lookup("model|x", unit(1), 0.5) is None


def test_a_new_dimension_needs_a_clear(cache: RedisSemanticCache) -> None:
    cache.store("p", unit(1), answer("8-d"))
    with pytest.raises(VectorDimensionMismatch, match="dimensions"):  # a CacheUnavailable: callers degrade
        cache.store("p", unit(1, dim=16), answer("16-d"))
    with pytest.raises(VectorDimensionMismatch):  # another partition: the index holds one width
        cache.lookup("p|enc:sha256:0123456789abcdef", unit(1, dim=16), 0.5)
    assert cache.clear() == 1
    cache.store("p", unit(1, dim=16), answer("16-d"))
    hit = cache.lookup("p", unit(1, dim=16), 0.99)
    assert hit is not None and content(hit) == "16-d"


def test_clear_by_another_replica_is_noticed(settings: RedisCacheSettings, cache: RedisSemanticCache) -> None:
    other = RedisSemanticCache(settings, CacheTuning(ttl_seconds=0))
    try:
        cache.store("p", unit(1), answer("x"))
        assert other.clear() == 1  # drops the index cache still believes in
        assert cache.lookup("p", unit(1), 0.5) is None
        cache.store("p", unit(1), answer("again"))
        hit = other.lookup("p", unit(1), 0.99)
        assert hit is not None and content(hit) == "again"
    finally:
        other.close()


def test_a_smaller_bound_evicts_in_policy_order(cache: RedisSemanticCache) -> None:
    cache.configure({"eviction_policy": "lru"})
    for seed in range(4):
        cache.store("p", unit(seed), answer(str(seed)))
    assert cache.lookup("p", unit(0), 0.99) is not None  # 0 is now the most recently used
    cache.configure({"max_entries": 2})
    assert cache.stats().entries == 2
    assert cache.stats().evictions == 2
    assert cache.lookup("p", unit(0), 0.99) is not None
    assert cache.lookup("p", unit(3), 0.99) is not None
    assert cache.lookup("p", unit(1), 0.99) is None


def _refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: connecting is refused


def test_a_down_server_is_cache_unavailable() -> None:
    cache = RedisSemanticCache(RedisCacheSettings(port=_refused_port(), timeout_seconds=1))
    with pytest.raises(CacheUnavailable) as raised:
        cache.lookup("p", unit(1), 0.9)
    assert isinstance(raised.value.__cause__, redis.ConnectionError)
    for call in (lambda: cache.store("p", unit(1), answer("x")), cache.stats, cache.clear):
        with pytest.raises(CacheUnavailable):
            call()


def test_a_server_that_never_answers_times_out() -> None:
    """Without the socket timeout this would hang: the listener accepts and never replies."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        cache = RedisSemanticCache(RedisCacheSettings(port=port, timeout_seconds=0.2))
        with pytest.raises(CacheUnavailable) as raised:
            cache.lookup("p", unit(1), 0.9)
        assert isinstance(raised.value.__cause__, redis.TimeoutError)


def test_bad_input_is_a_value_error_before_any_network_call() -> None:
    cache = RedisSemanticCache(RedisCacheSettings(port=_refused_port()))
    with pytest.raises(ValueError):
        cache.lookup("", unit(1), 0.9)
    with pytest.raises(ValueError):
        cache.lookup("p", unit(1), 1.5)
    with pytest.raises(ValueError):
        cache.store("p", [0.0, 0.0], answer("x"))
    with pytest.raises(ValueError):
        cache.store("p", unit(1), {"not": object()})


def test_the_cache_is_back_when_redis_is_back(tmp_path) -> None:
    """A server of the test's own, stopped and started again empty on the same port: while
    it is down a lookup raises CacheUnavailable (the caller counts a miss); once it is back
    the same backend object answers again, with no restart: a miss on the empty server (no
    index yet is not an error), then the next store rebuilds the index and hits."""
    port = free_port()
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    with redis_with_search(first, port=port, own=True) as url:
        backend = RedisSemanticCache(
            RedisCacheSettings(url=url, index_name="t_back", key_prefix="t:back:", timeout_seconds=1.0),
            CacheTuning(max_entries=100, ttl_seconds=0),
        )
        backend.store("m|d", unit(1), answer("before"))
        assert content(backend.lookup("m|d", unit(1), 0.9)) == "before"
    with pytest.raises(CacheUnavailable):
        backend.lookup("m|d", unit(1), 0.9)
    with redis_with_search(second, port=port, own=True):
        assert backend.lookup("m|d", unit(1), 0.9) is None
        backend.store("m|d", unit(1), answer("after"))
        assert content(backend.lookup("m|d", unit(1), 0.9)) == "after"
    backend.close()
