"""Where session-aware routing keeps each session's state (docs/routing-quality.md "Agent
traffic"): in the replica's memory, or in the management store's Redis so every Router replica
on every node sees the same session.

A session's state is one small JSON value under its key, written whole after each routed turn
and expiring `ttl_seconds` after the last one. Turns of one session arrive one after another,
so the last write wins and no compare-and-set is needed. Failures (Redis down, slower than its
timeout) raise `StoreUnavailable`, as every shared store here does: the caller routes per turn.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, Field

from app.state.shared_store import ManagementStoreSettings, redis_client, store_errors

if TYPE_CHECKING:
    import redis

MAX_MEMORY_SESSIONS = 100_000  # a replica's memory store forgets the least recently used beyond


class SessionState(BaseModel):
    """One session as the Router left it after its last turn."""

    model: str | None = None  # the model serving the session
    decision: str | None = None  # the decision of its last ask
    turns: int = Field(default=0, ge=0)
    tool_pending: bool = False  # the last turn answered a tool call (the loop was open)
    # the prompt tokens each model that served the session holds in its prefix cache (a provider
    # keeps one per model): what a switch back to it does not write again
    cached: dict[str, int] = Field(default_factory=dict)
    updated_at: float = 0.0


class SessionStore(Protocol):
    shared: bool  # every Router replica sees the same sessions

    async def get(self, key: str) -> SessionState | None: ...

    async def put(self, key: str, state: SessionState, ttl_seconds: int) -> None: ...


class MemorySessionStore:
    """One replica's sessions (a single node without Redis, `svc-sr benchmark`, tests)."""

    shared = False

    def __init__(self, capacity: int = MAX_MEMORY_SESSIONS) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[float, SessionState]] = OrderedDict()

    async def get(self, key: str) -> SessionState | None:
        item = self._items.get(key)
        if item is None:
            return None
        expires, state = item
        if expires < time.monotonic():
            del self._items[key]
            return None
        self._items.move_to_end(key)
        return state.model_copy()

    async def put(self, key: str, state: SessionState, ttl_seconds: int) -> None:
        self._items[key] = (time.monotonic() + ttl_seconds, state.model_copy())
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


class RedisSessionStore:
    """Sessions under `<prefix>session:<key>` in the management store's Redis."""

    shared = True

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = f"{prefix}session:"

    async def get(self, key: str) -> SessionState | None:
        raw = await asyncio.to_thread(self._get, key)
        return None if raw is None else SessionState.model_validate_json(raw)

    async def put(self, key: str, state: SessionState, ttl_seconds: int) -> None:
        await asyncio.to_thread(self._put, key, state.model_dump_json(), ttl_seconds)

    def _get(self, key: str) -> bytes | str | None:
        with store_errors("session read"):
            value: bytes | str | None = self.client.get(self.prefix + key)
        return value

    def _put(self, key: str, value: str, ttl_seconds: int) -> None:
        with store_errors("session write"):
            self.client.set(self.prefix + key, value, ex=ttl_seconds)


def session_store(settings: ManagementStoreSettings, app_name: str) -> SessionStore:
    """A Router replica's sessions: the management store's Redis when it is Redis (every replica
    on every node sees them), else this replica's memory (a file store is one node's, and a
    session turn must not wait on a disk lock)."""
    if settings.backend != "redis":
        return MemorySessionStore()
    return RedisSessionStore(redis_client(settings), settings.prefix_for(app_name))


__all__ = ["MemorySessionStore", "RedisSessionStore", "SessionState", "SessionStore", "session_store"]
