"""ResponseCache deployment: a thin Ray Serve host for a semantic cache backend.

The backend is the one `global.stores.response_cache.backend_type` names (app/cache/factory.py).
A store one process must own (`single_owner`: memory, Milvus Lite) gets ONE replica, without
surge (deployments/graph.py); Redis and a Milvus server are shared by any number of replicas.

Settings arrive as Serve user_config (the `response_cache` block, or `{"response_cache": ...}`):
a new backend when the store changes, else max_entries / ttl_seconds / eviction_policy applied
in place, entries kept. A new backend is opened before it serves (docs/configuration.md "One owner"):
Serve counts a replica ready, and an activation waits, until `reconfigure` returned, while the
previous backend serves; a store that does not answer the open degrades and reconnects later.

Callers on the same node reach the cache through a Unix-socket channel (app/cache/channel.py)
that `channel()` starts and reports; the methods below serve everyone else and every call the
channel cannot carry (deployments/cache_lane.py is the callers' side). count / clear / flush /
probe serve the management storage API (HandleCacheControl; probe tries a candidate store here,
where the stores are owned); epoch gives a partition's token for store(..., epoch=)
(app/cache/base.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.cache.base import CacheScope
from app.cache.calls import AsyncCache, runs_in_process
from app.cache.channel import CacheChannelServer, ChannelInfo
from app.cache.factory import backend_name, open_cache_store, probe_store, store_identity
from app.cache.memory import InMemorySemanticCache
from app.common.background import BackgroundTasks
from app.config.global_config import ResponseCacheConfig
from app.management.state import state_dir_of
from app.observability.metrics import MetricsRecorder
from app.runtime.threads import limit_blas_threads
from deployments.observability import replica_pusher
from deployments.rollout import SHUTDOWN_POLL_S, SURGE_PERCENT

log = logging.getLogger("svc_sr.response_cache")

RETIRE_AFTER_S = 60.0  # a replaced backend stays open this long for the calls already on it


@serve.deployment(
    max_ongoing_requests=256,
    ray_actor_options={"num_cpus": 0.25},
    max_surge_percent=SURGE_PERCENT,
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
class ResponseCache:
    # An in-process backend's calls run inline on the replica's loop (a lookup takes 0.04 ms at
    # 1k entries, less than a thread hop); a network store's run in a thread (app/cache/calls.py).

    def __init__(self, observability: DeploymentHandle | None = None, state_dir: str | None = None) -> None:
        limit_blas_threads()  # app/runtime/threads.py
        self._state_dir = state_dir  # GraphArgs.state_dir: where a Milvus Lite cache lives
        self._metrics = MetricsRecorder()
        self._cache = AsyncCache(InMemorySemanticCache(), on_unavailable=self._unavailable)
        self._store_settings: dict[str, Any] | None = None  # what built the backend (None: the default)
        self._pusher = replica_pusher(self._metrics, observability)
        self._channel: CacheChannelServer | None = None
        self._retired = BackgroundTasks()  # replaced backends, closed once their calls are done

    async def channel(self) -> dict[str, Any] | None:
        """Where same-node callers reach this replica's cache (ChannelInfo), started on the
        first ask so the server runs on the loop that runs this replica's methods.
        None when channels are off (SVC_SR_CACHE_CHANNEL=0)."""
        if os.environ.get("SVC_SR_CACHE_CHANNEL", "1") == "0":
            return None
        if self._channel is None:
            self._channel = await CacheChannelServer(self._cache, _socket_path(), self._record_size).start()
        return ChannelInfo(
            node_id=ray.get_runtime_context().get_node_id(), path=self._channel.path
        ).model_dump()

    def __del__(self) -> None:
        channel = getattr(self, "_channel", None)
        if channel is not None:
            with contextlib.suppress(OSError):
                os.unlink(channel.path)

    def _unavailable(self, operation: str, exc: Exception) -> None:
        """The shared store is down or slow: the request goes on without the cache."""
        self._metrics.inc("svc_router_cache_errors_total", operation=operation)
        log.warning("response cache %s skipped: %s", operation, exc)

    def _record_size(self) -> None:
        if runs_in_process(self._cache.backend):  # a shared store's size is not this replica's to count
            self._metrics.set("svc_router_cache_size", self._cache.backend.stats().entries)

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """The `response_cache` settings: a new backend when the store changes (backend_type or
        its connection), else the capacity knobs applied in place, entries kept."""
        raw = (user_config or {}).get("response_cache", user_config or {})
        settings = ResponseCacheConfig.model_validate(raw)
        identity = store_identity(settings)
        if identity == (self._store_settings or store_identity(ResponseCacheConfig())):
            await self._cache.configure(raw)  # a partial mapping keeps the knobs it does not name
            return
        backend = await asyncio.to_thread(open_cache_store, settings, self._store_dir())
        cache = AsyncCache(backend, on_unavailable=self._unavailable)
        down = await cache.open()  # bounded by the store's timeout_seconds
        retired, self._cache, self._store_settings = self._cache, cache, identity
        if self._channel is not None:
            self._channel.cache = self._cache
        self._retired.spawn(retired.close(after_s=RETIRE_AFTER_S))
        # A store that did not answer serves all the same: its calls degrade until it answers.
        (log.info if down is None else log.warning)(
            "response cache %s: %s", backend_name(backend), down or "open"
        )

    def _store_dir(self) -> Path:
        return Path(self._state_dir or state_dir_of(None, serve.get_replica_context().app_name))

    async def probe(self, settings: dict[str, Any]) -> None:
        """A candidate store probed in the process that owns this cache's stores (a Milvus Lite
        candidate opens here, beside the live one: app/cache/factory.py `probe_store`)."""
        await asyncio.to_thread(probe_store, ResponseCacheConfig.model_validate(settings), self._store_dir())

    async def lookup(self, partition: str, vector: np.ndarray | list[float], threshold: float) -> dict | None:
        """CacheHit.model_dump() of the best entry at or above threshold, else None."""
        hit = await self._cache.lookup(partition, vector, threshold)
        return None if hit is None else hit.model_dump()

    async def store(
        self,
        partition: str,
        vector: np.ndarray | list[float],
        response: dict[str, Any],
        ttl_seconds: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        stored = await self._cache.store(partition, vector, response, ttl_seconds, epoch)
        self._record_size()
        return stored

    async def epoch(self, partition: str) -> int:
        """The partition's epoch token, for store(..., epoch=) (app/cache/base.py)."""
        return await self._cache.epoch(partition)

    async def stats(self) -> dict[str, Any]:
        return {**(await self._cache.stats()).model_dump(), "backend": backend_name(self._cache.backend)}

    # Management (app/cache/admin.py): a scope crosses the handle as a dict.
    async def clear(self, partition: str | None = None, scope: dict[str, Any] | None = None) -> int:
        removed = await self._cache.clear(partition, _scope(scope))
        self._record_size()
        return removed

    async def count(self, scope: dict[str, Any] | None = None) -> int:
        return await self._cache.count(_scope(scope))

    async def flush(self, scope: dict[str, Any] | None = None) -> dict[str, Any]:
        outcome = await self._cache.flush(_scope(scope))
        self._record_size()
        return outcome.model_dump()


def _scope(scope: dict[str, Any] | None) -> CacheScope | None:
    return None if scope is None else CacheScope.model_validate(scope)


def _socket_path() -> str:
    """Short (AF_UNIX paths stop at 107 bytes) and unique per replica."""
    replica = serve.get_replica_context().replica_id.unique_id
    digest = hashlib.blake2s(f"{replica}:{os.getpid()}".encode(), digest_size=6).hexdigest()
    return os.path.join(tempfile.gettempdir(), f"svcsr-cache-{digest}.sock")
