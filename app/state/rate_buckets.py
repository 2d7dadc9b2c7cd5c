"""Token buckets for the data plane's rate limits: this process's memory, or the management
store's Redis (every Ingress replica on every node takes from the same buckets).

`take(buckets)` takes one token from every bucket named, or from none: when one is empty the
answer is how long until it holds a token again, and the others keep theirs. A bucket holds
at most `capacity` tokens and refills at `per_second`; a bucket never seen is full.

Redis: one hash per bucket, `P rl:<bucket>` {tokens, ms}, written by one Lua script on
Redis's own clock (replicas' clocks may disagree), expiring once it would be full again.
Every Redis error or timeout raises `StoreUnavailable` (the limiter then lets the request
through: app/api/rate_limit.py).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from app.state.shared_store import store_errors

if TYPE_CHECKING:
    import redis

# Buckets one process keeps before it forgets the full ones (a full bucket is one never seen).
MEMORY_BUCKETS = 10_000

# KEYS: the buckets; ARGV: capacity and refill per ms for each, in order.
# Returns {wait ms, index (1-based) of the bucket that is empty}; {0, 0}: taken from all.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local levels = {}
local wait, empty = 0, 0
for i, key in ipairs(KEYS) do
  local capacity, rate = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local stored = redis.call('HMGET', key, 'tokens', 'ms')
  local tokens, since = tonumber(stored[1]), tonumber(stored[2])
  if tokens == nil or since == nil then tokens, since = capacity, now end
  tokens = math.min(capacity, tokens + math.max(0, now - since) * rate)
  levels[i] = tokens
  if tokens < 1 then
    local need = math.ceil((1 - tokens) / rate)
    if need > wait then wait, empty = need, i end
  end
end
if empty > 0 then return {wait, empty} end
for i, key in ipairs(KEYS) do
  local capacity, rate = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  redis.call('HSET', key, 'tokens', tostring(levels[i] - 1), 'ms', now)
  redis.call('PEXPIRE', key, math.ceil(capacity / rate) + 1000)
end
return {0, 0}
"""


@dataclass(frozen=True)
class Bucket:
    name: str
    capacity: int
    per_second: float


@dataclass(frozen=True)
class Taken:
    """`wait_s` 0: a token was taken from every bucket; else `empty` names the empty bucket."""

    wait_s: float = 0.0
    empty: Bucket | None = None

    @property
    def allowed(self) -> bool:
        return self.empty is None


class BucketStore(Protocol):
    def describe(self) -> str: ...

    async def take(self, buckets: Sequence[Bucket]) -> Taken: ...


class MemoryBuckets:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._levels: dict[str, tuple[float, float]] = {}  # name -> (tokens, when)
        self._lock = threading.Lock()

    def describe(self) -> str:
        return "memory"

    async def take(self, buckets: Sequence[Bucket]) -> Taken:
        now = self._clock()
        with self._lock:
            levels = [self._level(bucket, now) for bucket in buckets]
            short = [
                (math.ceil((1 - lvl) / b.per_second * 1000) / 1000, b)
                for b, lvl in zip(buckets, levels, strict=True)
                if lvl < 1
            ]
            if short:
                wait, empty = max(short, key=lambda pair: pair[0])
                return Taken(wait, empty)
            if len(self._levels) > MEMORY_BUCKETS:
                self._forget_full(now)
            for bucket, level in zip(buckets, levels, strict=True):
                self._levels[bucket.name] = (level - 1, now)
        return Taken()

    def _level(self, bucket: Bucket, now: float) -> float:
        tokens, since = self._levels.get(bucket.name, (float(bucket.capacity), now))
        return min(float(bucket.capacity), tokens + max(0.0, now - since) * bucket.per_second)

    def _forget_full(self, now: float) -> None:
        # A bucket idle long enough to be full again is the same as one never seen. The
        # capacity is not stored: an hour idle is taken as full (no rate is under 1/min).
        for name, (_, since) in list(self._levels.items()):
            if now - since > 3600:
                del self._levels[name]


class RedisBuckets:
    def __init__(self, client: redis.Redis, prefix: str, where: str = "redis") -> None:
        self._prefix = f"{prefix}rl:"
        self._where = where
        self._take = client.register_script(_TAKE)

    def describe(self) -> str:
        return f"redis {self._where}"

    async def take(self, buckets: Sequence[Bucket]) -> Taken:
        keys = [self._prefix + b.name for b in buckets]
        args: list[float] = []
        for b in buckets:
            args += [b.capacity, b.per_second / 1000]

        def run() -> list[int]:
            with store_errors("rate limit"):
                return list(self._take(keys=keys, args=args))

        wait_ms, empty = await asyncio.to_thread(run)
        if int(empty) == 0:
            return Taken()
        return Taken(int(wait_ms) / 1000, buckets[int(empty) - 1])
