"""The ResponseCache's same-node channel (app/cache/channel.py) and the lane that picks it
or the handle (app/cache/lane.py), over real Unix sockets and the in-memory backend."""

from __future__ import annotations

import asyncio
import os
import stat
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.cache import CacheHit, InMemorySemanticCache
from app.cache.base import CacheScope
from app.cache.channel import CacheChannelClient, CacheChannelServer, ChannelError, ChannelInfo
from app.cache.lane import CacheLane

DIM = 384
ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}}],
}


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture
def socket_path(tmp_path: Path) -> str:
    return str(tmp_path / "cache.sock")


@pytest.fixture
async def server(socket_path: str) -> AsyncIterator[CacheChannelServer]:
    stores: list[int] = []
    channel = await CacheChannelServer(InMemorySemanticCache(), socket_path, lambda: stores.append(1)).start()
    channel.stores = stores  # type: ignore[attr-defined]
    yield channel
    await channel.close()


async def test_store_then_lookup_over_the_socket(server: CacheChannelServer, socket_path: str) -> None:
    client = CacheChannelClient(socket_path)
    await client.store("m|math", unit(1), ANSWER, 60)
    hit = await client.lookup("m|math", unit(1), 0.95)
    assert isinstance(hit, CacheHit) and hit.response == ANSWER and hit.similarity > 0.99
    assert await client.lookup("m|math", unit(2), 0.95) is None  # a different question
    assert await client.lookup("m|code", unit(1), 0.95) is None  # partitions never cross
    assert server.cache.backend.stats().entries == 1 and server.stores == [1]  # type: ignore[attr-defined]
    client.close()


async def test_epoch_op_reads_the_token_that_guards_a_write(
    server: CacheChannelServer, socket_path: str
) -> None:
    client = CacheChannelClient(socket_path)
    token = await client.epoch("m|math|ctx:ab")
    assert token == 0  # never flushed
    server.cache.backend.flush(CacheScope(model="m"))  # covers every partition of model m
    assert await client.epoch("m|math|ctx:ab") == token + 1
    assert await client.epoch("other|math") == 0  # another model's scope was not flushed
    assert await client.store("m|math|ctx:ab", unit(1), ANSWER, None, epoch=token) is False  # stale
    assert await client.lookup("m|math|ctx:ab", unit(1), 0.9) is None
    assert await client.store("m|math|ctx:ab", unit(1), ANSWER, None, epoch=token + 1) is True
    assert await client.lookup("m|math|ctx:ab", unit(1), 0.9) is not None
    with pytest.raises(ValueError):  # a bad partition is refused, not a dropped connection
        await client.epoch("")
    assert await client.epoch("m|math") == token + 1  # the connection still works
    client.close()


async def test_socket_is_private_to_the_user(server: CacheChannelServer, socket_path: str) -> None:
    assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600


async def test_concurrent_calls_use_pooled_connections(server: CacheChannelServer, socket_path: str) -> None:
    client = CacheChannelClient(socket_path, max_idle=4)
    await asyncio.gather(
        *(client.store(f"m|{i}", unit(i), {**ANSWER, "id": str(i)}, None) for i in range(20))
    )
    hits = await asyncio.gather(*(client.lookup(f"m|{i}", unit(i), 0.99) for i in range(20)))
    assert [h.response["id"] for h in hits if h is not None] == [str(i) for i in range(20)]
    assert len(client._idle) <= 4  # the rest were closed, not leaked
    client.close()


async def test_refused_values_are_the_callers_error(server: CacheChannelServer, socket_path: str) -> None:
    client = CacheChannelClient(socket_path)
    await client.store("m|math", unit(1), ANSWER, None)
    with pytest.raises(ValueError):
        await client.store("m|math", np.ones(3, np.float32), ANSWER, None)  # wrong dimension
    with pytest.raises(ValueError):
        await client.store("m|math", unit(2), ANSWER, -5)  # negative ttl
    assert await client.lookup("m|math", unit(1), 0.9) is not None  # the connection still works
    client.close()


async def test_a_malformed_frame_is_answered_not_dropped(
    server: CacheChannelServer, socket_path: str
) -> None:
    reader, writer = await asyncio.open_unix_connection(socket_path)
    for payload in (b"not json", b'{"op": "drop_table"}'):
        writer.write(struct.pack(">I", len(payload)) + payload)
        await writer.drain()
        (size,) = struct.unpack(">I", await reader.readexactly(4))
        reply = await reader.readexactly(size)
        assert b'"ok":false' in reply and b"bad call" in reply
    writer.close()


async def test_an_oversized_frame_closes_that_connection_only(
    server: CacheChannelServer, socket_path: str
) -> None:
    reader, writer = await asyncio.open_unix_connection(socket_path)
    writer.write(struct.pack(">I", 2**31))
    await writer.drain()
    assert await reader.read() == b""  # closed by the server
    writer.close()
    client = CacheChannelClient(socket_path)
    assert await client.lookup("m|math", unit(1), 0.9) is None
    client.close()


