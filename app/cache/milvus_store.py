"""Semantic response cache in a Milvus collection (a Milvus server, or Milvus Lite in-process).

One row per cached answer: `id` (VARCHAR primary key, a uuid hex), `partition_key` (sha256 hex
of the partition: filters compare fixed hex strings, so no partition text ever needs escaping
in a Milvus expression), `model_key` and `decision_key` (digests of the partition's model
and model+decision scopes: clear, count and flush filter on them), the vector field (name,
dimension, metric and index from the settings), `response` (the chat.completion as JSON, at most RESPONSE_MAX_BYTES UTF-8 bytes:
Milvus's VARCHAR limit; larger answers are not cached), `created_at`, `expires_at`,
`last_used` (wall-clock seconds) and `hits`.

Semantics follow the in-memory backend: lookups filter by partition and `expires_at`; a
stored vector within DUPLICATE_SIMILARITY of one in its partition replaces that row's answer
(upsert, hits kept); ttl_seconds None = the configured default, 0 = never expires; expired
rows are deleted on every store; max_entries bounds the collection and evicts by
`created_at` (fifo), `last_used` (lru) or (`hits`, `last_used`) (lfu).

Approximate, and why: hit bookkeeping for lru/lfu is a partial upsert per hit, so replicas
hitting the same row at once may lose increments; the bound is checked with a count before
each insert, so replicas storing at once may overshoot it briefly; past QUERY_WINDOW rows
eviction picks its victims among the QUERY_WINDOW rows one query returns (and stats()
counts partitions among them); hits/misses/evictions/
expirations in stats() count this object's calls only (one replica), while entries and
partitions are read from the collection. Milvus Lite serves one process: several replicas
need a Milvus server.

Flush epochs live in a collection next to the entries (app/cache/milvus_epochs.py). A write
given an epoch token checks it, inserts, and checks again: when a flush moved past the token
in between, the write deletes its own row (the flush advances, then deletes), so a pre-flush
answer never stays in a flushed scope.

Every client failure (connection refused, timeout, server error) raises CacheUnavailable;
each call is bounded by `timeout_seconds`, and after a failed connect the backend answers
CacheUnavailable at once for RECONNECT_AFTER_S instead of waiting on a dead server again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from app.cache.base import (
    CacheEpochs,
    CacheHit,
    CacheScope,
    CacheStats,
    CacheTuning,
    CacheUnavailable,
    EvictionPolicy,
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
from app.cache.milvus_epochs import MilvusEpochs
from app.common.pymilvus_import import import_pymilvus
from app.config.cache_stores import MilvusCacheSettings

log = logging.getLogger(__name__)

# Milvus's VARCHAR ceiling (bytes); the JSON of a chat.completion rarely comes near it.
RESPONSE_MAX_BYTES = 65_535
# expires_at of an entry that never expires: a plain number keeps the filter one comparison.
NEVER_EXPIRES = 1.0e18
RECONNECT_AFTER_S = 2.0
# Milvus's largest query result (offset + limit): eviction and the partition count read at most this many rows.
QUERY_WINDOW = 16_384
_FIELDS = (
    "id",
    "partition_key",
    "model_key",
    "decision_key",
    "response",
    "created_at",
    "expires_at",
    "last_used",
    "hits",
)

T = TypeVar("T")


def partition_key(partition: str) -> str:
    return hashlib.sha256(partition.encode("utf-8")).hexdigest()


def _similarity(metric: str, score: float) -> float:
    """Cosine similarity from a Milvus score; vectors are stored and sent as unit vectors."""
    if metric == "L2":  # Milvus reports squared L2: |a-b|^2 = 2 - 2cos on unit vectors
        return 1.0 - score / 2.0
    return score  # COSINE, and IP on unit vectors


def _evict_order(policy: EvictionPolicy) -> Callable[[dict[str, Any]], tuple[float, float]]:
    if policy == "fifo":
        return lambda row: (row["created_at"], 0.0)
    if policy == "lru":
        return lambda row: (row["last_used"], 0.0)
    return lambda row: (row["hits"], row["last_used"])


def _where(scope: CacheScope | None) -> str:
    """The filter of a scope's rows ("" = every row); scope keys are fixed hex digests."""
    if scope is None:
        return ""
    field = "model_key" if scope.decision is None else "decision_key"
    return f'{field} == "{scope_tag(scope)}"'


