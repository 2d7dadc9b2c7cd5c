"""The response-cache contract (app/cache/base.py) that every backend must keep.

One function per behaviour, run against every row of tests/stores/backends.py: the
in-memory exact scan and HNSW index, Redis, Milvus Lite, and the hybrid tier over each
store. Scopes and epochs (the last section): a scope {model} or {model, decision} covers
every partition under it (context, tenant and polarity suffixes included) for clear, count
and flush; flush epochs live in the store, so every backend object over it (another replica,
a restart) sees them; a write whose token predates a flush of its partition is dropped.
The in-memory backend's finer points (fake clocks, lfu ties, concurrency, bad
input) stay in tests/unit/cache/test_cache.py; what is here is what the router relies on
whichever backend runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from app.cache.base import CacheScope, CacheUnavailable, ResponseCacheStore
from tests.stores.backends import (
    BACKENDS,
    HYBRID_BACKENDS,
    PERSISTENT_BACKENDS,
    SHARED_STORE_BACKENDS,
    BackendKind,
    BackendMaker,
    at_similarity,
    completion,
    content,
    store_location,
    unit_vectors,
    unreachable_location,
)

P = "gpt-4o|math"
# Bounds a wait for a store-side expiry (Redis key expiry, a Milvus purge); a pass
# usually takes just over the 1 s ttl.
EXPIRY_WAIT_SECONDS = 15.0


def _maker(
    request: pytest.FixtureRequest, kind: BackendKind, tmp_path: Path, reachable: bool = True
) -> Iterator[BackendMaker]:
    if reachable:
        location = store_location(
            kind,
            redis_url=lambda: request.getfixturevalue("redis_url"),
            milvus_uri=lambda: request.getfixturevalue("milvus_uri"),
        )
    else:
        location = unreachable_location(kind)
    maker = BackendMaker(kind, location, tmp_path)
    yield maker
    maker.close_all()


@pytest.fixture(params=BACKENDS, ids=lambda kind: kind.id)
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendMaker]:
    yield from _maker(request, request.param, tmp_path)


@pytest.fixture(params=PERSISTENT_BACKENDS, ids=lambda kind: kind.id)
def make_persistent_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendMaker]:
    yield from _maker(request, request.param, tmp_path)


@pytest.fixture(params=SHARED_STORE_BACKENDS, ids=lambda kind: kind.id)
def make_shared_store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendMaker]:
    yield from _maker(request, request.param, tmp_path)


@pytest.fixture(params=SHARED_STORE_BACKENDS, ids=lambda kind: kind.id)
def make_unreachable_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendMaker]:
    yield from _maker(request, request.param, tmp_path, reachable=False)


@pytest.fixture(params=HYBRID_BACKENDS, ids=lambda kind: kind.id)
def make_hybrid_over_unreachable_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[BackendMaker]:
    yield from _maker(request, request.param, tmp_path, reachable=False)


@pytest.fixture
def backend(make_backend: BackendMaker) -> ResponseCacheStore:
    return make_backend()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(15)


def wait_until(condition: Callable[[], bool], timeout: float = EXPIRY_WAIT_SECONDS) -> bool:
    """Poll `condition` until it holds or `timeout` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return condition()
        time.sleep(0.05)
    return True


def present(backend: ResponseCacheStore, partition: str, vector: np.ndarray) -> bool:
    return backend.lookup(partition, vector, 0.99) is not None


# ---------------------------------------------------------------------- lookups


def test_implements_the_backend_protocol(backend) -> None:
    assert isinstance(backend, ResponseCacheStore)


def test_empty_store_misses(backend, rng) -> None:
    (v,) = unit_vectors(rng, 1)
    assert backend.lookup(P, v, 0.0) is None
    stats = backend.stats()
    assert (stats.entries, stats.hits, stats.misses) == (0, 0, 1)


