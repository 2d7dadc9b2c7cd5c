"""ExtProcBridge.drain waits for open exchanges, not only for completions already started: a
client can read a stream's [DONE] before Envoy hands the bridge the end of the body."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from app.extproc.bridge import ExtProcBridge


async def _held_open(release: asyncio.Event) -> AsyncIterator[Any]:
    await release.wait()
    return
    yield  # an async generator that sends nothing until released


async def test_drain_returns_only_after_every_open_exchange_has_closed() -> None:
    bridge = ExtProcBridge(router=object())  # type: ignore[arg-type]  # no request reaches it
    first, second = asyncio.Event(), asyncio.Event()

    async def exchange(release: asyncio.Event) -> None:
        async for _ in bridge.Process(_held_open(release), context=None):
            pass

    streams = [asyncio.create_task(exchange(first)), asyncio.create_task(exchange(second))]
    await asyncio.sleep(0.01)
    drained = asyncio.create_task(bridge.drain())
    await asyncio.sleep(0.05)
    assert not drained.done()
    first.set()
    await asyncio.sleep(0.05)
    assert not drained.done()  # one exchange is still open
    second.set()
    await asyncio.wait_for(drained, timeout=2)
    await asyncio.gather(*streams)


async def test_drain_with_nothing_open_returns_at_once() -> None:
    await asyncio.wait_for(ExtProcBridge(router=object()).drain(), timeout=1)  # type: ignore[arg-type]