def _deleted_count(result: Any) -> int:
    # A Milvus server answers {"delete_count": n}; Milvus Lite answers the deleted ids.
    if isinstance(result, dict):
        return int(result.get("delete_count", 0))
    return len(result) if isinstance(result, list) else 0


class MilvusSemanticCache:
    """Implements app.cache.base.ResponseCacheStore over a Milvus collection.

    settings.uri: a server uri ("http://host:19530") or a Milvus Lite path; None with
    settings.host set builds the server uri from host/port; None otherwise needs
    `lite_path`. Thread-safe: the client is shared, counters are locked.
    """

    def __init__(
        self,
        settings: MilvusCacheSettings,
        tuning: CacheTuning | None = None,
        lite_path: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._uri = self._resolve_uri(settings, lite_path)
        tuning = tuning or CacheTuning()
        self._tuning = tuning
        self._clock = clock  # wall clock: expiry times are shared with other processes
        self._timeout = settings.timeout_seconds
        collection = settings.collection
        self._collection = collection.name
        self._vector_field = collection.vector_field.name
        self._metric = collection.vector_field.metric_type
        self._dim = collection.vector_field.dimension  # the collection's own once connected
        self._lock = threading.Lock()
        self._connect_lock = threading.Lock()
        self._client: Any = None
        self._failed_at: float | None = None
        self._hits = self._misses = self._evictions = self._expirations = 0
        self._epochs = MilvusEpochs(self._call, self._collection)

    # ------------------------------------------------------------------ public API

    @property
    def uri(self) -> str:
        return self._uri

    def lookup(self, partition: str, vector: Any, threshold: float) -> CacheHit | None:
        partition = check_partition(partition)
        check_threshold(threshold)
        v = as_unit_vector(vector)
        client = self._connected()
        self._check_dim(v)
        now = self._clock()
        row, similarity = self._nearest(client, partition, v, now)
        if row is None or similarity + SIMILARITY_SLACK < threshold:
            with self._lock:
                self._misses += 1
            return None
        with self._lock:
            self._hits += 1
        if self._tuning.eviction_policy != "fifo":
            self._note_use(client, row, now)
        return CacheHit(
            response=json.loads(row["response"]),
            similarity=min(similarity, 1.0),
            partition=partition,
            created_at=row["created_at"],
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
        text = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
        if len(text.encode("utf-8")) > RESPONSE_MAX_BYTES:
            log.warning(
                "response cache: answer of %d characters exceeds Milvus's VARCHAR limit; not cached",
                len(text),
            )
            return False
        client = self._connected()
        self._check_dim(v)
        if epoch is not None and self._epochs.token(client, partition) > epoch:
            return False  # flushed since the caller read its token: a pre-flush answer
        now = self._clock()
        self._purge_expired(client, now)
        duplicate, similarity = self._nearest(client, partition, v, now)
        model, decision = scopes_of(partition)
        row = {
            "partition_key": partition_key(partition),
            "model_key": scope_tag(model),
            "decision_key": scope_tag(decision),
            self._vector_field: v.tolist(),
            "response": text,
            "created_at": now,
            "expires_at": now + ttl if ttl > 0 else NEVER_EXPIRES,
            "last_used": now,
        }
        if duplicate is not None and similarity >= DUPLICATE_SIMILARITY:
            # A fresh answer for the same prompt: new content and lifetime, popularity kept.
            row_id, hits = duplicate["id"], duplicate["hits"]
            self._call(client.upsert, self._collection, [{**row, "id": row_id, "hits": hits}])
        else:
            if self._tuning.max_entries > 0:
                self._make_room(client, self._tuning.max_entries - 1)
            row_id = uuid.uuid4().hex
            self._call(client.insert, self._collection, [{**row, "id": row_id, "hits": 0}])
        if epoch is not None and self._epochs.token(client, partition) > epoch:
            self._call(client.delete, self._collection, ids=[row_id])  # a flush came in between
            return False
        return True

    def stats(self) -> CacheStats:
        client = self._connected()
        self._purge_expired(client, self._clock())
        keys = {row["partition_key"] for row in self._scan(client, "", ["partition_key"])}
        entries = self._count(client, "")
        epochs = self._epochs.read(client)
        with self._lock:
            total = self._hits + self._misses
            return CacheStats(
                entries=entries,
                hits=self._hits,
                misses=self._misses,
                hit_ratio=self._hits / total if total else 0.0,
                evictions=self._evictions,
                expirations=self._expirations,
                partitions=len(keys),
                epochs=epochs,
            )

    def clear(self, partition: str | None = None, scope: CacheScope | None = None) -> int:
        client = self._connected()
        self._purge_expired(client, self._clock())
        where = _where(scope) if partition is None else f'partition_key == "{partition_key(partition)}"'
        removed = self._count(client, where)
        if removed:
            self._call(client.delete, self._collection, filter=where or 'id != ""')
        return removed

    def count(self, scope: CacheScope | None = None) -> int:
        client = self._connected()
        self._purge_expired(client, self._clock())
        return self._count(client, _where(scope))

    def flush(self, scope: CacheScope | None = None) -> FlushOutcome:
        # Advance first: a write racing the flush then finds the new epoch and removes itself.
        epoch = self._epochs.advance(self._connected(), scope)
        return FlushOutcome(removed=self.clear(scope=scope), epoch=epoch)

    def epoch(self, partition: str) -> int:
        return self._epochs.token(self._connected(), check_partition(partition))

    def epochs(self) -> CacheEpochs:
        return self._epochs.read(self._connected())

    def configure(self, settings: Any) -> None:
        """Apply max_entries / ttl_seconds / eviction_policy; a smaller bound evicts at once.

        A new ttl_seconds applies to entries stored from now on; existing rows keep theirs.
        """
        self._tuning = CacheTuning.from_settings(settings, self._tuning)
        if self._tuning.max_entries > 0:
            client = self._connected()
            self._purge_expired(client, self._clock())
            self._make_room(client, self._tuning.max_entries)

    def close(self) -> None:
        with self._connect_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # ------------------------------------------------------------------ connection and schema

    @staticmethod
    def _resolve_uri(settings: MilvusCacheSettings, lite_path: str | None) -> str:
        if settings.uri is not None:
            return settings.uri
        if settings.host is not None:
            scheme = "https" if settings.tls else "http"
            return f"{scheme}://{settings.host}:{settings.port}"
        if lite_path is None:
            raise ValueError("milvus settings name no uri or host, and no Milvus Lite path was given")
        return lite_path

    def _connected(self) -> Any:
        client = self._client
        if client is not None:
            return client
        with self._connect_lock:
            if self._client is not None:
                return self._client
            failed_at = self._failed_at
            if failed_at is not None and time.monotonic() - failed_at < RECONNECT_AFTER_S:
                raise CacheUnavailable(f"Milvus at {self._uri} was unreachable moments ago")
            try:
                self._client = self._open()
            except CacheUnavailable:
                self._failed_at = time.monotonic()
                raise
            self._failed_at = None
            return self._client

    def _open(self) -> Any:
        import_pymilvus()  # its logging setup would silence this replica's log
        from pymilvus import MilvusClient  # imported here: memory-only deployments never load it

        s = self._settings
        auth = {"token": s.token} if s.token else {"user": s.user or "", "password": s.password or ""}
        client = self._call(MilvusClient, uri=self._uri, db_name=s.database, **auth)
        try:
            if self._call(client.has_collection, self._collection):
                self._adopt_collection(client)
            else:
                self._create_collection(client)
            self._epochs.ensure(client)
        except BaseException:
            client.close()
            raise
        return client

    def _create_collection(self, client: Any) -> None:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=32)
        schema.add_field("partition_key", DataType.VARCHAR, max_length=64)
        schema.add_field("model_key", DataType.VARCHAR, max_length=32)
        schema.add_field("decision_key", DataType.VARCHAR, max_length=32)
        schema.add_field(self._vector_field, DataType.FLOAT_VECTOR, dim=self._dim)
        schema.add_field("response", DataType.VARCHAR, max_length=RESPONSE_MAX_BYTES)
        for name in ("created_at", "expires_at", "last_used"):
            schema.add_field(name, DataType.DOUBLE)
        schema.add_field("hits", DataType.INT64)
        index = client.prepare_index_params()
        spec = self._settings.collection.index
        index.add_index(
            field_name=self._vector_field,
            index_type=spec.type,
            metric_type=self._metric,
            params=dict(spec.params),
        )
        self._call(
            client.create_collection,
            self._collection,
            schema=schema,
            consistency_level=self._settings.consistency_level,
        )
        # sync=False: waiting for the build polls AllocTimestamp, which Milvus Lite lacks
        # (an error log and a 0.5 s sleep); load_collection waits for the index anyway.
        self._call(client.create_index, self._collection, index, sync=False)
        self._call(client.load_collection, self._collection)

    def _adopt_collection(self, client: Any) -> None:
        """Reuse a collection a previous run created; its dimension wins over the settings'."""
        fields = {f["name"]: f for f in self._call(client.describe_collection, self._collection)["fields"]}
        missing = [name for name in (*_FIELDS, self._vector_field) if name not in fields]
        if missing:
            raise CacheUnavailable(
                f"Milvus collection {self._collection!r} lacks fields {missing}: it was not made by this"
                " cache; drop it or configure another collection name"
            )
        self._dim = int(fields[self._vector_field]["params"]["dim"])
        self._call(client.load_collection, self._collection)

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One client call under the configured timeout; any client failure is CacheUnavailable."""
        try:
            return fn(*args, timeout=self._timeout, **kwargs)
        except CacheUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - the client library's errors are many and unstable
            raise CacheUnavailable(f"Milvus at {self._uri}: {type(exc).__name__}: {exc}") from exc

    # ------------------------------------------------------------------ queries

    def _check_dim(self, v: np.ndarray) -> None:
        if v.shape[0] != self._dim:
            raise VectorDimensionMismatch(
                f"cache vector has {v.shape[0]} dimensions but the Milvus collection {self._collection!r}"
                f" holds {self._dim}-d vectors (embedding model changed? clear the cache or use another collection)"
            )

    def _nearest(
        self, client: Any, partition: str, v: np.ndarray, now: float
    ) -> tuple[dict[str, Any] | None, float]:
        params: dict[str, Any] = {"metric_type": self._metric}
        if self._settings.collection.index.type == "HNSW":
            params["params"] = {"ef": max(64, self._settings.search.topk)}
        result = self._call(
            client.search,
            self._collection,
            data=[v.tolist()],
            anns_field=self._vector_field,
            limit=1,
            filter=f'partition_key == "{partition_key(partition)}" and expires_at > {now!r}',
            output_fields=list(_FIELDS),
            search_params=params,
        )
        if not result or not result[0]:
            return None, -1.0
        best = result[0][0]
        return dict(best["entity"], id=best["id"]), _similarity(self._metric, float(best["distance"]))

    def _note_use(self, client: Any, row: dict[str, Any], now: float) -> None:
        try:
            self._call(
                client.upsert,
                self._collection,
                [{"id": row["id"], "hits": int(row["hits"]) + 1, "last_used": now}],
                partial_update=True,
            )
        except CacheUnavailable as exc:  # bookkeeping only: the hit itself stands
            log.debug("response cache: could not record a hit: %s", exc)

    def _count(self, client: Any, where: str) -> int:
        rows = self._call(client.query, self._collection, filter=where, output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def _scan(self, client: Any, where: str, fields: list[str]) -> list[dict[str, Any]]:
        # One query window, not query_iterator: Milvus Lite cannot pin an iterator's snapshot
        # (pymilvus warns on every use); past QUERY_WINDOW rows the scan is a sample.
        return list(
            self._call(client.query, self._collection, filter=where, output_fields=fields, limit=QUERY_WINDOW)
        )

    def _purge_expired(self, client: Any, now: float) -> None:
        result = self._call(client.delete, self._collection, filter=f"expires_at <= {now!r}")
        expired = _deleted_count(result)
        if expired:
            with self._lock:
                self._expirations += expired

    def _make_room(self, client: Any, keep: int) -> None:
        """Evict by the eviction policy until at most `keep` rows remain."""
        excess = self._count(client, "") - keep
        if excess <= 0:
            return
        fields = ["id", "created_at", "last_used", "hits"]
        rows = sorted(self._scan(client, "", fields), key=_evict_order(self._tuning.eviction_policy))
        victims = [row["id"] for row in rows[:excess]]
        if victims:
            self._call(client.delete, self._collection, ids=victims)
            with self._lock:
                self._evictions += len(victims)
