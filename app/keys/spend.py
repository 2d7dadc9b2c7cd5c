"""Spend per key and per team of keys, per calendar period (UTC), in the store.

`reserve(counters, amount)` adds `amount` to every counter, or to none when one has already
reached its limit (the answer names it): one atomic step, so replicas racing for the last
dollars of a budget cannot all pass. A front door reserves a request's estimated cost before
the upstream call and `settle`s the difference once the real cost is known; the overspend of a
budget is then at most the one request that was admitted under its limit (plus any request
whose real cost exceeded its estimate).

- `MemorySpend`: this process's own counters (no shared store: each process limits on its own).
- `RedisSpend`: `<prefix>spend:<period>:<owner>` floats, one Lua script per reservation (on
  Redis's own clock for nothing: periods are named by the caller), expiring a day after the
  period ends. Every Redis error raises `StoreUnavailable`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from app.config.global_config import Budget
from app.state.shared_store import store_errors

if TYPE_CHECKING:
    import redis

EXPIRE_AFTER_S = 86_400

# KEYS: the counters; ARGV: the amount, each counter's limit, then each counter's expiry (unix s).
# Returns {index (1-based) of a counter at its limit or 0, that counter's spend}.
_RESERVE = """
local n = #KEYS
for i, key in ipairs(KEYS) do
  local spent = tonumber(redis.call('GET', key) or '0')
  if spent >= tonumber(ARGV[1 + i]) then return {i, tostring(spent)} end
end
for i, key in ipairs(KEYS) do
  redis.call('INCRBYFLOAT', key, ARGV[1])
  redis.call('EXPIREAT', key, ARGV[1 + n + i])
end
return {0, '0'}
"""


@dataclass(frozen=True)
class Period:
    name: str  # "day:2026-11-29", "week:2026-11-23", "month:2026-11"
    start: datetime
    end: datetime


def period_of(kind: str, now: datetime) -> Period:
    """The calendar period (UTC) holding `now`."""
    day = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if kind == "day":
        return Period(f"day:{day:%Y-%m-%d}", day, day + timedelta(days=1))
    if kind == "week":
        start = day - timedelta(days=day.weekday())
        return Period(f"week:{start:%Y-%m-%d}", start, start + timedelta(days=7))
    start = day.replace(day=1)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return Period(f"month:{start:%Y-%m}", start, end)


@dataclass(frozen=True)
class Counter:
    """One budget's counter in its current period: `owner` is `key:<id>` or `team:<name>`."""

    owner: str
    budget: Budget
    period: Period

    @property
    def name(self) -> str:
        return f"spend:{self.period.name}:{self.owner}"


def counter(owner: str, budget: Budget, now: datetime) -> Counter:
    return Counter(owner, budget, period_of(budget.period, now))


@dataclass(frozen=True)
class Reserved:
    """`full` None: `amount` was added to every counter; else the counter at its limit."""

    full: Counter | None = None
    spent: float = 0.0


class SpendStore(Protocol):
    def describe(self) -> str: ...

    async def spent(self, counters: Sequence[Counter]) -> list[float]: ...

    async def reserve(self, counters: Sequence[Counter], amount: float) -> Reserved: ...

    async def settle(self, counters: Sequence[Counter], delta: float) -> None: ...


class MemorySpend:
    def __init__(self) -> None:
        self._spent: dict[str, float] = {}
        self._lock = threading.Lock()

    def describe(self) -> str:
        return "memory"

    async def spent(self, counters: Sequence[Counter]) -> list[float]:
        with self._lock:
            return [self._spent.get(c.name, 0.0) for c in counters]

    async def reserve(self, counters: Sequence[Counter], amount: float) -> Reserved:
        with self._lock:
            for c in counters:
                spent = self._spent.get(c.name, 0.0)
                if spent >= c.budget.usd:
                    return Reserved(c, spent)
            for c in counters:
                self._spent[c.name] = self._spent.get(c.name, 0.0) + amount
        return Reserved()

    async def settle(self, counters: Sequence[Counter], delta: float) -> None:
        with self._lock:
            for c in counters:
                self._spent[c.name] = self._spent.get(c.name, 0.0) + delta


class RedisSpend:
    def __init__(self, client: redis.Redis, prefix: str, where: str = "redis") -> None:
        self._client = client
        self._prefix = prefix
        self._where = where
        self._reserve = client.register_script(_RESERVE)

    def describe(self) -> str:
        return f"redis {self._where}"

    def _keys(self, counters: Sequence[Counter]) -> list[str]:
        return [self._prefix + c.name for c in counters]

    async def spent(self, counters: Sequence[Counter]) -> list[float]:
        def run() -> list[float]:
            with store_errors("spend read"):
                values = self._client.mget(self._keys(counters))
            return [float(v) if v is not None else 0.0 for v in values]

        return await asyncio.to_thread(run)

    async def reserve(self, counters: Sequence[Counter], amount: float) -> Reserved:
        args: list[float | int] = [amount]
        args += [c.budget.usd for c in counters]
        args += [int(c.period.end.timestamp()) + EXPIRE_AFTER_S for c in counters]

        def run() -> list[bytes | int]:
            with store_errors("spend reservation"):
                return list(self._reserve(keys=self._keys(counters), args=args))

        index, spent = await asyncio.to_thread(run)
        if int(index) == 0:
            return Reserved()
        return Reserved(counters[int(index) - 1], float(spent))

    async def settle(self, counters: Sequence[Counter], delta: float) -> None:
        def run() -> None:
            with store_errors("spend settlement"):
                pipe = self._client.pipeline(transaction=False)
                for key in self._keys(counters):
                    pipe.incrbyfloat(key, delta)
                pipe.execute()

        await asyncio.to_thread(run)