async def test_a_missing_socket_is_a_channel_error(tmp_path: Path) -> None:
    with pytest.raises(ChannelError):
        await CacheChannelClient(str(tmp_path / "absent.sock")).ping()


class Handle:
    """Stands in for the DeploymentHandle path: the same backend, counted calls."""

    def __init__(self, backend: InMemorySemanticCache) -> None:
        self.backend = backend
        self.calls = 0

    async def lookup(self, partition: str, vector: np.ndarray, threshold: float) -> CacheHit | None:
        self.calls += 1
        return self.backend.lookup(partition, vector, threshold)

    async def store(
        self,
        partition: str,
        vector: np.ndarray,
        response: dict[str, Any],
        ttl: int | None,
        epoch: int | None = None,
    ) -> bool:
        self.calls += 1
        return self.backend.store(partition, vector, response, ttl, epoch)

    async def epoch(self, partition: str) -> int:
        self.calls += 1
        return self.backend.epoch(partition)


def lane_for(handle: Handle, info: ChannelInfo | None, node: str = "node-a", **kwargs: Any) -> CacheLane:
    async def discover() -> ChannelInfo | None:
        return info

    return CacheLane(
        node_id=node,
        discover=discover,
        handle_lookup=handle.lookup,
        handle_store=handle.store,
        handle_epoch=handle.epoch,
        **kwargs,
    )


async def test_lane_uses_the_channel_on_the_same_node(server: CacheChannelServer, socket_path: str) -> None:
    handle = Handle(server.cache.backend)  # type: ignore[arg-type]
    lane = lane_for(handle, ChannelInfo(node_id="node-a", path=socket_path))
    await lane.store("m|math", unit(1), ANSWER, None)
    assert (await lane.lookup("m|math", unit(1), 0.9)) is not None
    assert (lane.channel_calls, handle.calls) == (2, 0) and lane.connected


async def test_lane_uses_the_handle_for_a_replica_on_another_node(
    server: CacheChannelServer, socket_path: str
) -> None:
    handle = Handle(server.cache.backend)  # type: ignore[arg-type]
    lane = lane_for(handle, ChannelInfo(node_id="node-b", path=socket_path))
    await lane.store("m|math", unit(1), ANSWER, None)
    assert (await lane.lookup("m|math", unit(1), 0.9)) is not None
    assert (lane.channel_calls, handle.calls) == (0, 2) and not lane.connected


async def test_lane_falls_back_to_the_handle_when_the_channel_dies(socket_path: str) -> None:
    backend = InMemorySemanticCache()
    handle = Handle(backend)
    now = [0.0]
    lane = lane_for(
        handle, ChannelInfo(node_id="node-a", path=socket_path), retry_s=5.0, clock=lambda: now[0]
    )
    server = await CacheChannelServer(backend, socket_path).start()
    await lane.store("m|math", unit(1), ANSWER, None)
    await server.close()  # the replica restarted: its socket is gone
    assert (await lane.lookup("m|math", unit(1), 0.9)) is not None  # answered through the handle
    assert (lane.channel_calls, handle.calls) == (1, 1) and not lane.connected
    server = await CacheChannelServer(backend, socket_path).start()  # the new replica's channel
    await lane.lookup("m|math", unit(1), 0.9)
    assert handle.calls == 2  # no rediscovery before retry_s
    now[0] = 6.0
    await lane.lookup("m|math", unit(1), 0.9)
    assert (lane.channel_calls, handle.calls) == (2, 2) and lane.connected
    await server.close()


async def test_lane_without_a_channel_or_with_a_failing_discovery_uses_the_handle() -> None:
    backend = InMemorySemanticCache()
    handle = Handle(backend)
    assert await lane_for(handle, None).lookup("m|math", unit(1), 0.9) is None

    async def broken() -> ChannelInfo | None:
        raise RuntimeError("replica starting")

    lane = CacheLane(
        node_id="node-a", discover=broken, handle_lookup=handle.lookup, handle_store=handle.store
    )
    await lane.store("m|math", unit(1), ANSWER, None)
    assert handle.calls == 2 and backend.stats().entries == 1


async def test_lane_reads_the_epoch_over_the_channel_else_the_handle(
    server: CacheChannelServer, socket_path: str
) -> None:
    handle = Handle(server.cache.backend)  # type: ignore[arg-type]
    server.cache.backend.flush(CacheScope(model="m", decision="math"))
    same_node = lane_for(handle, ChannelInfo(node_id="node-a", path=socket_path))
    other_node = lane_for(handle, ChannelInfo(node_id="node-b", path=socket_path))
    assert await same_node.epoch("m|math") == await other_node.epoch("m|math") == 1
    assert (same_node.channel_calls, other_node.handle_calls, handle.calls) == (1, 1, 1)
    assert await other_node.store("m|math", unit(1), ANSWER, None, epoch=0) is False  # stale via the handle
    assert await same_node.store("m|math", unit(1), ANSWER, None, epoch=1) is True