def test_same_vector_hits_with_similarity_one(backend, rng) -> None:
    (v,) = unit_vectors(rng, 1)
    before = time.time()
    backend.store(P, v, completion("four"))
    after = time.time()
    hit = backend.lookup(P, v, 0.999)
    assert content(hit) == "four"
    assert hit.similarity == pytest.approx(1.0, abs=1e-4)
    assert hit.partition == P
    assert before - 1 <= hit.created_at <= after + 1  # wall-clock seconds, whatever the store's precision


@pytest.mark.parametrize("cos", [0.95, 0.85])
def test_threshold_decides_near_vectors(backend, rng, cos) -> None:
    (base,) = unit_vectors(rng, 1)
    backend.store(P, base, completion("a"))
    query = at_similarity(base, cos, rng)
    hit = backend.lookup(P, query, cos - 0.01)
    assert content(hit) == "a"
    assert hit.similarity == pytest.approx(cos, abs=2e-3)
    assert backend.lookup(P, query, cos + 0.01) is None


def test_best_match_wins(backend, rng) -> None:
    (base,) = unit_vectors(rng, 1)
    backend.store(P, at_similarity(base, 0.85, rng), completion("far"))
    backend.store(P, at_similarity(base, 0.97, rng), completion("near"))
    backend.store(P, at_similarity(base, 0.90, rng), completion("mid"))
    hit = backend.lookup(P, base, 0.8)
    assert content(hit) == "near"
    assert hit.similarity == pytest.approx(0.97, abs=2e-3)


def test_non_unit_vectors_are_compared_by_cosine(backend, rng) -> None:
    (v,) = unit_vectors(rng, 1)
    backend.store(P, v * 7.5, completion("x"))
    hit = backend.lookup(P, [float(x) * 0.1 for x in v], 0.99)  # a plain list, as a handle carries it
    assert content(hit) == "x"
    assert hit.similarity == pytest.approx(1.0, abs=1e-4)


# ---------------------------------------------------------------------- partitions


def test_lookups_never_cross_partitions(backend, rng) -> None:
    (v,) = unit_vectors(rng, 1)
    ctx = "gpt-4o|math|ctx:3f9a"
    backend.store(P, v, completion("math"))
    backend.store(ctx, v, completion("math in context"))
    for other in (
        "gpt-4o|code",
        "gpt-4o-mini|math",
        "gpt-4o|mat",
        "gpt-4o",
        "gpt-4o|math|ctx:3f9b",
        "gpt-4o|*",
    ):
        assert backend.lookup(other, v, 0.0) is None, other
    assert content(backend.lookup(P, v, 0.9)) == "math"
    assert content(backend.lookup(ctx, v, 0.9)) == "math in context"


def test_stats_count_partitions(backend, rng) -> None:
    vectors = unit_vectors(rng, 3)
    for partition, v in zip(("m|a", "m|b", "m|b|ctx:1"), vectors, strict=True):
        backend.store(partition, v, completion(partition))
    assert backend.stats().partitions == 3
    backend.clear("m|b")
    assert backend.stats().partitions == 2


@pytest.mark.parametrize(
    "partition",
    [
        "llama 3.1 8b|general chat",  # spaces
        'm|say "hi"|ctx:0',  # quotes end a Milvus filter string
        "m|a\\b|{x}|[y]|(z)",  # escapes and RediSearch / Milvus syntax
        "m|@tag:{x}|-neg|~opt|*",
        "modèle|数学|ctx:ünï",
    ],
)
def test_partition_names_are_data_not_query_syntax(backend, rng, partition) -> None:
    (v,) = unit_vectors(rng, 1)
    backend.store(partition, v, completion("mine"))
    backend.store("m|other", v, completion("not mine"))
    assert content(backend.lookup(partition, v, 0.9)) == "mine"
    assert backend.lookup(partition + "x", v, 0.0) is None
    assert backend.clear(partition) == 1
    assert content(backend.lookup("m|other", v, 0.9)) == "not mine"


# ---------------------------------------------------------------------- storing


