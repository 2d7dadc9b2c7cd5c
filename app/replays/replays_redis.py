"""Replay records and outcome submissions in Redis, shared by every Ingress replica.

`RedisReplayStore` has `replays.ReplayStore`'s interface and semantics; keys under the
management store's prefix P:

    P replay:sequence   counter: the last sequence given
    P replay:order      sorted set: replay id -> sequence, the newest `capacity` kept
    P replay:records    hash: replay id -> the record's JSON (without `id` and `sequence`,
                        which the order set holds)

One Lua script takes the sequence, stores the record and trims both keys, so the ring and
the id lookup never disagree and concurrent replicas get distinct, ordered sequences. Pages
and aggregates read the order set by sequence in chunks and filter and total with the same
functions as the in-memory store.

`RedisOutcomeStore` has `replays.OutcomeStore`'s interface (`OutcomeLog`):

    P outcomes           list of outcome records (JSON), the newest `capacity` kept
    P outcome:keys       hash: Idempotency-Key -> {fingerprint, first record}
    P outcome:key-order  list of those keys, oldest first, `capacity` kept

One Lua script checks the key, remembers it and appends the outcome, so two replicas given
the same key at once store one outcome: the second answers the first's record (same body)
or raises `IdempotencyConflict` (another body).

Every Redis error or timeout raises `StoreUnavailable` (`shared_store.store_errors`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import redis
from pydantic import BaseModel

from app.replays.replays import (
    DEFAULT_REPLAY_CAPACITY,
    IdempotencyConflict,
    OutcomeIn,
    OutcomeRecord,
    ReplayAggregate,
    ReplayPage,
    ReplayStore,
    aggregate_records,
    new_outcome_record,
    outcome_fingerprint,
    record_matches,
    replay_item,
    replay_page,
)
from app.state.shared_store import ManagementStoreSettings, redis_client, store_errors

# Records read per round trip by filtered pages and aggregates.
READ_CHUNK = 1000

# KEYS[1] sequence, KEYS[2] order, KEYS[3] records; ARGV[1] id, ARGV[2] record JSON, ARGV[3] capacity.
# Returns the record's sequence, or 0 when a kept record has that id (nothing written).
_RECORD = """
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
local sequence = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], sequence, ARGV[1])
local extra = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if extra > 0 then
  for _, gone in ipairs(redis.call('ZRANGE', KEYS[2], 0, extra - 1)) do redis.call('HDEL', KEYS[3], gone) end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, extra - 1)
end
return sequence
"""

# KEYS[1] outcomes, KEYS[2] keys, KEYS[3] key order; ARGV[1] outcome JSON, ARGV[2] capacity,
# ARGV[3] Idempotency-Key and ARGV[4] its {fingerprint, record} JSON (both absent without a key).
# Returns the key's earlier {fingerprint, record} (nothing written), or nil once stored.
_SUBMIT = """
local capacity = tonumber(ARGV[2])
if ARGV[3] then
  local seen = redis.call('HGET', KEYS[2], ARGV[3])
  if seen then return seen end
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
  redis.call('RPUSH', KEYS[3], ARGV[3])
  while redis.call('LLEN', KEYS[3]) > capacity do
    redis.call('HDEL', KEYS[2], redis.call('LPOP', KEYS[3]))
  end
