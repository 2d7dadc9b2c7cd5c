"""Where the Responses API store keeps its records: this process's memory, or the management
store's Redis (every Ingress replica on every node reads the same responses).

Both backends keep each record for `ttl_seconds` and at most `max_responses` records, the
oldest dropped first; the data plane passes both on every write, from the live
configuration (`global.services.response_api`). Records are kept as JSON, so a reader never
shares an object with a writer.

Redis keys under the management store's prefix P:

    P resp:<id>      the record's JSON, with the TTL as its expiry
    P resp:order     sorted set: id -> when it was written (ms), for the size cap

One Lua script writes the record and trims the order set (expired ids, then the oldest past
the cap, deleting their records), so the cap holds across replicas. Every Redis error or
timeout raises `StoreUnavailable` (the data plane degrades: app/api/responses_store.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from app.exchange.responses.stored import StoredResponse
from app.state.shared_store import store_errors

if TYPE_CHECKING:
    import redis

# KEYS[1] record, KEYS[2] order; ARGV[1] JSON, ARGV[2] ttl (s), ARGV[3] max records, ARGV[4] id,
# ARGV[5] the record's key prefix (P resp:).
_PUT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl)
redis.call('ZADD', KEYS[2], now, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl * 1000)
local extra = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if extra > 0 then
  for _, gone in ipairs(redis.call('ZRANGE', KEYS[2], 0, extra - 1)) do redis.call('DEL', ARGV[5] .. gone) end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, extra - 1)
end
redis.call('PEXPIRE', KEYS[2], ttl * 1000)
return 1
"""


class ResponseRecordStore(Protocol):
    def describe(self) -> str: ...

    async def put(self, record: StoredResponse, ttl_s: int, max_items: int) -> None: ...

    async def get(self, response_id: str) -> StoredResponse | None: ...

    async def delete(self, response_id: str) -> bool: ...


class MemoryResponseRecordStore:
    """One process's records (an Ingress replica without a shared store; tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, str]] = OrderedDict()  # id -> (expires at, JSON)
        self._lock = threading.Lock()

    def describe(self) -> str:
        return "memory"

    async def put(self, record: StoredResponse, ttl_s: int, max_items: int) -> None:
        now = self._clock()
        with self._lock:
            self._items.pop(record.id, None)
            self._items[record.id] = (now + ttl_s, record.model_dump_json())
            for gone in [k for k, (expires, _) in self._items.items() if expires <= now]:
                del self._items[gone]
            while len(self._items) > max_items:
                self._items.popitem(last=False)

    async def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            item = self._items.get(response_id)
            if item is None:
                return None
            if item[0] <= self._clock():
                del self._items[response_id]
                return None
        return StoredResponse.model_validate_json(item[1])

    async def delete(self, response_id: str) -> bool:
        found = await self.get(response_id)
        with self._lock:
            self._items.pop(response_id, None)
        return found is not None


class RedisResponseRecordStore:
    """The records in Redis under the management store's prefix (see the module doc)."""

    def __init__(self, client: redis.Redis, prefix: str, where: str = "redis") -> None:
        self._client = client
        self._prefix = f"{prefix}resp:"
        self._order = f"{prefix}resp:order"
        self._where = where
        self._put = client.register_script(_PUT)

    def describe(self) -> str:
        return f"redis {self._where}"

    async def put(self, record: StoredResponse, ttl_s: int, max_items: int) -> None:
        data = record.model_dump_json()
        keys = [self._prefix + record.id, self._order]
        args: list[str | int] = [data, ttl_s, max_items, record.id, self._prefix]
        await asyncio.to_thread(self._call, "put", lambda: self._put(keys=keys, args=args))

    async def get(self, response_id: str) -> StoredResponse | None:
        raw = await asyncio.to_thread(self._call, "get", lambda: self._client.get(self._prefix + response_id))
        if not isinstance(raw, str | bytes):
            return None
        return StoredResponse.model_validate_json(raw)

    async def delete(self, response_id: str) -> bool:
        def remove() -> int:
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self._prefix + response_id)
            pipe.zrem(self._order, response_id)
            deleted, _ = pipe.execute()
            return int(deleted)

        return bool(await asyncio.to_thread(self._call, "delete", remove))

    def _call(self, what: str, fn: Callable[[], object]) -> object:
        with store_errors(f"responses {what}"):
            return fn()