def test_duplicate_replaces_the_stored_answer(backend, rng) -> None:
    (v,) = unit_vectors(rng, 1)
    backend.store(P, v, completion("old"))
    backend.store(P, at_similarity(v, 0.9995, rng), completion("new"))
    assert backend.stats().entries == 1
    assert content(backend.lookup(P, v, 0.9)) == "new"
    backend.store(P, at_similarity(v, 0.99, rng), completion("similar, not the same"))
    assert backend.stats().entries == 2


def test_response_comes_back_equal(backend, rng) -> None:
    (v,) = unit_vectors(rng, 1)
    response = {
        "id": "chatcmpl-ünïcødé",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": 'Ça marche 👍 — 数学 «ok»\n\t"quoted" \\ back\u2028slash',
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"city": "Zürich", "days": [1, 2]}'},
                        }
                    ],
                    "refusal": None,
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19, "cost": 0.000125},
        "flags": {"cached": False, "nested": {"deep": [{"x": True}]}},
    }
    backend.store(P, v, response)
    hit = backend.lookup(P, v, 0.9)
    assert hit is not None
    assert hit.response == response


def test_stored_and_returned_responses_are_copies(backend, rng) -> None:
    (v,) = unit_vectors(rng, 1)
    original = completion("kept")
    backend.store(P, v, original)
    original["choices"][0]["message"]["content"] = "changed by the writer"
    hit = backend.lookup(P, v, 0.9)
    hit.response["choices"][0]["message"]["content"] = "changed by the reader"
    assert content(backend.lookup(P, v, 0.9)) == "kept"


# ---------------------------------------------------------------------- lifetime


def test_entries_expire_after_their_ttl(make_backend, rng) -> None:
    backend = make_backend(ttl_seconds=1)
    short, forever, long = unit_vectors(rng, 3)
    backend.store(P, short, completion("default ttl: 1 s"))
    backend.store(P, forever, completion("ttl 0: never"), ttl_seconds=0)
    backend.store(P, long, completion("ttl 3600"), ttl_seconds=3600)
    assert wait_until(lambda: not present(backend, P, short))
    assert content(backend.lookup(P, forever, 0.99)) == "ttl 0: never"
    assert content(backend.lookup(P, long, 0.99)) == "ttl 3600"
    assert wait_until(lambda: backend.stats().entries == 2)


def test_ttl_zero_default_means_no_expiry(make_backend, rng) -> None:
    backend = make_backend(ttl_seconds=0)
    kept, short = unit_vectors(rng, 2)
    backend.store(P, kept, completion("kept"))
    backend.store(P, short, completion("short"), ttl_seconds=1)
    # Once a 1 s entry stored after it has gone, the default-ttl entry has outlived a ttl.
    assert wait_until(lambda: not present(backend, P, short))
    assert content(backend.lookup(P, kept, 0.99)) == "kept"


def test_fifo_keeps_the_newest(make_backend, rng) -> None:
    backend = make_backend(max_entries=3, eviction_policy="fifo")
    a, b, c, d = unit_vectors(rng, 4)
    for name, v in zip("abc", (a, b, c), strict=True):
        backend.store(P, v, completion(name))
    assert present(backend, P, a)  # a hit does not protect an entry under fifo
    backend.store(P, d, completion("d"))
    assert not present(backend, P, a)
    assert [content(backend.lookup(P, v, 0.99)) for v in (b, c, d)] == ["b", "c", "d"]
    assert backend.stats().entries == 3


def test_lru_keeps_the_recently_used(make_backend, rng) -> None:
    backend = make_backend(max_entries=3, eviction_policy="lru")
    a, b, c, d = unit_vectors(rng, 4)
    for name, v in zip("abc", (a, b, c), strict=True):
        backend.store(P, v, completion(name))
    assert present(backend, P, a)
    assert present(backend, P, b)
    backend.store(P, d, completion("d"))  # c is the least recently used
    assert not present(backend, P, c)
    assert [content(backend.lookup(P, v, 0.99)) for v in (a, b, d)] == ["a", "b", "d"]


