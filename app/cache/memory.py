"""In-memory semantic response cache (exact linear scan with numpy, or an HNSW index).

Each partition keeps its vectors in a `PartitionIndex`. The default `ExactIndex` holds them
in one contiguous float32 matrix, so a lookup is a single matrix-vector product: no
per-lookup rebuild, removals swap the last row into the hole. A linear scan is exact and,
at the default 1000 entries, cheaper than maintaining an HNSW graph (bench/bench_cache.py
has the figures); `app.cache.hnsw.HnswIndex` is the approximate index for large caches
(`use_hnsw`). Partitions, expiry, eviction and duplicate replacement live here, the same
for both indexes; so do scopes (a scope's partitions are found by name) and the flush epochs,
kept in this object: every caller of it (the one ResponseCache replica) shares them, and a
restart resets them.

Eviction and expiry use lazy min-heaps: a heap item is valid only while its entry still
exists with the same version, so hits and refreshes push a new item instead of searching
the heap. Heaps are compacted when stale items outnumber live ones.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from app.cache.base import (
    GLOBAL_EPOCH,
    CacheEpochs,
    CacheHit,
    CacheScope,
    CacheStats,
    CacheTuning,
    EvictionPolicy,
    FlushOutcome,
    VectorDimensionMismatch,
    scopes_of,
)
from app.cache.checks import (
    DUPLICATE_SIMILARITY,
    SIMILARITY_SLACK,
    as_unit_vector,
    check_partition,
    check_response,
    check_threshold,
    check_ttl,
)
from app.config.cache_stores import HnswSettings

_MIN_ROWS = 16


@dataclass(eq=False)
class CacheEntry:
    id: int
    partition: str
    row: int
    response: dict[str, Any]
    created_at: float
    expires_at: float  # clock() time; inf = never
    inserted_seq: int
    used_seq: int
    hits: int = 0
    version: int = 0  # bumped whenever the entry's eviction key changes


class PartitionIndex(Protocol):
    """The vectors of one partition; entries say where their vector sits through `entry.row`."""

    dim: int

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[CacheEntry]: ...

    def add(self, vector: np.ndarray, entry: CacheEntry) -> None: ...

    def remove(self, entry: CacheEntry) -> None: ...

    def replace(self, entry: CacheEntry, vector: np.ndarray) -> None:
        """Give `entry` a new vector (a duplicate's refresh)."""
        ...

    def nearest(self, vector: np.ndarray) -> tuple[CacheEntry, float]:
        """The entry most similar to the unit `vector` and its cosine similarity (index not empty)."""
        ...


# Builds the index of a new partition from its vector dimension.
IndexFactory = Callable[[int], PartitionIndex]


class ExactIndex:
    """Vectors of one partition as rows of a growable contiguous matrix; exact search."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.matrix = np.empty((_MIN_ROWS, dim), dtype=np.float32)
        self.entries: list[CacheEntry] = []

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[CacheEntry]:
        return iter(self.entries)

    def nearest(self, vector: np.ndarray) -> tuple[CacheEntry, float]:
        sims = self.matrix[: len(self.entries)] @ vector
        row = int(np.argmax(sims))
        return self.entries[row], float(sims[row])

    def replace(self, entry: CacheEntry, vector: np.ndarray) -> None:
        self.matrix[entry.row] = vector

    def add(self, vector: np.ndarray, entry: CacheEntry) -> None:
        n = len(self.entries)
        if n == self.matrix.shape[0]:
            grown = np.empty((n * 2, self.dim), dtype=np.float32)
            grown[:n] = self.matrix[:n]
            self.matrix = grown
        self.matrix[n] = vector
        entry.row = n
        self.entries.append(entry)

    def remove(self, entry: CacheEntry) -> None:
        last = len(self.entries) - 1
        row = entry.row
        if row != last:
            moved = self.entries[last]
            self.matrix[row] = self.matrix[last]
            self.entries[row] = moved
            moved.row = row
        self.entries.pop()
        capacity = self.matrix.shape[0]
        if capacity > _MIN_ROWS and len(self.entries) < capacity // 4:
            self.matrix = self.matrix[: capacity // 2].copy()


class InMemorySemanticCache:
    """Thread-safe semantic cache; implements app.cache.base.ResponseCacheStore.

    max_entries bounds the whole cache (all partitions together; 0 = unbounded).
    ttl_seconds is the default lifetime of new entries (0 = no expiry).
    eviction_policy: fifo = oldest insert, lru = least recently hit, lfu = fewest hits
    (ties: least recently used). Expired entries are dropped before anything is evicted.
    index_factory builds each partition's vector index (ExactIndex, or app.cache.hnsw's).
    """

    def __init__(
        self,
        max_entries: int = 1000,
        ttl_seconds: int = 3600,
        eviction_policy: EvictionPolicy = "fifo",
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        index_factory: IndexFactory = ExactIndex,
    ) -> None:
        tuning = CacheTuning(
            max_entries=max_entries, ttl_seconds=ttl_seconds, eviction_policy=eviction_policy
        )
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._ids = itertools.count()
        self._index_factory = index_factory
        self._partitions: dict[str, PartitionIndex] = {}
        self._entries: dict[int, CacheEntry] = {}
        self._evict_heap: list[tuple[int, int, int, int]] = []  # (key0, key1, version, id)
        self._expiry_heap: list[tuple[float, int]] = []  # (expires_at, id)
        self._hits = self._misses = self._evictions = self._expirations = 0
        self._epochs = CacheEpochs()
        self._max_entries = tuning.max_entries
        self._ttl_seconds = tuning.ttl_seconds
        self._policy: EvictionPolicy = tuning.eviction_policy

    # ------------------------------------------------------------------ public API

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def ttl_seconds(self) -> int:
        return self._ttl_seconds

    @property
    def eviction_policy(self) -> EvictionPolicy:
        return self._policy

    def __len__(self) -> int:
        with self._lock:
            self._purge_expired(self._clock())
            return len(self._entries)

    def lookup(self, partition: str, vector: Any, threshold: float) -> CacheHit | None:
        partition = check_partition(partition)
        check_threshold(threshold)
        v = as_unit_vector(vector)
        with self._lock:
            self._purge_expired(self._clock())
            part = self._partitions.get(partition)
            if part is None:
                self._misses += 1
                return None
            self._check_dim(part, v)
            entry, best = part.nearest(v)
            if best + SIMILARITY_SLACK < threshold:
                self._misses += 1
                return None
            self._hits += 1
            entry.hits += 1
            entry.used_seq = next(self._seq)
            if self._policy != "fifo":
                self._push_evict_key(entry)
            response, created_at = entry.response, entry.created_at
        # Entries are replaced, never mutated, so copying outside the lock is safe.
        return CacheHit(
            response=copy.deepcopy(response),
            similarity=min(best, 1.0),
            partition=partition,
            created_at=created_at,
        )

    def store(
        self,
        partition: str,
        vector: Any,
        response: dict[str, Any],
        ttl_seconds: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        partition = check_partition(partition)
        check_response(response)
        ttl = self._ttl_seconds if ttl_seconds is None else check_ttl(ttl_seconds)
        v = as_unit_vector(vector)
        stored = copy.deepcopy(response)  # the caller may keep mutating its dict
        created_at = self._wall_clock()
        with self._lock:
            if epoch is not None and self._epochs.token(partition) > epoch:
                return False  # flushed since the caller read its token: a pre-flush answer
            now = self._clock()
            self._purge_expired(now)
            expires_at = now + ttl if ttl > 0 else math.inf
            part = self._partitions.get(partition)
            if part is not None:
                self._check_dim(part, v)
                duplicate, similarity = part.nearest(v)
                if similarity >= DUPLICATE_SIMILARITY:
                    self._replace(part, duplicate, v, stored, created_at, expires_at)
                    return True
            if self._max_entries > 0:
                # Make room first so the new entry itself is never the victim (an lfu trap).
                while len(self._entries) >= self._max_entries:
                    self._evict_one()
            part = self._partitions.get(partition)  # eviction may have dropped an emptied partition
            if part is None:
                part = self._partitions[partition] = self._index_factory(v.shape[0])
            seq = next(self._seq)
            entry = CacheEntry(
                id=next(self._ids),
                partition=partition,
                row=-1,
                response=stored,
                created_at=created_at,
                expires_at=expires_at,
                inserted_seq=seq,
                used_seq=seq,
            )
            part.add(v, entry)
            self._entries[entry.id] = entry
            self._push_evict_key(entry)
            if math.isfinite(expires_at):
                heapq.heappush(self._expiry_heap, (expires_at, entry.id))
            return True

    def stats(self) -> CacheStats:
        with self._lock:
            self._purge_expired(self._clock())
            total = self._hits + self._misses
            return CacheStats(
                entries=len(self._entries),
                hits=self._hits,
                misses=self._misses,
                hit_ratio=self._hits / total if total else 0.0,
                evictions=self._evictions,
                expirations=self._expirations,
                partitions=len(self._partitions),
                epochs=self._epochs.model_copy(deep=True),
            )

    def clear(self, partition: str | None = None, scope: CacheScope | None = None) -> int:
        with self._lock:
            if partition is not None:
                return self._drop_partitions([check_partition(partition)])
            return self._clear_scope(scope)

    def count(self, scope: CacheScope | None = None) -> int:
        with self._lock:
            self._purge_expired(self._clock())
            return sum(len(self._partitions[name]) for name in self._partitions_of(scope))

    def flush(self, scope: CacheScope | None = None) -> FlushOutcome:
        with self._lock:
            # In the process: every caller of this backend (the one ResponseCache replica) sees it.
            key = GLOBAL_EPOCH if scope is None else scope.key
            if scope is None:
                self._epochs.global_epoch += 1
                epoch = self._epochs.global_epoch
            else:
                epoch = self._epochs.scopes[key] = self._epochs.scopes.get(key, 0) + 1
            return FlushOutcome(removed=self._clear_scope(scope), epoch=epoch)

    def epoch(self, partition: str) -> int:
        with self._lock:
            return self._epochs.token(check_partition(partition))

    def epochs(self) -> CacheEpochs:
        with self._lock:
            return self._epochs.model_copy(deep=True)

    def configure(self, settings: Any) -> None:
        """Apply new capacity settings in place; entries survive unless the new bound is smaller.

        A new ttl_seconds applies to entries stored from now on; existing entries keep theirs.
        """
        with self._lock:
            current = CacheTuning(
                max_entries=self._max_entries, ttl_seconds=self._ttl_seconds, eviction_policy=self._policy
            )
            tuning = CacheTuning.from_settings(settings, current)
            self._ttl_seconds = tuning.ttl_seconds
            if tuning.eviction_policy != self._policy:
                self._policy = tuning.eviction_policy
                self._rebuild_evict_heap()
            self._max_entries = tuning.max_entries
            self._purge_expired(self._clock())
            if self._max_entries > 0:
                while len(self._entries) > self._max_entries:
                    self._evict_one()

    # ------------------------------------------------------------------ internals (lock held)

    def _partitions_of(self, scope: CacheScope | None) -> list[str]:
        if scope is None:
            return list(self._partitions)
        return [name for name in self._partitions if scope in scopes_of(name)]

    def _clear_scope(self, scope: CacheScope | None) -> int:
        if scope is not None:
            return self._drop_partitions(self._partitions_of(scope))
        removed = len(self._entries)
        self._partitions.clear()
        self._entries.clear()
        self._evict_heap.clear()
        self._expiry_heap.clear()
        return removed

    def _drop_partitions(self, names: list[str]) -> int:
        removed = 0
        for name in names:
            part = self._partitions.pop(name, None)
            for entry in part or ():
                del self._entries[entry.id]
                removed += 1
        if removed:
            self._compact_heaps()
        return removed

    @staticmethod
    def _check_dim(part: PartitionIndex, v: np.ndarray) -> None:
        if v.shape[0] != part.dim:
            raise VectorDimensionMismatch(
                f"cache vector has {v.shape[0]} dimensions but this partition holds {part.dim}-d vectors"
                " (embedding model changed? clear the cache)"
            )

    def _evict_key(self, entry: CacheEntry) -> tuple[int, int]:
        if self._policy == "fifo":
            return (entry.inserted_seq, 0)
        if self._policy == "lru":
            return (entry.used_seq, 0)
        return (entry.hits, entry.used_seq)

    def _push_evict_key(self, entry: CacheEntry) -> None:
        entry.version += 1
        k0, k1 = self._evict_key(entry)
        heapq.heappush(self._evict_heap, (k0, k1, entry.version, entry.id))
        if len(self._evict_heap) > 2 * len(self._entries) + 64:
            self._rebuild_evict_heap()

    def _rebuild_evict_heap(self) -> None:
        self._evict_heap = [(*self._evict_key(e), e.version, e.id) for e in self._entries.values()]
        heapq.heapify(self._evict_heap)

    def _compact_heaps(self) -> None:
        self._rebuild_evict_heap()
        self._expiry_heap = [item for item in self._expiry_heap if item[1] in self._entries]
        heapq.heapify(self._expiry_heap)

    def _replace(
        self,
        part: PartitionIndex,
        entry: CacheEntry,
        v: np.ndarray,
        response: dict[str, Any],
        created_at: float,
        expires_at: float,
    ) -> None:
        # A fresh answer for the same prompt: new content and lifetime, popularity (hits) kept.
        part.replace(entry, v)
        entry.response = response
        entry.created_at = created_at
        entry.expires_at = expires_at
        entry.inserted_seq = entry.used_seq = next(self._seq)
        self._push_evict_key(entry)
        if math.isfinite(expires_at):
            heapq.heappush(self._expiry_heap, (expires_at, entry.id))

    def _remove(self, entry: CacheEntry) -> None:
        del self._entries[entry.id]
        part = self._partitions[entry.partition]
        part.remove(entry)
        if not part:
            del self._partitions[entry.partition]

    def _evict_one(self) -> None:
        while self._evict_heap:
            _, _, version, entry_id = heapq.heappop(self._evict_heap)
            entry = self._entries.get(entry_id)
            if entry is not None and entry.version == version:
                self._remove(entry)
                self._evictions += 1
                return
        raise RuntimeError("eviction heap out of sync with cache entries")  # a bug, never user input

    def _purge_expired(self, now: float) -> None:
        heap = self._expiry_heap
        while heap and heap[0][0] <= now:
            expires_at, entry_id = heapq.heappop(heap)
            entry = self._entries.get(entry_id)
            # A refreshed entry has a later expires_at and its own newer heap item.
            if entry is not None and entry.expires_at == expires_at:
                self._remove(entry)
                self._expirations += 1
        if len(heap) > 2 * len(self._entries) + 64:
            self._compact_heaps()


def memory_cache(tuning: CacheTuning, hnsw: HnswSettings | None = None) -> InMemorySemanticCache:
    """An in-memory cache tuned by `tuning`: exact scan, or HNSW partitions when hnsw.use_hnsw."""
    index_factory: IndexFactory = ExactIndex
    if hnsw is not None and hnsw.use_hnsw:
        from app.cache.hnsw import hnsw_index_factory  # faiss loads only when HNSW is chosen

        index_factory = hnsw_index_factory(hnsw)
    return InMemorySemanticCache(
        max_entries=tuning.max_entries,
        ttl_seconds=tuning.ttl_seconds,
        eviction_policy=tuning.eviction_policy,
        index_factory=index_factory,
    )