end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -capacity, -1)
return false
"""


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


def _by_sequence(pairs: Any) -> list[tuple[str, int]]:
    """(replay id, sequence) of a ZRANGE ... WITHSCORES reply."""
    return [(_text(member), int(score)) for member, score in pairs]


class RedisReplayStore:
    """`ReplayStore` in Redis (see the module doc); `client` returns bytes."""

    def __init__(self, client: redis.Redis, prefix: str, capacity: int = DEFAULT_REPLAY_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.client = client
        self.capacity = capacity
        self._sequence_key = f"{prefix}replay:sequence"
        self._order_key = f"{prefix}replay:order"
        self._records_key = f"{prefix}replay:records"
        self._record = client.register_script(_RECORD)

    def record(self, record: dict[str, Any]) -> str:
        """Keep a copy of `record`; returns its id (`id` or `replay_id` when given, else a new one)."""
        replay_id, item = replay_item(record)
        item.pop("id", None)
        item.pop("sequence", None)
        text = json.dumps(item, separators=(",", ":"), ensure_ascii=False)
        keys = [self._sequence_key, self._order_key, self._records_key]
        with store_errors("replay record"):
            if not self._record(keys=keys, args=[replay_id, text, self.capacity]):
                replay_id = uuid.uuid4().hex  # an id is one record: a repeat gets a fresh id
                self._record(keys=keys, args=[replay_id, text, self.capacity])
        return replay_id

    def __bool__(self) -> bool:
        # A handle, not a container: `log or default` must neither ask Redis nor drop an empty store.
        return True

    def __len__(self) -> int:
        with store_errors("replay count"):
            return int(self.client.zcard(self._order_key))

    def _records_after(self, after_sequence: int, chunk: int) -> Iterator[dict[str, Any]]:
        """Kept records with a sequence above `after_sequence`, oldest first, `chunk` a read."""
        cursor = after_sequence
        while True:
            with store_errors("replay read"):
                pairs = _by_sequence(
                    self.client.zrange(
                        self._order_key,
                        f"({cursor}",
                        "+inf",
                        byscore=True,
                        offset=0,
                        num=chunk,
                        withscores=True,
                    )
                )
                values = self.client.hmget(self._records_key, [rid for rid, _ in pairs]) if pairs else []
            for (replay_id, sequence), value in zip(pairs, values, strict=True):
                if value is not None:  # None: trimmed between the two reads
                    yield {**json.loads(value), "id": replay_id, "sequence": sequence}
            if len(pairs) < chunk:
                return
            cursor = pairs[-1][1]

    def _kept_sequences(self) -> tuple[int | None, int | None]:
        """(oldest, newest) sequence kept."""
        with store_errors("replay read"), self.client.pipeline(transaction=True) as pipe:
            pipe.zrange(self._order_key, 0, 0, withscores=True)
            pipe.zrange(self._order_key, -1, -1, withscores=True)
            first, last = (_by_sequence(pairs) for pairs in pipe.execute())
        return (first[0][1] if first else None, last[0][1] if last else None)

    def list(
        self, limit: int = 100, after_sequence: int = 0, decision: str | None = None, model: str | None = None
    ) -> ReplayPage:
        kept = self._kept_sequences()
        chunk = limit + 1 if decision is None and model is None else max(limit + 1, READ_CHUNK)
        matching: list[dict[str, Any]] = []
        for record in self._records_after(after_sequence, chunk):
            if record_matches(record, decision, model):
                matching.append(record)
                if len(matching) > limit:
                    break
        return replay_page(matching, limit, after_sequence, kept)

    def get(self, replay_id: str) -> dict[str, Any] | None:
        with store_errors("replay read"), self.client.pipeline(transaction=True) as pipe:
            pipe.hget(self._records_key, replay_id)
            pipe.zscore(self._order_key, replay_id)
            value, score = pipe.execute()
        if value is None or score is None:
            return None
        return {**json.loads(value), "id": replay_id, "sequence": int(score)}

    def aggregate(self, decision: str | None = None, model: str | None = None) -> ReplayAggregate:
        return aggregate_records(
            [r for r in self._records_after(0, READ_CHUNK) if record_matches(r, decision, model)]
        )


class _KeyedOutcome(BaseModel):
    """What an Idempotency-Key remembers."""

    fingerprint: str
    record: OutcomeRecord


class RedisOutcomeStore:
    """`OutcomeStore` in Redis (see the module doc); `client` returns bytes."""

    def __init__(self, client: redis.Redis, prefix: str, capacity: int = DEFAULT_REPLAY_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.client = client
        self.capacity = capacity
        self._keys = [f"{prefix}outcomes", f"{prefix}outcome:keys", f"{prefix}outcome:key-order"]
        self._submit = client.register_script(_SUBMIT)

    def submit(self, outcome: OutcomeIn, principal: str, idempotency_key: str | None = None) -> OutcomeRecord:
        fingerprint = outcome_fingerprint(outcome, principal)
        record = new_outcome_record(outcome, principal)
        args: list[str | int] = [record.model_dump_json(), self.capacity]
        if idempotency_key is not None:
            keyed = _KeyedOutcome(fingerprint=fingerprint, record=record)
            args += [idempotency_key, keyed.model_dump_json()]
        with store_errors("outcome submit"):
            seen = self._submit(keys=self._keys, args=args)
        if seen is None:
            return record
        earlier = _KeyedOutcome.model_validate_json(seen)
        if earlier.fingerprint != fingerprint:
            raise IdempotencyConflict(idempotency_key)
        return earlier.record.model_copy(update={"idempotent_replay": True})

    def list(self) -> list[OutcomeRecord]:
        with store_errors("outcome read"):
            raw = self.client.lrange(self._keys[0], 0, -1)
        return [OutcomeRecord.model_validate_json(item) for item in raw]


def open_replay_store(settings: ManagementStoreSettings, name: str) -> ReplayStore | RedisReplayStore:
    """Where the replay records go: Redis (every replica and every node sees them) or memory."""
    if settings.backend != "redis":
        return ReplayStore(DEFAULT_REPLAY_CAPACITY)
    return RedisReplayStore(redis_client(settings), settings.prefix_for(name))