def test_lfu_keeps_the_often_used(make_backend, rng) -> None:
    backend = make_backend(max_entries=3, eviction_policy="lfu")
    a, b, c, d = unit_vectors(rng, 4)
    for name, v in zip("abc", (a, b, c), strict=True):
        backend.store(P, v, completion(name))
    for v, hits in ((a, 3), (b, 1), (c, 2)):
        for _ in range(hits):
            assert present(backend, P, v)
    backend.store(P, d, completion("d"))  # b has the fewest hits
    assert not present(backend, P, b)
    assert [content(backend.lookup(P, v, 0.99)) for v in (a, c, d)] == ["a", "c", "d"]


def test_max_entries_bounds_all_partitions_together(make_backend, rng) -> None:
    backend = make_backend(max_entries=4)
    vectors = unit_vectors(rng, 6)
    for i, v in enumerate(vectors):
        backend.store(f"m|d{i % 3}", v, completion(str(i)))
    assert backend.stats().entries == 4
    assert not present(backend, "m|d0", vectors[0])
    assert not present(backend, "m|d1", vectors[1])
    assert content(backend.lookup("m|d2", vectors[2], 0.99)) == "2"


def test_max_entries_zero_is_unbounded(make_backend, rng) -> None:
    backend = make_backend(max_entries=0)
    vectors = unit_vectors(rng, 30)
    for i, v in enumerate(vectors):
        backend.store(P, v, completion(str(i)))
    assert backend.stats().entries == 30
    assert content(backend.lookup(P, vectors[0], 0.99)) == "0"


# ---------------------------------------------------------------------- management


def test_clear_one_partition_returns_its_count(backend, rng) -> None:
    vectors = unit_vectors(rng, 5)
    for v in vectors[:3]:
        backend.store("m|a", v, completion("a"))
    for v in vectors[3:]:
        backend.store("m|b", v, completion("b"))
    assert backend.clear("m|missing") == 0
    assert backend.clear("m|a") == 3
    assert not any(present(backend, "m|a", v) for v in vectors[:3])
    assert content(backend.lookup("m|b", vectors[3], 0.99)) == "b"
    assert backend.stats().entries == 2


def test_clear_all_removes_everything_and_stays_usable(backend, rng) -> None:
    vectors = unit_vectors(rng, 4)
    for i, v in enumerate(vectors):
        backend.store(f"m|p{i % 2}", v, completion(str(i)))
    assert backend.clear() == 4
    assert backend.stats().entries == 0
    assert not any(present(backend, f"m|p{i % 2}", v) for i, v in enumerate(vectors))
    backend.store("m|p0", vectors[0], completion("again"))
    assert content(backend.lookup("m|p0", vectors[0], 0.99)) == "again"


def test_stats_count_entries_hits_and_misses(backend, rng) -> None:
    v, w = unit_vectors(rng, 2)
    backend.store(P, v, completion("x"))
    backend.lookup(P, v, 0.9)
    backend.lookup(P, v, 0.9)
    backend.lookup(P, w, 0.9)
    backend.lookup("m|elsewhere", v, 0.9)
    stats = backend.stats()
    assert (stats.entries, stats.hits, stats.misses) == (1, 2, 2)
    assert stats.hit_ratio == pytest.approx(0.5)


def test_configure_lowers_max_entries_live(make_backend, rng) -> None:
    backend = make_backend(max_entries=0, eviction_policy="fifo")
    vectors = unit_vectors(rng, 6)
    for i, v in enumerate(vectors[:5]):
        backend.store(P, v, completion(str(i)))
    backend.configure({"max_entries": 2})
    backend.store(P, vectors[5], completion("5"))  # a backend may trim lazily, on its next store
    assert backend.stats().entries == 2
    assert content(backend.lookup(P, vectors[5], 0.99)) == "5"
    assert content(backend.lookup(P, vectors[4], 0.99)) == "4"


def test_configure_changes_the_default_ttl_live(make_backend, rng) -> None:
    backend = make_backend(ttl_seconds=3600)
    before, after = unit_vectors(rng, 2)
    backend.store(P, before, completion("stored under 3600 s"))
    backend.configure({"ttl_seconds": 1})
    backend.store(P, after, completion("stored under 1 s"))
    assert wait_until(lambda: not present(backend, P, after))
    assert content(backend.lookup(P, before, 0.99)) == "stored under 3600 s"


