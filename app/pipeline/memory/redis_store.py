"""Memories in Redis, under the management store's prefix P (every Ingress and Router
replica on every node reads the same memories):

    P mem:records             hash: memory id -> the memory's JSON
    P mem:scope:<kind>:<id>   sorted set: memory id -> when it was written (ms), one per scope
    P mem:recovery:<kind>:<id>  hash: the scope's RecoveryMark (generation, invalidated_at,
                              reason); never deleted, never expires

A scope's memories are found through its own sorted set only, so a listing or a recall
never reads another scope's ids. One Lua script stores a memory and trims its scope to the
cap; another deletes a scope with its records; a third advances a recovery mark. Every Redis error or timeout raises
`MemoryStoreUnavailable`; the calls run in a worker thread (the client is synchronous).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from app.pipeline.memory.store import Memory, MemoryScope, MemoryStoreUnavailable, RecoveryMark

if TYPE_CHECKING:
    import redis

# KEYS[1] scope set, KEYS[2] records; ARGV[1] id, ARGV[2] JSON, ARGV[3] score (ms), ARGV[4] cap.
# The score is kept above the scope's newest: two writes in one millisecond would otherwise
# order by their random ids, and "oldest first" (and the cap's victim) with them.
_ADD = """
local score = tonumber(ARGV[3])
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if newest[2] and tonumber(newest[2]) >= score then score = tonumber(newest[2]) + 1 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], score, ARGV[1])
local extra = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if extra > 0 then
  for _, gone in ipairs(redis.call('ZRANGE', KEYS[1], 0, extra - 1)) do redis.call('HDEL', KEYS[2], gone) end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, extra - 1)
end
return 1
"""

# KEYS[1] scope set, KEYS[2] records. Returns how many memories the scope had.
_DELETE_SCOPE = """
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, id in ipairs(ids) do redis.call('HDEL', KEYS[2], id) end
redis.call('DEL', KEYS[1])
return #ids
"""


# KEYS[1] the scope's mark; ARGV[1] when, ARGV[2] reason ("" none). One step, so concurrent
# invalidations each get their own generation; invalidated_at only moves forward (two
# management replicas' clocks may differ). Returns {generation, invalidated_at}.
_INVALIDATE = """
local generation = redis.call('HINCRBY', KEYS[1], 'generation', 1)
local before = redis.call('HGET', KEYS[1], 'invalidated_at')
local latest = ARGV[1]
if before and before > latest then latest = before end
redis.call('HSET', KEYS[1], 'invalidated_at', latest, 'reason', ARGV[2])
return {generation, latest}
"""


@contextlib.contextmanager
def _errors(what: str) -> Iterator[None]:
    import redis

    try:
        yield
    except (redis.RedisError, OSError) as exc:
        raise MemoryStoreUnavailable(f"memory store: {what} failed: {exc}") from exc


class RedisMemoryStore:
    def __init__(self, client: redis.Redis, prefix: str, where: str = "redis") -> None:
        self._client = client
        self._records = f"{prefix}mem:records"
        self._scope_prefix = f"{prefix}mem:scope:"
        self._mark_prefix = f"{prefix}mem:recovery:"
        self._where = where
        self._add = client.register_script(_ADD)
        self._delete_scope = client.register_script(_DELETE_SCOPE)
        self._invalidate = client.register_script(_INVALIDATE)

    def describe(self) -> str:
        return f"redis {self._where}"

    def _scope_key(self, scope: MemoryScope) -> str:
        return self._scope_prefix + scope.key()

    async def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        def run() -> Any:
            with _errors(what):
                return fn()

        return await asyncio.to_thread(run)

    async def add(self, memory: Memory, max_memories: int) -> None:
        keys = [self._scope_key(memory.scope), self._records]
        args: list[str | int] = [memory.id, memory.model_dump_json(), int(time.time() * 1000), max_memories]
        await self._call("add", lambda: self._add(keys=keys, args=args))

    async def list_scope(self, scope: MemoryScope) -> list[Memory]:
        def read() -> list[Any]:
            ids: list[Any] = list(self._client.zrange(self._scope_key(scope), 0, -1))
            return list(self._client.hmget(self._records, ids)) if ids else []

        values = await self._call("list", read)
        memories = [Memory.model_validate_json(v) for v in values if v is not None]
        return [m for m in memories if m.scope == scope]  # belt and braces: the key names the scope

    async def get(self, memory_id: str) -> Memory | None:
        raw = await self._call("get", lambda: self._client.hget(self._records, memory_id))
        return None if raw is None else Memory.model_validate_json(raw)

    async def delete(self, memory_id: str) -> Memory | None:
        found = await self.get(memory_id)
        if found is None:
            return None

        def remove() -> int:
            pipe = self._client.pipeline(transaction=True)
            pipe.hdel(self._records, memory_id)
            pipe.zrem(self._scope_key(found.scope), memory_id)
            deleted, _ = pipe.execute()
            return int(deleted)

        return found if await self._call("delete", remove) else None

    async def delete_scope(self, scope: MemoryScope) -> int:
        keys = [self._scope_key(scope), self._records]
        return int(await self._call("delete scope", lambda: self._delete_scope(keys=keys, args=[])))

    async def touch(self, scope: MemoryScope, memory_ids: list[str], when: str) -> None:
        if not memory_ids:
            return
        values = await self._call("touch", lambda: self._client.hmget(self._records, memory_ids))
        updates: dict[str, str] = {}
        for raw in values:
            if raw is None:
                continue
            memory = Memory.model_validate_json(raw)
            if memory.scope == scope:
                used = memory.model_copy(update={"last_used_at": when, "use_count": memory.use_count + 1})
                updates[memory.id] = used.model_dump_json()
        if updates:  # a concurrent delete may resurrect a record here: HSET only ids still in the scope
            scope_key = self._scope_key(scope)

            def write() -> None:
                kept = self._client.zmscore(scope_key, list(updates))
                live: dict[Any, Any] = {  # redis-py's mapping type is invariant in its keys
                    k: v for (k, v), score in zip(updates.items(), kept, strict=True) if score is not None
                }
                if live:
                    self._client.hset(self._records, mapping=live)

            await self._call("touch", write)

    async def mark(self, scope: MemoryScope) -> RecoveryMark:
        key = self._mark_prefix + scope.key()
        generation, when, reason = await self._call(
            "mark", lambda: self._client.hmget(key, ["generation", "invalidated_at", "reason"])
        )
        if generation is None:
            return RecoveryMark(scope=scope)
        return RecoveryMark(
            scope=scope, generation=int(generation), invalidated_at=_text(when), reason=_text(reason) or None
        )

    async def invalidate(self, scope: MemoryScope, when: str, reason: str | None) -> RecoveryMark:
        keys = [self._mark_prefix + scope.key()]
        generation, latest = await self._call(
            "invalidate", lambda: self._invalidate(keys=keys, args=[when, reason or ""])
        )
        return RecoveryMark(
            scope=scope, generation=int(generation), invalidated_at=_text(latest), reason=reason
        )


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
