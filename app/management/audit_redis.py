"""The audit log in Redis: one hash chain shared by every Ingress replica on every node.

Same interface and semantics as `audit.AuditLog` (the `AuditTrail` protocol). Two keys
under the management store's prefix P:

    P audit         list of entries (JSON), oldest first, the newest `capacity` kept
    P audit:head    "<sequence>:<hash>" of the newest entry: what the next one links to

Append is an optimistic transaction: WATCH the head, build the next entry in Python
(sha256 via `AuditEntry.digest`, which Lua cannot do), then MULTI RPUSH + LTRIM + SET head,
EXEC; when another replica appended in between, EXEC fails and the append retries on the
new head. So concurrent replicas never fork the chain nor leave a sequence gap, and the
list always holds consecutive sequences ending at the head's: the entry with sequence s
sits at index s - (head - length + 1). Reads take head, length and the LRANGE that this
index computes in one Lua script, so a page is one consistent snapshot however fast others
append.

Failures: queries, verify() and the counters raise `StoreUnavailable` (Redis down, slower
than the client's timeout, or an append contended past `APPEND_ATTEMPTS`). record() never
raises for the store: it is called from read routes too (auth denials), so it logs a
warning and returns the entry it could not store, with sequence 0 and prev_hash GENESIS.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any, NamedTuple

import redis
from pydantic import ValidationError

from app.management.audit import (
    AUDIT_RING,
    GENESIS,
    AuditEntry,
    AuditPage,
    AuditVerification,
    new_entry,
    verify_chain,
)
from app.state.shared_store import store_errors

log = logging.getLogger("svc_sr.management.audit")

APPEND_ATTEMPTS = 50
# A filtered query reads this many entries per round trip while it looks for matches.
QUERY_CHUNK = 500
_BACKOFF_STEP_S = 0.0005  # random pause after a lost race: decorrelates the replicas' retries

# KEYS[1] head, KEYS[2] entries; ARGV[1] first wanted sequence, ARGV[2] count.
# Returns {head sequence, length, entries from that sequence (or the oldest kept)...}.
_WINDOW = """
local head = redis.call('GET', KEYS[1])
local length = redis.call('LLEN', KEYS[2])
if not head then return {0, 0} end
local last = tonumber(string.match(head, '^%d+'))
local start = math.max(tonumber(ARGV[1]) - (last - length + 1), 0)
local out = redis.call('LRANGE', KEYS[2], start, start + tonumber(ARGV[2]) - 1)
table.insert(out, 1, length)
table.insert(out, 1, last)
return out
"""


class _Window(NamedTuple):
    last: int  # head sequence: the newest entry's
    length: int
    entries: list[AuditEntry]

    @property
    def oldest(self) -> int | None:
        return self.last - self.length + 1 if self.length else None


class _Contended(Exception):
    """Other replicas kept appending first for every attempt."""


def _parse_head(raw: bytes | str | None) -> tuple[int, str]:
    if raw is None:
        return 0, GENESIS
    text = raw.decode("ascii") if isinstance(raw, bytes) else raw
    sequence, _, digest = text.partition(":")
    return int(sequence), digest


def _parse_entries(raw: list[bytes]) -> list[AuditEntry]:
    entries = []
    for item in raw:
        try:
            entries.append(AuditEntry.model_validate_json(item))
        except ValidationError:  # verify() reports it with its sequence; a page skips it
            log.warning("skipping an audit entry that is not an entry: %.80r", item)
    return entries


class RedisAuditLog:
    """`AuditTrail` in Redis (see the module doc); `client` returns bytes."""

    def __init__(self, client: redis.Redis, prefix: str, capacity: int = AUDIT_RING) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.client = client
        self.capacity = capacity
        self._entries_key = f"{prefix}audit"
        self._head_key = f"{prefix}audit:head"
        self._window = client.register_script(_WINDOW)

    def record(self, action: str, **fields: Any) -> AuditEntry:
        draft = new_entry(action, 0, GENESIS, **fields)
        # Hash what a reader will parse back (JSON types), so digest() agrees after the round trip.
        canonical = AuditEntry.model_validate_json(draft.model_dump_json())
        try:
            return self._append(canonical)
        except (redis.RedisError, OSError, ValueError, _Contended) as exc:  # ValueError: a mangled head
            log.warning("audit entry %s not stored (returned unchained, sequence 0): %s", action, exc)
            return draft

    def _append(self, canonical: AuditEntry) -> AuditEntry:
        with self.client.pipeline(transaction=True) as pipe:
            for attempt in range(APPEND_ATTEMPTS):
                try:
                    pipe.watch(self._head_key)
                    sequence, last_hash = _parse_head(pipe.get(self._head_key))
                    entry = canonical.model_copy(update={"sequence": sequence + 1, "prev_hash": last_hash})
                    entry.hash = entry.digest()
                    pipe.multi()
                    pipe.rpush(self._entries_key, entry.model_dump_json())
                    pipe.ltrim(self._entries_key, -self.capacity, -1)
                    pipe.set(self._head_key, f"{entry.sequence}:{entry.hash}")
                    pipe.execute()
                    return entry
                except redis.WatchError:
                    time.sleep(random.uniform(0, _BACKOFF_STEP_S * (attempt + 1)))
        raise _Contended(f"{APPEND_ATTEMPTS} attempts lost to other writers")

    def __bool__(self) -> bool:
        # A handle, not a container: `log or default` must neither ask Redis nor drop an empty store.
        return True

    def __len__(self) -> int:
        with store_errors("audit length"):
            return int(self.client.llen(self._entries_key))

    @property
    def last_sequence(self) -> int:
        with store_errors("audit head"):
            raw = self.client.get(self._head_key)
        return _parse_head(raw)[0]

    def _read(self, first: int, count: int) -> _Window:
        with store_errors("audit read"):
            raw = self._window(keys=[self._head_key, self._entries_key], args=[first, count])
        return _Window(int(raw[0]), int(raw[1]), _parse_entries(raw[2:]))

    def query(self, action: str | None = None, limit: int = 100, after_sequence: int = 0) -> AuditPage:
        chunk = limit + 1 if action is None else max(limit + 1, QUERY_CHUNK)
        current = self._read(after_sequence + 1, chunk)
        oldest = current.oldest
        matching: list[AuditEntry] = []
        # Bounded: each round moves past `chunk` entries; a ring of `capacity` takes this many.
        for _ in range(self.capacity // chunk + 2):
            matching += [
                e
                for e in current.entries
                if e.sequence > after_sequence and (action is None or e.action == action)
            ]
            if len(matching) > limit or not current.entries or current.entries[-1].sequence >= current.last:
                break
            current = self._read(current.entries[-1].sequence + 1, chunk)
        page = matching[:limit]
        return AuditPage(
            entries=page,
            next_sequence=page[-1].sequence if page else max(after_sequence, 0),
            has_more=len(matching) > limit,
            truncated=oldest is not None and after_sequence < oldest - 1,
            oldest_sequence=oldest,
        )

    def verify(self) -> AuditVerification:
        with store_errors("audit verify"), self.client.pipeline(transaction=True) as pipe:
            pipe.get(self._head_key)
            pipe.lrange(self._entries_key, 0, -1)
            raw_head, raw_entries = pipe.execute()
        last, _ = head = _parse_head(raw_head)
        oldest = last - len(raw_entries) + 1
        entries: list[AuditEntry] = []
        for offset, item in enumerate(raw_entries):
            try:
                entries.append(AuditEntry.model_validate_json(item))
            except ValidationError:
                return AuditVerification(
                    ok=False,
                    checked=len(raw_entries),
                    first_bad_sequence=oldest + offset,
                    reason="entry is not an audit entry",
                )
        result = verify_chain(entries)
        if result.ok and entries and head != (entries[-1].sequence, entries[-1].hash):
            return AuditVerification(
                ok=False,
                checked=len(entries),
                first_bad_sequence=entries[-1].sequence,
                reason="the newest entry is not the one the head names",
            )
        return result
