"""ResponseCache deployment: a thin Ray Serve host for a semantic cache backend.

The in-memory backend keeps its state inside the replica, so this deployment runs ONE
replica (the default). Scaling it out would give each replica its own partial cache;
that needs a shared backend (Redis / Milvus, a later issue) behind the same methods.

Settings arrive as Serve user_config, either the global `response_cache` block itself or
`{"response_cache": {...}}`; `reconfigure` applies max_entries / ttl_seconds /
eviction_policy in place, keeping entries unless the new bound is smaller.

Callers on the same node reach the cache through a Unix-socket channel
(app/cache/channel.py) that `channel()` starts and reports; the methods below serve
everyone else and every call the channel cannot carry. Both act on the one backend.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from typing import Any

import numpy as np
import ray
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.cache.base import CacheHit, ResponseCacheBackend
from app.cache.channel import CacheChannelServer, ChannelInfo
from app.cache.lane import CacheLane
from app.cache.memory import InMemorySemanticCache
from app.observability.metrics import MetricsRecorder
from deployments.observability import replica_pusher


@serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 0.25})
class ResponseCache:
    # Calls run inline on the replica's loop: the replica serves nothing but this cache, whose
    # lock serialises calls anyway, and a lookup (0.04 ms at 1k entries, ~0.2-1 ms at 10k)
    # costs less than a thread hop.

    def __init__(self, observability: DeploymentHandle | None = None) -> None:
        self._backend: ResponseCacheBackend = InMemorySemanticCache()
        self._metrics = MetricsRecorder()
        self._pusher = replica_pusher(self._metrics, observability)
        self._channel: CacheChannelServer | None = None

    async def channel(self) -> dict[str, Any] | None:
        """Where same-node callers reach this replica's cache (ChannelInfo), started on the
        first ask so the server runs on the loop that runs this replica's methods.
        None when channels are off (SVC_SR_CACHE_CHANNEL=0)."""
        if os.environ.get("SVC_SR_CACHE_CHANNEL", "1") == "0":
            return None
        if self._channel is None:
            self._channel = await CacheChannelServer(self._backend, _socket_path(), self._record_size).start()
        return ChannelInfo(
            node_id=ray.get_runtime_context().get_node_id(), path=self._channel.path
        ).model_dump()

    def __del__(self) -> None:
        channel = getattr(self, "_channel", None)
        if channel is not None:
            with contextlib.suppress(OSError):
                os.unlink(channel.path)

    def _record_size(self) -> None:
        self._metrics.set("svc_router_cache_size", self._backend.stats().entries)

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        settings = (user_config or {}).get("response_cache", user_config or {})
        self._backend.configure(settings)

    async def lookup(self, partition: str, vector: np.ndarray | list[float], threshold: float) -> dict | None:
        """CacheHit.model_dump() of the best entry at or above threshold, else None."""
        hit = self._backend.lookup(partition, vector, threshold)
        return None if hit is None else hit.model_dump()

    async def store(
        self,
        partition: str,
        vector: np.ndarray | list[float],
        response: dict[str, Any],
        ttl_seconds: int | None = None,
    ) -> None:
        self._backend.store(partition, vector, response, ttl_seconds)
        self._record_size()

    async def stats(self) -> dict[str, Any]:
        return self._backend.stats().model_dump()

    async def clear(self, partition: str | None = None) -> int:
        removed = self._backend.clear(partition)
        self._record_size()
        return removed


def _socket_path() -> str:
    """Short (AF_UNIX paths stop at 107 bytes) and unique per replica."""
    replica = serve.get_replica_context().replica_id.unique_id
    digest = hashlib.blake2s(f"{replica}:{os.getpid()}".encode(), digest_size=6).hexdigest()
    return os.path.join(tempfile.gettempdir(), f"svcsr-cache-{digest}.sock")


def cache_lane(cache: DeploymentHandle) -> CacheLane:
    """Calls to the ResponseCache over its replica's same-node channel, else its handle (the
    Router's lookups, the front doors' writes)."""

    async def discover() -> ChannelInfo | None:
        info = await cache.channel.remote()
        return None if info is None else ChannelInfo.model_validate(info)

    async def lookup(partition: str, vector: np.ndarray, threshold: float) -> CacheHit | None:
        hit = await cache.lookup.remote(partition, vector, threshold)
        return None if hit is None else CacheHit.model_validate(hit)

    async def store(
        partition: str, vector: np.ndarray, response: dict[str, Any], ttl_seconds: int | None
    ) -> None:
        await cache.store.remote(partition, vector, response, ttl_seconds)

    return CacheLane(
        node_id=ray.get_runtime_context().get_node_id(),
        discover=discover,
        handle_lookup=lookup,
        handle_store=store,
    )
