"""A caller's lane to the ResponseCache: the path each cache call takes, the same-node
channel (app/cache/channel.py) when there is one, else the DeploymentHandle.

`CacheLane` asks the cache replica where its channel is (`discover`, through the
DeploymentHandle), uses it when the replica runs on this node, and falls back to the handle
for any call the channel cannot carry (replica restarted, socket gone). After a failure the
channel is looked up again, at most every `retry_s` seconds, so a restarted replica's new
socket is found without a discovery call per request.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import numpy as np

from app.cache.base import CacheHit
from app.cache.channel import CacheChannelClient, ChannelError, ChannelInfo

log = logging.getLogger("svc_sr.cache.lane")
T = TypeVar("T")


Lookup = Callable[[str, np.ndarray, float], Awaitable[CacheHit | None]]
# (partition, vector, response, ttl_seconds[, epoch token]) -> whether the entry was written
Store = Callable[..., Awaitable[Any]]
EpochOf = Callable[[str], Awaitable[int]]


class CacheLane:
    """The lane from one caller to the ResponseCache: channel when reachable, handle otherwise."""

    def __init__(
        self,
        *,
        node_id: str,
        discover: Callable[[], Awaitable[ChannelInfo | None]],
        handle_lookup: Lookup,
        handle_store: Store,
        handle_epoch: EpochOf | None = None,
        retry_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self._discover = discover
        self._handle_lookup = handle_lookup
        self._handle_store = handle_store
        self._handle_epoch = handle_epoch
        self.retry_s = retry_s
        self._clock = clock
        self._client: CacheChannelClient | None = None
        self._next_discovery = 0.0
        self.channel_calls = 0
        self.handle_calls = 0

    async def lookup(self, partition: str, vector: np.ndarray, threshold: float) -> CacheHit | None:
        return await self._call(
            lambda client: client.lookup(partition, vector, threshold),
            lambda: self._handle_lookup(partition, vector, threshold),
        )

    async def store(
        self,
        partition: str,
        vector: np.ndarray,
        response: dict[str, Any],
        ttl_seconds: int | None,
        epoch: int | None = None,
    ) -> bool:
        return await self._call(
            lambda client: client.store(partition, vector, response, ttl_seconds, epoch),
            lambda: self._handle_store(
                partition, vector, response, ttl_seconds, *(() if epoch is None else (epoch,))
            ),
        )

    async def epoch(self, partition: str) -> int:
        """The partition's epoch token (app/cache/base.py), to hand to store(..., epoch=)."""
        handle_epoch = self._handle_epoch
        if handle_epoch is None:
            raise RuntimeError("this lane was built without an epoch call")
        return await self._call(lambda client: client.epoch(partition), lambda: handle_epoch(partition))

    async def _call(
        self,
        over_channel: Callable[[CacheChannelClient], Awaitable[T]],
        over_handle: Callable[[], Awaitable[T]],
    ) -> T:
        client = await self._channel()
        if client is not None:
            try:
                result = await over_channel(client)
                self.channel_calls += 1
                return result
            except ChannelError as exc:
                self._drop(client, exc)
        self.handle_calls += 1
        return await over_handle()

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def _channel(self) -> CacheChannelClient | None:
        if self._client is not None or self._clock() < self._next_discovery:
            return self._client
        self._next_discovery = self._clock() + self.retry_s  # one discovery at a time
        try:
            info = await self._discover()
        except Exception as exc:  # the replica may be starting or gone: the handle still works
            log.debug("cache channel discovery failed: %s", exc)
            return None
        if info is None or info.node_id != self.node_id or not os.path.exists(info.path):
            return None  # another node (or no channel): every call goes through the handle
        if self._client is None:  # a discovery slower than retry_s may have overlapped this one
            self._client = CacheChannelClient(info.path)
        return self._client

    def _drop(self, client: CacheChannelClient, exc: Exception) -> None:
        log.info("cache channel %s unusable (%s); using the handle", client.path, exc)
        client.close()
        if self._client is client:
            self._client = None
            self._next_discovery = self._clock() + self.retry_s
