"""Semantic response cache on Redis with the search module (RediSearch), shared by every replica.

Entries are hashes under `key_prefix` (P below), indexed by one RediSearch HNSW COSINE index
(`index_name`, created on the first vector and reused by every later backend object, so a
restarted replica finds its entries):

    P e:<member>       hash: partition_tag, model_tag, decision_tag (TAGs: digests of the
                       partition and of its model and model+decision scopes), partition,
                       vector (float32 bytes of the unit vector), response (JSON text),
                       created_at (NUMERIC, wall clock)
    P order:inserted   sorted sets of members, the eviction order per policy: insert time
    P order:used       (fifo), last hit time (lru), hit count (lfu)
    P order:hits
    P expiry           members by expiry time: bookkeeping for the keys Redis expires itself
    P part:<tag>       members of one partition (clear(partition)); P parts: tags in use
    P stats            hits, misses, evictions, expirations, shared by every replica
    P epochs           flush epochs: "global" and one field per flushed scope key; kept
                       by clear(), so every replica and a restart see them

A lookup is KNN 1 filtered by the partition's TAG, searching the HNSW graph with EF_RUNTIME
64 like the in-memory index (RediSearch's default of 10 found 41 % of stored near-duplicates
at 100k entries; docs/performance.md). The TAG holds a digest of the partition,
never its text, so no partition ('|', ':', spaces, the TAG separator ',', case) can break
the query or match another partition. A scope (every partition of a model, or of a model
and decision) is cleared and counted by a search on its TAG.

A write given an epoch token runs under WATCH of the epochs hash: a flush that advances an
epoch before or during the write drops it (the flush advances, then deletes), so a pre-flush
answer never lands in a flushed scope.

Approximations, because several replicas write without a global lock: the bound may be
overshot briefly by concurrent stores; lfu ties go to the oldest insert (memory: the least
recently used); a key that expires is dropped from the bookkeeping on the next store or
stats call. Every Redis error or timeout raises CacheUnavailable within
`timeout_seconds` (no retries), so an outage costs a request one miss, never a failure.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import redis
from redis.backoff import NoBackoff
from redis.commands.search.field import Field, NumericField, TagField, VectorField
from redis.commands.search.index_definition import IndexDefinition, IndexType
from redis.commands.search.query import Query
from redis.retry import Retry

from app.cache.base import (
    GLOBAL_EPOCH,
    CacheEpochs,
    CacheHit,
    CacheScope,
    CacheStats,
    CacheTuning,
    CacheUnavailable,
    FlushOutcome,
    VectorDimensionMismatch,
    scope_tag,
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
from app.config.cache_stores import RedisCacheSettings

_ORDER_FIELD = {"fifo": "inserted", "lru": "used", "lfu": "hits"}
_STAT_FIELDS = ("hits", "misses", "evictions", "expirations")
_MISSING_INDEX = ("unknown index name", "no such index")
_SCOPE_PAGE = 1000  # members fetched per search when a scope is cleared


EF_RUNTIME = 64  # HNSW search width, as the in-memory index (app/cache/hnsw.py EF_SEARCH)


class _Nearest(NamedTuple):
    member: str
    similarity: float
    response: str
    created_at: float


def redis_client(settings: RedisCacheSettings) -> redis.Redis:
    """One client (one connection pool) that fails within timeout_seconds, never retrying."""
    options: dict[str, Any] = {
        "socket_timeout": settings.timeout_seconds,
        "socket_connect_timeout": settings.timeout_seconds,
        "retry": Retry(NoBackoff(), 0),
    }
    if settings.username is not None:
        options["username"] = settings.username
    if settings.password is not None:
        options["password"] = settings.password
    if settings.url is not None:
        return redis.Redis.from_url(settings.url, **options)
    return redis.Redis(host=settings.host, port=settings.port, db=settings.db, ssl=settings.tls, **options)


def partition_tag(partition: str) -> str:
    """The TAG value of a partition: a digest, so no partition text needs escaping."""
    return hashlib.blake2s(partition.encode(), digest_size=16).hexdigest()


class RedisSemanticCache:
    """Implements app.cache.base.ResponseCacheStore on Redis + RediSearch (see module doc)."""

    def __init__(
        self,
        settings: RedisCacheSettings,
        tuning: CacheTuning | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        tuning = tuning or CacheTuning()
        self._settings = settings
        self._tuning = tuning
        self._wall_clock = wall_clock
        self._redis = redis_client(settings)
        self._prefix = settings.key_prefix
        self._dim: int | None = None  # the index's dimension, once known

    # ------------------------------------------------------------------ public API

    @property
    def tuning(self) -> CacheTuning:
        return self._tuning

    def close(self) -> None:
        self._redis.close()

    def lookup(self, partition: str, vector: Any, threshold: float) -> CacheHit | None:
        partition = check_partition(partition)
        threshold = check_threshold(threshold)
        v = as_unit_vector(vector)
        with self._unavailable("lookup"):
            found = self._nearest(partition_tag(partition), v)
            if found is None or found.similarity + SIMILARITY_SLACK < threshold:
                self._redis.hincrby(self._key("stats"), "misses", 1)
                return None
            with self._redis.pipeline(transaction=False) as pipe:
                pipe.hincrby(self._key("stats"), "hits", 1)
                # xx: never resurrect a member another replica just removed.
                pipe.zadd(self._key("order:used"), {found.member: self._wall_clock()}, xx=True)
                pipe.zadd(self._key("order:hits"), {found.member: 1}, xx=True, incr=True)
                pipe.execute()
        return CacheHit(
            response=json.loads(found.response),
            similarity=min(found.similarity, 1.0),
            partition=partition,
            created_at=found.created_at,
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
        ttl = self._tuning.ttl_seconds if ttl_seconds is None else check_ttl(ttl_seconds)
        v = as_unit_vector(vector)
        try:
            body = json.dumps(response, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"cached response is not JSON-serialisable: {exc}") from None
        tag = partition_tag(partition)
        with self._unavailable("store"):
            now = self._wall_clock()
            self._purge_expired(now)
            found = self._nearest(tag, v)
            if found is not None and found.similarity >= DUPLICATE_SIMILARITY:
                member = found.member  # the same prompt: the new answer replaces the old
            else:
                if self._tuning.max_entries > 0:
                    self._evict(self._count() - self._tuning.max_entries + 1)
                member = f"{int(now * 1_000_000):016x}{secrets.token_hex(4)}.{tag}"
            return self._write(member, partition, v, body, now, ttl, epoch)

    def stats(self) -> CacheStats:
        with self._unavailable("stats"):
            self._purge_expired(self._wall_clock())
            with self._redis.pipeline(transaction=False) as pipe:
                pipe.hmget(self._key("stats"), list(_STAT_FIELDS))
                pipe.zcard(self._key("order:inserted"))
                pipe.scard(self._key("parts"))
                pipe.hgetall(self._key("epochs"))
                counters, entries, partitions, epochs = pipe.execute()
        hits, misses, evictions, expirations = (int(value or 0) for value in counters)
        total = hits + misses
        return CacheStats(
            entries=entries,
            hits=hits,
            misses=misses,
            hit_ratio=hits / total if total else 0.0,
            evictions=evictions,
            expirations=expirations,
            partitions=partitions,
            epochs=_epochs(self._texts(epochs), self._texts(epochs.values())),
        )

    def clear(self, partition: str | None = None, scope: CacheScope | None = None) -> int:
        with self._unavailable("clear"):
            self._purge_expired(self._wall_clock())
            if partition is not None:
                tag = partition_tag(check_partition(partition))
                return sum(self._remove(self._texts(self._redis.smembers(self._key(f"part:{tag}")))))
            if scope is not None:
                return sum(self._remove(self._scope_members(scope)))
            removed = self._count()
            # Dropping the index (not its documents: those go by key below) lets a new
            # embedding model with another dimension start afresh, as the memory backend does.
            with contextlib.suppress(redis.ResponseError):
                self._redis.ft(self._settings.index_name).dropindex(delete_documents=False)
            self._dim = None
            keep = {self._key("stats"), self._key("epochs")}
            self._delete_matching(f"{_glob_escape(self._prefix)}*", keep=keep)
            return removed

    def count(self, scope: CacheScope | None = None) -> int:
        with self._unavailable("count"):
            self._purge_expired(self._wall_clock())
            if scope is None:
                return self._count()
            result = self._scope_search(scope, 0, 0)
            return 0 if result is None else int(result.total)

    def flush(self, scope: CacheScope | None = None) -> FlushOutcome:
        field = GLOBAL_EPOCH if scope is None else scope.key
        with self._unavailable("flush"):
            # Advance first: a write racing the flush is then refused (WATCH) or deleted below.
            epoch = int(self._redis.hincrby(self._key("epochs"), field, 1))
        return FlushOutcome(removed=self.clear(scope=scope), epoch=epoch)

    def epoch(self, partition: str) -> int:
        with self._unavailable("epoch"):
            return self._token(self._redis, check_partition(partition))

    def epochs(self) -> CacheEpochs:
        with self._unavailable("epochs"):
            fields = self._redis.hgetall(self._key("epochs"))
        return _epochs(self._texts(fields), self._texts(fields.values()))

    def configure(self, settings: Any) -> None:
        """Apply max_entries / ttl_seconds / eviction_policy; a smaller bound evicts at once."""
        self._tuning = CacheTuning.from_settings(settings, self._tuning)
        if self._tuning.max_entries > 0:
            with self._unavailable("configure"):
                self._evict(self._count() - self._tuning.max_entries)

    # ------------------------------------------------------------------ internals

    def _key(self, suffix: str) -> str:
        return f"{self._prefix}{suffix}"

    @contextlib.contextmanager
    def _unavailable(self, action: str) -> Iterator[None]:
        try:
            yield
        except (redis.RedisError, OSError) as exc:
            raise CacheUnavailable(f"redis response cache: {action} failed: {exc}") from exc

    @staticmethod
    def _texts(values: Iterable[Any]) -> list[str]:
        return [value.decode() if isinstance(value, bytes) else str(value) for value in values]

    def _count(self) -> int:
        return int(self._redis.zcard(self._key("order:inserted")))

    def _ensure_index(self, dim: int) -> None:
        if self._dim is None:
            self._dim = self._index_dim() or self._create_index(dim)
        if dim != self._dim:
            raise VectorDimensionMismatch(
                f"cache vector has {dim} dimensions but the Redis index {self._settings.index_name!r}"
                f" holds {self._dim}-d vectors (embedding model changed? clear the cache)"
            )

    def _index_dim(self) -> int | None:
        """The existing index's vector dimension, None when there is no index yet."""
        try:
            info = self._redis.ft(self._settings.index_name).info()
        except redis.ResponseError as exc:
            if _is_missing_index(exc):
                return None
            raise
        dim: int | None = None
        names: list[str] = []
        for attribute in info.get("attributes", []):
            fields = dict(zip(attribute[::2], attribute[1::2], strict=False))
            names += self._texts([fields.get("attribute", "")])
            if names[-1] == "vector" and "dim" in fields:
                dim = int(fields["dim"])
        if dim is None or "decision_tag" not in names:
            raise CacheUnavailable(
                f"Redis index {self._settings.index_name!r} was not made by this cache version (no vector"
                " or scope fields): drop it, or configure another index_name and key_prefix"
            )
        return dim

    def _create_index(self, dim: int) -> int:
        schema: list[Field] = [
            TagField("partition_tag", case_sensitive=True),
            TagField("model_tag", case_sensitive=True),
            TagField("decision_tag", case_sensitive=True),
            NumericField("created_at"),
            VectorField(
                "vector",
                "HNSW",
                {"TYPE": "FLOAT32", "DIM": dim, "DISTANCE_METRIC": "COSINE", "M": 16, "EF_CONSTRUCTION": 200},
            ),
        ]
        definition = IndexDefinition(prefix=[self._key("e:")], index_type=IndexType.HASH)
        try:
            self._redis.ft(self._settings.index_name).create_index(schema, definition=definition)
        except redis.ResponseError as exc:
            if "already exists" not in str(exc).lower():  # another replica was first
                raise
            return self._index_dim() or dim
        return dim

    def _nearest(self, tag: str, v: np.ndarray) -> _Nearest | None:
        """The partition's nearest entry to the unit vector `v` (KNN 1), None when it is empty."""
        self._ensure_index(v.shape[0])
        query = (
            Query(f"(@partition_tag:{{{tag}}})=>[KNN 1 @vector $vec EF_RUNTIME {EF_RUNTIME} AS distance]")
            .return_fields("distance", "response", "created_at")
            .paging(0, 1)
            .dialect(2)
        )
        try:
            result = self._redis.ft(self._settings.index_name).search(query, {"vec": v.tobytes()})
        except redis.ResponseError as exc:
            if not _is_missing_index(exc):
                raise
            self._dim = None  # another replica cleared the cache (and dropped the index)
            return None
        if not result.docs:
            return None
        doc = result.docs[0]
        if not all(hasattr(doc, field) for field in ("distance", "response", "created_at")):
            return None  # the key expired after the search found it: the entry is gone
        return _Nearest(
            member=doc.id.removeprefix(self._key("e:")),
            similarity=1.0 - float(doc.distance),
            response=doc.response,
            created_at=float(doc.created_at),
        )

    def _token(self, client: Any, partition: str) -> int:
        model, decision = scopes_of(partition)
        values = client.hmget(self._key("epochs"), [GLOBAL_EPOCH, model.key, decision.key])
        return sum(int(value or 0) for value in values)

    def _scope_search(self, scope: CacheScope, offset: int, limit: int) -> Any:
        """Entries of `scope` (ids only); None when there is no index (nothing stored yet)."""
        field = "model_tag" if scope.decision is None else "decision_tag"
        query = Query(f"@{field}:{{{scope_tag(scope)}}}").no_content().paging(offset, limit).dialect(2)
        try:
            return self._redis.ft(self._settings.index_name).search(query)
        except redis.ResponseError as exc:
            if not _is_missing_index(exc):
                raise
            return None

    def _scope_members(self, scope: CacheScope) -> list[str]:
        members: list[str] = []
        while True:
            result = self._scope_search(scope, len(members), _SCOPE_PAGE)
            page = [] if result is None else [doc.id.removeprefix(self._key("e:")) for doc in result.docs]
            members.extend(page)
            if len(page) < _SCOPE_PAGE:
                return members

    def _write(
        self, member: str, partition: str, v: np.ndarray, body: str, now: float, ttl: int, epoch: int | None
    ) -> bool:
        """Write one entry; with an epoch token, only while no flush has moved past it."""
        key, tag = self._key(f"e:{member}"), member.rsplit(".", 1)[1]
        model, decision = scopes_of(partition)
        with self._redis.pipeline(transaction=True) as pipe:
            if epoch is not None:
                pipe.watch(self._key("epochs"))
                if self._token(pipe, partition) > epoch:
                    return False  # flushed since the caller read its token: a pre-flush answer
                pipe.multi()
            pipe.hset(
                key,
                mapping={
                    "partition_tag": tag,
                    "model_tag": scope_tag(model),
                    "decision_tag": scope_tag(decision),
                    "partition": partition,
                    "vector": v.tobytes(),
                    "response": body,
                    "created_at": now,
                },
            )
            if ttl > 0:
                pipe.expire(key, ttl)
                pipe.zadd(self._key("expiry"), {member: now + ttl})
            else:
                pipe.persist(key)
                pipe.zrem(self._key("expiry"), member)
            pipe.zadd(self._key("order:inserted"), {member: now})
            pipe.zadd(self._key("order:used"), {member: now})
            pipe.zadd(self._key("order:hits"), {member: 0}, nx=True)  # a replacement keeps its hits
            pipe.sadd(self._key(f"part:{tag}"), member)
            pipe.sadd(self._key("parts"), tag)
            try:
                pipe.execute()
            except redis.WatchError:
                return False  # a flush moved an epoch during the write: dropped as if after it
        return True

    def _evict(self, count: int) -> None:
        """Remove `count` entries in the eviction policy's order."""
        if count <= 0:
            return
        order = self._key(f"order:{_ORDER_FIELD[self._tuning.eviction_policy]}")
        members = self._texts(self._redis.zrange(order, 0, count - 1))
        existed = self._remove(members)
        self._count_stats(evictions=sum(existed), expirations=len(existed) - sum(existed))

    def _purge_expired(self, now: float) -> None:
        members = self._texts(self._redis.zrangebyscore(self._key("expiry"), "-inf", now))
        if members:
            self._remove(members)
            self._count_stats(expirations=len(members))

    def _remove(self, members: list[str]) -> list[bool]:
        """Drop entries and their bookkeeping; for each, whether its key still existed."""
        if not members:
            return []
        tags = sorted({member.rsplit(".", 1)[1] for member in members})
        with self._redis.pipeline(transaction=True) as pipe:
            for member in members:
                pipe.delete(self._key(f"e:{member}"))
            for order in ("order:inserted", "order:used", "order:hits", "expiry"):
                pipe.zrem(self._key(order), *members)
            for tag in tags:
                pipe.srem(self._key(f"part:{tag}"), *members)
            for tag in tags:
                pipe.scard(self._key(f"part:{tag}"))
            replies = pipe.execute()
        sizes = replies[-len(tags) :]
        emptied = [tag for tag, size in zip(tags, sizes, strict=True) if int(size) == 0]
        if emptied:
            self._redis.srem(self._key("parts"), *emptied)
        return [bool(deleted) for deleted in replies[: len(members)]]

    def _count_stats(self, **counts: int) -> None:
        with self._redis.pipeline(transaction=False) as pipe:
            for name, value in counts.items():
                if value:
                    pipe.hincrby(self._key("stats"), name, value)
            pipe.execute()

    def _delete_matching(self, pattern: str, keep: set[str]) -> None:
        batch: list[Any] = []
        for key in self._redis.scan_iter(match=pattern, count=500):
            if self._texts([key])[0] not in keep:
                batch.append(key)
            if len(batch) >= 500:
                self._redis.delete(*batch)
                batch.clear()
        if batch:
            self._redis.delete(*batch)


def _epochs(fields: list[str], values: list[str]) -> CacheEpochs:
    counters = dict(zip(fields, (int(value) for value in values), strict=True))
    return CacheEpochs(global_epoch=counters.pop(GLOBAL_EPOCH, 0), scopes=counters)


def _is_missing_index(exc: redis.ResponseError) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in _MISSING_INDEX)


def _glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN MATCH pattern."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)