# ---------------------------------------------------------------------- shared stores


def test_a_second_backend_sees_the_entries(make_persistent_backend, rng) -> None:
    writer = make_persistent_backend()
    v, w, x = unit_vectors(rng, 3)
    writer.store(P, v, completion("written by the first"))
    writer.store("m|other", w, completion("other partition"))
    reader = make_persistent_backend()  # a restarted replica, or another one
    assert content(reader.lookup(P, v, 0.99)) == "written by the first"
    assert reader.lookup(P, w, 0.9) is None
    assert reader.stats().entries == 2
    reader.store(P, x, completion("written by the second"))
    assert content(writer.lookup(P, x, 0.99)) == "written by the second"


def test_replacement_and_clear_reach_every_backend(make_shared_store_backend, rng) -> None:
    # Not for hybrid: its in-memory tier is per process and may answer from its own copy.
    first = make_shared_store_backend()
    second = make_shared_store_backend()
    (v,) = unit_vectors(rng, 1)
    first.store(P, v, completion("old"))
    second.store(P, at_similarity(v, 0.9995, rng), completion("new"))
    assert content(first.lookup(P, v, 0.99)) == "new"
    assert first.stats().entries == 1
    assert second.clear(P) == 1
    assert first.lookup(P, v, 0.0) is None


# ---------------------------------------------------------------------- outages


def test_an_unreachable_store_raises_cache_unavailable(make_unreachable_store, rng) -> None:
    backend = make_unreachable_store()  # building never blocks on the network
    (v,) = unit_vectors(rng, 1)
    with pytest.raises(CacheUnavailable):
        backend.lookup(P, v, 0.9)
    with pytest.raises(CacheUnavailable):
        backend.store(P, v, completion("lost"))
    with pytest.raises(CacheUnavailable):
        backend.stats()
    with pytest.raises(CacheUnavailable):
        backend.clear(P)


def test_hybrid_over_an_unreachable_store_serves_from_memory(make_hybrid_over_unreachable_store, rng) -> None:
    backend = make_hybrid_over_unreachable_store()
    v, w = unit_vectors(rng, 2)
    backend.store(P, v, completion("kept in memory"))
    assert content(backend.lookup(P, v, 0.99)) == "kept in memory"
    assert backend.lookup(P, w, 0.99) is None
    stats = backend.stats()
    assert (stats.entries, stats.hits, stats.misses) == (1, 1, 1)


# ---------------------------------------------------------------------- scopes and epochs

MATH = CacheScope(model="gpt-4o", decision="math")
GPT4O = CacheScope(model="gpt-4o")
# Every suffix the router adds (app/pipeline/phases/cache.py), and names that only look alike.
UNDER_MATH = (
    "gpt-4o|math",
    "gpt-4o|math|ctx:3f9a",
    "gpt-4o|math|tenant:77aa",
    "gpt-4o|math|ctx:1|tenant:2|neg:9",
)
OTHER_DECISIONS = ("gpt-4o|code", "gpt-4o|mathematics", "gpt-4o|")
OTHER_MODELS = ("gpt-4o-mini|math", "gpt|math", "gpt-4o-mini|math|tenant:77aa")


def fill(backend, rng: np.random.Generator) -> dict[str, np.ndarray]:
    partitions = (*UNDER_MATH, *OTHER_DECISIONS, *OTHER_MODELS)
    vectors = dict(zip(partitions, unit_vectors(rng, len(partitions)), strict=True))
    for partition, v in vectors.items():
        assert backend.store(partition, v, completion(partition)) is True
    return vectors


def answering(backend, vectors: dict[str, np.ndarray]) -> set[str]:
    return {p for p, v in vectors.items() if content(backend.lookup(p, v, 0.99)) == p}


