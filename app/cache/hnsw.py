"""Approximate nearest-neighbour partition index for the in-memory cache (`use_hnsw`).

`HnswIndex` is a faiss `IndexHNSWFlat` over inner product on unit vectors (= cosine), plugged
into `InMemorySemanticCache` as its `PartitionIndex`; partitions, expiry, eviction and
duplicate replacement stay the in-memory cache's, so only the search is approximate.

An HNSW graph cannot drop a node, so a removed (or replaced) entry leaves a tombstone: its
faiss id maps to None and searches skip it, widening k when the nearest few are all dead.
When tombstones outnumber live vectors the graph is rebuilt from the live ones.

Below a few thousand entries the exact scan is as fast or faster (bench/bench_cache.py);
HNSW pays off for large caches.
"""

from __future__ import annotations

from collections.abc import Iterator

import faiss
import numpy as np

from app.cache.memory import CacheEntry, IndexFactory, PartitionIndex
from app.config.cache_stores import HnswSettings

# Search breadth: with near-duplicate queries (what a cache hit is) recall is ~1 well below this.
EF_SEARCH = 64
_FIRST_K = 4  # candidates fetched first; only tombstones push it wider
_REBUILD_MIN_DEAD = 64


class HnswIndex:
    """One partition's vectors in an HNSW graph; entry.row is the vector's faiss id."""

    def __init__(self, dim: int, m: int = 16, ef_construction: int = 200, ef_search: int = EF_SEARCH) -> None:
        self.dim = dim
        self._m = m
        self._ef_construction = ef_construction
        self._ef_search = ef_search
        self._slots: list[CacheEntry | None] = []  # faiss id -> entry, None once removed
        self._live = 0
        self._index = self._new_graph()

    def __len__(self) -> int:
        return self._live

    def __iter__(self) -> Iterator[CacheEntry]:
        return (entry for entry in self._slots if entry is not None)

    def add(self, vector: np.ndarray, entry: CacheEntry) -> None:
        entry.row = len(self._slots)
        self._slots.append(entry)
        self._index.add(vector.reshape(1, -1))
        self._live += 1

    def remove(self, entry: CacheEntry) -> None:
        self._slots[entry.row] = None
        self._live -= 1
        self._maybe_rebuild()

    def replace(self, entry: CacheEntry, vector: np.ndarray) -> None:
        self._slots[entry.row] = None
        self._live -= 1
        self.add(vector, entry)
        self._maybe_rebuild()

    def nearest(self, vector: np.ndarray) -> tuple[CacheEntry, float]:
        query = vector.reshape(1, -1)
        total = len(self._slots)
        k = min(_FIRST_K, total)
        while True:
            sims, ids = self._index.search(query, k)
            for sim, slot in zip(sims[0], ids[0], strict=True):
                entry = self._slots[slot] if slot >= 0 else None
                if entry is not None:
                    return entry, float(sim)
            if k >= total:
                return self._nearest_exact(vector)  # the graph missed every live node: scan
            k = min(k * 8, total)

    def _nearest_exact(self, vector: np.ndarray) -> tuple[CacheEntry, float]:
        live = [slot for slot, entry in enumerate(self._slots) if entry is not None]
        sims = self._index.reconstruct_n(0, len(self._slots))[live] @ vector
        best = int(np.argmax(sims))
        entry = self._slots[live[best]]
        assert entry is not None  # live holds only occupied slots
        return entry, float(sims[best])

    def _new_graph(self) -> faiss.IndexHNSWFlat:
        index = faiss.IndexHNSWFlat(self.dim, self._m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = self._ef_construction
        index.hnsw.efSearch = self._ef_search
        return index

    def _maybe_rebuild(self) -> None:
        dead = len(self._slots) - self._live
        if dead < _REBUILD_MIN_DEAD or dead <= self._live:
            return
        vectors = self._index.reconstruct_n(0, len(self._slots))
        survivors = [(slot, entry) for slot, entry in enumerate(self._slots) if entry is not None]
        self._index = self._new_graph()
        if survivors:
            self._index.add(np.ascontiguousarray(vectors[[slot for slot, _ in survivors]]))
        for row, (_, entry) in enumerate(survivors):
            entry.row = row
        self._slots = [entry for _, entry in survivors]


def hnsw_index_factory(settings: HnswSettings) -> IndexFactory:
    """Partition indexes with the configured M and efConstruction."""

    def index(dim: int) -> PartitionIndex:
        return HnswIndex(dim, m=settings.hnsw_m, ef_construction=settings.hnsw_ef_construction)

    return index
