"""Two-tier response cache: a bounded in-memory front over a shared store of record.

Lookups ask the front (this replica's memory, microseconds) first, then the store (Milvus or
Redis, shared by every replica); a store hit fills the front under the query's vector, so
the next similar prompt on this replica stays in memory. Stores write the front, then the
store. The front is bounded by `max_memory_entries` (and never above max_entries).

A store that is down degrades the cache to the front alone and never fails a request:
lookup() and store() do not raise CacheUnavailable (they log when the store goes away and
when it comes back); the front keeps serving this replica's recent answers. clear() does
raise CacheUnavailable when the store could not be cleared, since the operator asked for
the shared entries to go; so do count() and flush(), which are the store's. stats() reports the store's entries when it answers (the front's
otherwise) and this object's own hits and misses, whichever tier answered.

Under lru/lfu the store must learn of front hits, or it would evict what a replica keeps
serving: front hits are queued (the last MAX_PENDING_USES) and replayed to the store as
lookups at the next store() or configure(), the only calls that evict, and which run after
the answer has been sent; the request path itself never waits on the store for a front hit.

Epochs are the store's: flush() advances the store's epoch, then clears the store and this
front; epoch() is the store's token, and a store() the store drops as stale (a flush came
after the token) is not written to the front either. Other replicas' fronts learn of a flush
by polling the store's epochs (at most every EPOCH_POLL_S, on a lookup) and clear each scope
whose epoch moved, so a flush reaches every front within EPOCH_POLL_S of their next lookup.

Approximate, and why: a fill keeps the entry for what is left of the default ttl_seconds
since the store wrote it (CacheHit carries no expiry), so an entry stored with a shorter
per-request ttl may outlive it in a front by up to the default; a clear() (an invalidate,
which moves no epoch) on one replica leaves other replicas' fronts until their entries
expire or are evicted: a flush is what reaches them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from app.cache.base import (
    CacheEpochs,
    CacheHit,
    CacheScope,
    CacheStats,
    CacheTuning,
    CacheUnavailable,
    FlushOutcome,
    ResponseCacheStore,
)
from app.cache.memory import memory_cache
from app.config.cache_stores import HnswSettings

log = logging.getLogger(__name__)

MAX_PENDING_USES = 256
# How stale a front may be about another replica's flush (one store read per interval).
EPOCH_POLL_S = 1.0


def front_tuning(tuning: CacheTuning, max_memory_entries: int) -> CacheTuning:
    """The front's tuning: the cache's ttl and policy, at most max_memory_entries entries."""
    bounds = [bound for bound in (tuning.max_entries, max_memory_entries) if bound > 0]
    return tuning.model_copy(update={"max_entries": min(bounds) if bounds else 0})


def hybrid_cache(
    store: ResponseCacheStore, tuning: CacheTuning, settings: HnswSettings
) -> HybridSemanticCache:
    """A hybrid over `store` whose front is an in-memory cache (HNSW when settings.use_hnsw)."""
    front = memory_cache(front_tuning(tuning, settings.max_memory_entries), settings)
    return HybridSemanticCache(front, store, tuning, settings.max_memory_entries)


class HybridSemanticCache:
    """Implements app.cache.base.ResponseCacheStore over (front, store) backends."""

    def __init__(
        self,
        front: ResponseCacheStore,
        store: ResponseCacheStore,
        tuning: CacheTuning | None = None,
        max_memory_entries: int = 1000,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.front = front
        self.store_of_record = store
        self._tuning = tuning or CacheTuning()
        self._max_memory_entries = max_memory_entries
        self._wall_clock = wall_clock
        self._clock = clock
        # The store's epochs as this front last saw them; zeros at first, so the first look
        # clears every scope ever flushed (the front is young then: little is lost).
        self._known_epochs = CacheEpochs()
        self._next_epoch_poll = 0.0
        self._lock = threading.Lock()
        self._hits = self._misses = 0
        self._store_up = True
        # Front hits the store has not seen yet: (partition, vector, threshold).
        self._pending_uses: deque[tuple[str, Any, float]] = deque(maxlen=MAX_PENDING_USES)

    def lookup(self, partition: str, vector: Any, threshold: float) -> CacheHit | None:
        self._follow_flushes()
        hit = self.front.lookup(partition, vector, threshold)
        if hit is not None and self._tuning.eviction_policy != "fifo":
            self._pending_uses.append((partition, vector, threshold))
        if hit is None:
            try:
                hit = self.store_of_record.lookup(partition, vector, threshold)
                self._store_answered()
            except CacheUnavailable as exc:
                self._store_failed(exc)
            if hit is not None:
                self._fill_front(partition, vector, hit)
        with self._lock:
            if hit is None:
                self._misses += 1
            else:
                self._hits += 1
        return hit

    def store(
        self,
        partition: str,
        vector: Any,
        response: dict[str, Any],
        ttl_seconds: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        try:
            self._replay_uses()
            kept = self.store_of_record.store(partition, vector, response, ttl_seconds, epoch)
            self._store_answered()
        except CacheUnavailable as exc:
            self._store_failed(exc)
            kept = True  # the store cannot judge the token; this replica's memory still serves
        if kept:  # the front's own epochs stay 0: the token is the store's to judge
            self.front.store(partition, vector, response, ttl_seconds)
        return kept

    def stats(self) -> CacheStats:
        try:
            base = self.store_of_record.stats()
            self._store_answered()
        except CacheUnavailable as exc:
            self._store_failed(exc)
            base = self.front.stats().model_copy(update={"epochs": self._known_epochs})
        with self._lock:
            total = self._hits + self._misses
            return base.model_copy(
                update={
                    "hits": self._hits,
                    "misses": self._misses,
                    "hit_ratio": self._hits / total if total else 0.0,
                }
            )

    def clear(self, partition: str | None = None, scope: CacheScope | None = None) -> int:
        removed_front = self.front.clear(partition, scope)
        try:
            removed = self.store_of_record.clear(partition, scope)
        except CacheUnavailable as exc:
            self._store_failed(exc)
            raise CacheUnavailable(
                f"cleared {removed_front} entries from this replica's memory, but not the shared store: {exc}"
            ) from exc
        self._store_answered()
        return removed  # the store's count: front entries are copies of (or fills from) it

    def count(self, scope: CacheScope | None = None) -> int:
        return self.store_of_record.count(scope)

    def flush(self, scope: CacheScope | None = None) -> FlushOutcome:
        outcome = self.store_of_record.flush(scope)
        self.front.clear(scope=scope)
        return outcome

    def epoch(self, partition: str) -> int:
        return self.store_of_record.epoch(partition)

    def epochs(self) -> CacheEpochs:
        return self.store_of_record.epochs()

    def configure(self, settings: Any) -> None:
        """Tune both tiers; `max_memory_entries` (when settings carry it) re-bounds the front."""
        self._tuning = CacheTuning.from_settings(settings, self._tuning)
        bound = settings.get("max_memory_entries") if isinstance(settings, Mapping) else None
        bound = getattr(settings, "max_memory_entries", bound)
        if isinstance(bound, int) and not isinstance(bound, bool) and bound >= 0:
            self._max_memory_entries = bound
        self.front.configure(front_tuning(self._tuning, self._max_memory_entries))
        self._replay_uses()
        self.store_of_record.configure(self._tuning)

    def close(self) -> None:
        close = getattr(self.store_of_record, "close", None)
        if callable(close):
            close()

    # ------------------------------------------------------------------ internals

    def _replay_uses(self) -> None:
        """Tell the store about the front's hits (lru/lfu bookkeeping) before it may evict."""
        while True:
            try:
                partition, vector, threshold = self._pending_uses.popleft()
            except IndexError:
                return
            self.store_of_record.lookup(partition, vector, threshold)

    def _follow_flushes(self) -> None:
        """Clear the front's scopes whose epoch another replica advanced (see module doc)."""
        now = self._clock()
        if now < self._next_epoch_poll:
            return
        self._next_epoch_poll = now + EPOCH_POLL_S
        try:
            epochs = self.store_of_record.epochs()
        except CacheUnavailable as exc:
            self._store_failed(exc)
            return
        known, self._known_epochs = self._known_epochs, epochs
        if epochs.global_epoch > known.global_epoch:
            self.front.clear()
            return
        for key, epoch in epochs.scopes.items():
            if epoch > known.scopes.get(key, 0):
                self.front.clear(scope=CacheScope.from_key(key))

    def _fill_front(self, partition: str, vector: Any, hit: CacheHit) -> None:
        ttl = self._tuning.ttl_seconds
        if ttl > 0:  # what is left of the default lifetime since the store wrote the entry
            left = ttl - (self._wall_clock() - hit.created_at)
            if left < 1:
                return
            ttl = math.ceil(left)
        self.front.store(partition, vector, hit.response, ttl)

    def _store_failed(self, exc: CacheUnavailable) -> None:
        if self._store_up:
            log.warning("response cache: shared store unavailable, serving from memory only: %s", exc)
        self._store_up = False

    def _store_answered(self) -> None:
        if not self._store_up:
            log.info("response cache: shared store answers again")
        self._store_up = True
