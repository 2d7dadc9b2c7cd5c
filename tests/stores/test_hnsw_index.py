"""HNSW-specific behaviour of the in-memory cache with use_hnsw (the shared contract is
test_cache_contract.py): removed and refreshed entries leave tombstones the search skips,
and the graph is rebuilt once tombstones outnumber live vectors."""

from __future__ import annotations

import numpy as np
import pytest

from app.cache.base import CacheTuning  # noqa: E402
from app.cache.hnsw import HnswIndex  # noqa: E402
from app.cache.memory import InMemorySemanticCache, memory_cache  # noqa: E402
from app.config.cache_stores import HnswSettings  # noqa: E402

DIM = 32


def unit_rows(n: int, seed: int = 3) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_use_hnsw_builds_hnsw_partitions() -> None:
    cache = memory_cache(CacheTuning(), HnswSettings(use_hnsw=True, hnsw_m=8, hnsw_ef_construction=40))
    cache.store("p", unit_rows(1)[0], {"n": 0})
    assert isinstance(cache._partitions["p"], HnswIndex)
    assert not isinstance(memory_cache(CacheTuning())._partitions.get("p"), HnswIndex)


def test_evicted_entries_are_never_returned_and_tombstones_are_rebuilt_away() -> None:
    rows = unit_rows(600)
    cache = InMemorySemanticCache(max_entries=50, index_factory=lambda dim: HnswIndex(dim, m=8))
    for i, row in enumerate(rows):
        cache.store("p", row, {"n": i})
    index = cache._partitions["p"]
    assert isinstance(index, HnswIndex)
    assert len(index) == 50
    assert len(index._slots) <= 2 * 50 + 64  # rebuilt, not grown with every eviction
    for i, row in enumerate(rows):
        hit = cache.lookup("p", row, 0.99)
        assert (hit is not None) == (i >= 550)
        if hit is not None:
            assert hit.response == {"n": i}


def test_a_refreshed_duplicate_moves_to_its_new_vector() -> None:
    base, other = unit_rows(2)
    near = base + 0.01 * other  # cosine > 0.999 with base: the same prompt
    cache = memory_cache(CacheTuning(), HnswSettings(use_hnsw=True))
    cache.store("p", base, {"v": 1})
    cache.store("p", near, {"v": 2})
    assert len(cache) == 1
    hit = cache.lookup("p", near, 0.99)
    assert hit is not None and hit.response == {"v": 2} and hit.similarity == pytest.approx(1.0, abs=1e-5)
