"""Fire-and-forget asyncio tasks that are not lost: the event loop keeps only weak references
to tasks, so one nobody holds can be garbage-collected mid-flight. `spawn` holds each task
until it finishes; `drain` waits for all of them (shutdown, tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def __len__(self) -> int:
        return len(self._tasks)
