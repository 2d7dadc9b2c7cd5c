"""A memory, its scope, and where memories are kept.

A memory belongs to exactly one scope: `user` (the caller's identity, `x-user-id` set by the
auth layer in front of the router, else the body's `user`) or `session` (`x-session-id`).
Every read and write names the scope, and a store answers only that scope's memories: the
scope is part of the key, never a filter applied afterwards, so one caller's memories
cannot reach another's request or listing.

`MemoryStoreUnavailable` is what every operation raises when the store did not answer
(Redis down or too slow): the routes answer 503, the plugin skips recall and writes.

A scope's `RecoveryMark` (context recovery, app/pipeline/memory/recovery.py) lives in the same
store: how many times the scope was invalidated and when last. A mark is never deleted (not
even with the scope's memories): its generation keys the scope's response-cache partition,
and going back to 0 would serve the answers cached before the first invalidation again.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

ScopeKind = Literal["user", "session"]
MAX_SCOPE_ID = 256
DEFAULT_MAX_MEMORIES = 200  # per scope, the oldest dropped first


class MemoryStoreUnavailable(RuntimeError):
    """The memory store did not answer (down, unreachable or slower than its timeout)."""


class MemoryScope(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ScopeKind
    id: str = Field(min_length=1, max_length=MAX_SCOPE_ID)

    def key(self) -> str:
        return f"{self.kind}:{self.id}"


class MemorySource(BaseModel):
    """The exchange a memory came from."""

    request_id: str | None = None
    replay_id: str | None = None
    decision: str | None = None


class Memory(BaseModel):
    id: str
    scope: MemoryScope
    text: str = Field(description='the fact, in the third person ("The user\'s name is Ada.")')
    category: str = Field(description="what the extractor recognised: name, preference, work, ...")
    created_at: str = Field(description="ISO 8601, UTC")
    last_used_at: str | None = Field(default=None, description="when a recall last injected it")
    use_count: int = 0
    source: MemorySource = Field(default_factory=MemorySource)
    vector: list[float] | None = Field(default=None, description="the fact's embedding (never served)")


class RecoveryMark(BaseModel):
    """A scope's context-recovery invalidations: generation 0 (no invalidated_at) until the first."""

    scope: MemoryScope
    generation: int = Field(default=0, ge=0, description="invalidations so far")
    invalidated_at: str | None = Field(default=None, description="the latest one, ISO 8601 UTC (now_stamp)")
    reason: str | None = None


def now_stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_memory_id() -> str:
    return f"mem_{uuid.uuid4().hex}"


class MemoryStore(Protocol):
    def describe(self) -> str: ...

    async def add(self, memory: Memory, max_memories: int) -> None:
        """Keep `memory` in its scope; past `max_memories` the scope's oldest go."""

    async def list_scope(self, scope: MemoryScope) -> list[Memory]:
        """The scope's memories, oldest first."""

    async def get(self, memory_id: str) -> Memory | None: ...

    async def delete(self, memory_id: str) -> Memory | None:
        """The deleted memory, None when there was none."""

    async def delete_scope(self, scope: MemoryScope) -> int:
        """How many memories the scope had (all deleted)."""

    async def touch(self, scope: MemoryScope, memory_ids: list[str], when: str) -> None:
        """Mark recalled memories used (last_used_at, use_count)."""

    async def mark(self, scope: MemoryScope) -> RecoveryMark:
        """The scope's recovery mark (generation 0 when never invalidated)."""

    async def invalidate(self, scope: MemoryScope, when: str, reason: str | None) -> RecoveryMark:
        """Advance the scope's generation by one, atomically; invalidated_at never goes back."""


class InMemoryMemoryStore:
    """One process's memories (the standalone app, a replica without a shared store, tests)."""

    def __init__(self) -> None:
        self._by_id: dict[str, Memory] = {}
        self._scopes: dict[str, OrderedDict[str, None]] = {}
        self._marks: dict[str, RecoveryMark] = {}
        self._lock = threading.Lock()  # never held across an await

    def describe(self) -> str:
        return "memory"

    def clear(self) -> None:
        with self._lock:
            self._by_id.clear()
            self._scopes.clear()
            self._marks.clear()

    async def add(self, memory: Memory, max_memories: int) -> None:
        with self._lock:
            ids = self._scopes.setdefault(memory.scope.key(), OrderedDict())
            self._by_id[memory.id] = memory.model_copy(deep=True)
            ids[memory.id] = None
            while len(ids) > max_memories:
                gone, _ = ids.popitem(last=False)
                self._by_id.pop(gone, None)

    async def list_scope(self, scope: MemoryScope) -> list[Memory]:
        # Records are replaced, never changed in place (add keeps a copy, touch a new one), so
        # they are shared with the reader as they are: a deep copy per recall cost ~1 ms a memory.
        ids = list(self._scopes.get(scope.key(), ()))
        return [self._by_id[i] for i in ids if i in self._by_id]

    async def get(self, memory_id: str) -> Memory | None:
        found = self._by_id.get(memory_id)
        return None if found is None else found.model_copy(deep=True)

    async def delete(self, memory_id: str) -> Memory | None:
        with self._lock:
            found = self._by_id.pop(memory_id, None)
            if found is not None:
                self._scopes.get(found.scope.key(), OrderedDict()).pop(memory_id, None)
        return found

    async def delete_scope(self, scope: MemoryScope) -> int:
        with self._lock:
            ids = self._scopes.pop(scope.key(), OrderedDict())
            for memory_id in ids:
                self._by_id.pop(memory_id, None)
        return len(ids)

    async def touch(self, scope: MemoryScope, memory_ids: list[str], when: str) -> None:
        with self._lock:
            for memory_id in memory_ids:
                found = self._by_id.get(memory_id)
                if found is not None and found.scope == scope:
                    self._by_id[memory_id] = found.model_copy(
                        update={"last_used_at": when, "use_count": found.use_count + 1}
                    )

    async def mark(self, scope: MemoryScope) -> RecoveryMark:
        return self._marks.get(scope.key()) or RecoveryMark(scope=scope)

    async def invalidate(self, scope: MemoryScope, when: str, reason: str | None) -> RecoveryMark:
        with self._lock:
            before = self._marks.get(scope.key()) or RecoveryMark(scope=scope)
            latest = max(when, before.invalidated_at or when)
            mark = RecoveryMark(
                scope=scope, generation=before.generation + 1, invalidated_at=latest, reason=reason
            )
            self._marks[scope.key()] = mark
        return mark