def test_a_scope_counts_and_clears_every_partition_under_it(backend, rng) -> None:
    vectors = fill(backend, rng)
    assert backend.count(MATH) == len(UNDER_MATH)
    assert backend.count(GPT4O) == len(UNDER_MATH) + len(OTHER_DECISIONS)
    assert backend.count() == len(vectors)
    assert backend.stats().entries == len(vectors)  # counting removed nothing

    assert backend.clear(scope=MATH) == len(UNDER_MATH)
    assert answering(backend, vectors) == {*OTHER_DECISIONS, *OTHER_MODELS}
    assert backend.count(MATH) == 0

    assert backend.clear(scope=GPT4O) == len(OTHER_DECISIONS)
    assert answering(backend, vectors) == set(OTHER_MODELS)
    assert backend.clear(scope=CacheScope(model="nobody")) == 0


def test_the_default_decision_is_a_scope_of_its_own(backend, rng) -> None:
    vectors = fill(backend, rng)
    assert backend.count(CacheScope(model="gpt-4o", decision="")) == 1
    assert backend.clear(scope=CacheScope(model="gpt-4o", decision="")) == 1
    assert answering(backend, vectors) == set(vectors) - {"gpt-4o|"}


def test_flush_advances_the_scope_epoch_and_clears_the_scope(backend, rng) -> None:
    vectors = fill(backend, rng)
    first = backend.flush(MATH)
    assert (first.removed, first.epoch) == (len(UNDER_MATH), 1)
    assert backend.flush(MATH).epoch == 2
    assert backend.flush(GPT4O).epoch == 1
    assert answering(backend, vectors) == set(OTHER_MODELS)
    assert backend.flush().removed == len(OTHER_MODELS)
    epochs = backend.stats().epochs
    assert epochs.global_epoch == 1
    assert epochs.by_name() == {"gpt-4o": 1, "gpt-4o|math": 2}
    assert backend.epochs() == epochs
    assert backend.epoch("gpt-4o|math|tenant:77aa") == 1 + 1 + 2
    assert backend.epoch("gpt-4o-mini|math") == 1


def test_a_write_that_predates_a_flush_of_its_scope_is_dropped(backend, rng) -> None:
    v, w = unit_vectors(rng, 2)
    tenant = "gpt-4o|math|tenant:77aa"
    before = backend.epoch(tenant)  # read when the request looked the cache up (a miss)
    other = backend.epoch("gpt-4o|code")
    backend.flush(MATH)  # ... the operator flushes while the upstream answers
    assert backend.store(tenant, v, completion("pre-flush answer"), epoch=before) is False
    assert backend.lookup(tenant, v, 0.0) is None
    assert backend.store("gpt-4o|code", w, completion("another scope"), epoch=other) is True
    after = backend.epoch(tenant)
    assert after > before
    assert backend.store(tenant, v, completion("post-flush answer"), epoch=after) is True
    assert content(backend.lookup(tenant, v, 0.99)) == "post-flush answer"
    backend.flush()  # the global epoch covers every partition
    assert backend.store(tenant, v, completion("again pre-flush"), epoch=after) is False


def test_epochs_are_shared_by_every_backend_over_the_store(make_persistent_backend, rng) -> None:
    first = make_persistent_backend()
    (v,) = unit_vectors(rng, 1)
    token = first.epoch("gpt-4o|math|ctx:1")
    second = make_persistent_backend()  # another replica, or a restarted one
    assert second.flush(MATH).epoch == 1
    second.flush()
    assert first.store("gpt-4o|math|ctx:1", v, completion("stale"), epoch=token) is False
    restarted = make_persistent_backend()
    assert restarted.epochs().by_name() == {"gpt-4o|math": 1}
    assert restarted.stats().epochs.global_epoch == 1


def test_an_unreachable_store_cannot_count_or_flush(make_unreachable_store) -> None:
    store = make_unreachable_store()
    for call in (lambda: store.count(MATH), lambda: store.flush(MATH), lambda: store.epoch("m|d")):
        with pytest.raises(CacheUnavailable):
            call()
