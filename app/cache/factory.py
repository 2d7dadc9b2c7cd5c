"""Build the response-cache backend that `global.stores.response_cache.backend_type` names.

memory: in-process, one replica's state (an HNSW graph per partition with `use_hnsw`);
redis: RediSearch over hashes; milvus: a Milvus collection (Milvus Lite under the state
directory when neither uri nor host is configured); hybrid: a bounded in-memory tier
(`max_memory_entries`) over the store `hybrid_store` names. Network backends and faiss are imported only when
chosen, so a memory-only deployment never loads redis-py, pymilvus or faiss.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from app.cache.base import CacheTuning, ResponseCacheStore
from app.cache.memory import memory_cache
from app.config.global_config import ResponseCacheConfig

# Milvus Lite's data directory under the state directory (a directory despite the suffix).
MILVUS_LITE_DB = "response-cache.db"
PROBE_PARTITION = "__svc_sr_probe__"
# A Milvus uri with one of these schemes is a server; any other (a path ending in .db) is
# Milvus Lite, opened inside the calling process (pymilvus's own rule).
MILVUS_SERVER_SCHEMES = frozenset({"http", "https", "tcp", "grpc", "unix"})

_NAMES = {
    "InMemorySemanticCache": "memory",
    "RedisSemanticCache": "redis",
    "MilvusSemanticCache": "milvus",
    "HybridSemanticCache": "hybrid",
}


def open_cache_store(settings: ResponseCacheConfig, state_dir: Path | None = None) -> ResponseCacheStore:
    """A new backend for `settings`, tuned with its max_entries / ttl_seconds / eviction_policy.

    state_dir: where Milvus Lite keeps its data (`<state_dir>/response-cache.db`) when
    `milvus` names neither a uri nor a host (milvus and hybrid only; ValueError when
    neither is given). Network backends connect lazily: building one never blocks.
    """
    tuning = CacheTuning.from_settings(settings)
    kind = settings.backend_type
    if kind == "memory":
        return memory_cache(tuning, settings)
    store = _store(
        "redis" if kind == "redis" else "milvus" if kind == "milvus" else settings.hybrid_store,
        settings,
        tuning,
        state_dir,
    )
    if kind == "hybrid":
        from app.cache.hybrid import hybrid_cache

        return hybrid_cache(store, tuning, settings)
    return store


def _store(
    kind: str, settings: ResponseCacheConfig, tuning: CacheTuning, state_dir: Path | None
) -> ResponseCacheStore:
    """A shared store: Redis, or Milvus (Milvus Lite under `state_dir` without a uri)."""
    if kind == "redis":
        from app.cache.redis_store import RedisSemanticCache

        return RedisSemanticCache(settings.redis, tuning)
    from app.cache.milvus_store import MilvusSemanticCache

    lite_path = None if state_dir is None else str(Path(state_dir) / MILVUS_LITE_DB)
    return MilvusSemanticCache(settings.milvus, tuning, lite_path=lite_path)


def probe_store(settings: ResponseCacheConfig, state_dir: Path | None = None) -> None:
    """Store and look up a random vector in a throwaway partition of a new backend for
    `settings`, then clear that partition (only it: a shared store's live entries stay) and
    close it. Raises what the store raised (CacheUnavailable: it did not answer). Run where the
    cache's stores are owned (the ResponseCache replica): a Milvus Lite candidate opens there,
    beside the live store, never in a second process (docs/configuration.md "One owner")."""
    backend = open_cache_store(settings, state_dir)
    partition = f"{PROBE_PARTITION}|{uuid.uuid4().hex}"
    vector = np.random.default_rng().standard_normal(settings.milvus.collection.vector_field.dimension)
    try:
        backend.store(partition, vector, {"object": "chat.completion", "probe": True}, ttl_seconds=60)
        if backend.lookup(partition, vector, 0.99) is None:
            raise RuntimeError("the probe entry was stored but not found")
    finally:
        try:
            backend.clear(partition)
        finally:
            close = getattr(backend, "close", None)
            if callable(close):
                close()


def single_owner(settings: ResponseCacheConfig) -> str | None:
    """Why the backend `settings` build must live in one process (docs/configuration.md "One owner"),
    or None when any number of replicas can share it. memory: the entries are the process's
    own; Milvus Lite (milvus, or a hybrid's store of record, without a server): its data
    directory opens in one process at a time (a second opener finds it locked)."""
    kind = settings.backend_type
    if kind == "memory":
        return "the in-memory cache lives in its process"
    store = "milvus" if kind == "milvus" else settings.hybrid_store if kind == "hybrid" else kind
    if store == "milvus" and _milvus_lite(settings):
        return "Milvus Lite's data directory opens in one process"
    return None


def _milvus_lite(settings: ResponseCacheConfig) -> bool:
    uri = settings.milvus.uri
    if uri is None:
        return settings.milvus.host is None
    return urlparse(uri).scheme.lower() not in MILVUS_SERVER_SCHEMES


def backend_name(backend: Any) -> str:
    """The backend_type that built `backend` ("memory", "redis", ...), for logs and stats views."""
    return _NAMES.get(type(backend).__name__, type(backend).__name__)


def store_identity(settings: ResponseCacheConfig) -> dict[str, Any]:
    """What a backend is built from: everything but the knobs `configure()` applies live. A
    reload whose identity is unchanged keeps the backend (and its in-memory entries)."""
    live = {"enabled", "similarity_threshold", "max_entries", "ttl_seconds", "eviction_policy"}
    return {k: v for k, v in settings.model_dump(mode="json").items() if k not in live}
