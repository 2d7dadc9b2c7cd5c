"""The callers' side of the ResponseCache deployment (deployments/response_cache.py): the
Router's lookups and the front doors' writes go over its replica's same-node channel when it
is reachable (app/cache/lane.py), else over its handle."""

from __future__ import annotations

from typing import Any

import numpy as np
import ray
from ray.serve.handle import DeploymentHandle

from app.cache.base import CacheHit
from app.cache.channel import ChannelInfo
from app.cache.lane import CacheLane


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
        partition: str,
        vector: np.ndarray,
        response: dict[str, Any],
        ttl_seconds: int | None,
        epoch: int | None = None,
    ) -> bool:
        return bool(await cache.store.remote(partition, vector, response, ttl_seconds, epoch))

    async def epoch(partition: str) -> int:
        return int(await cache.epoch.remote(partition))

    return CacheLane(
        node_id=ray.get_runtime_context().get_node_id(),
        discover=discover,
        handle_lookup=lookup,
        handle_store=store,
        handle_epoch=epoch,
    )
