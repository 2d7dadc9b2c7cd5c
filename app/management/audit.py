"""The audit log: a hash-chained ring of the last 10,000 entries per process (docs/management-api.md "Audit").

Each entry's `hash` is sha256 over its predecessor's hash and its own canonical JSON, so
changing, dropping or reordering a retained entry breaks `verify()`. The ring forgets the
oldest entries; the first retained entry's `prev_hash` anchors the chain. Entries carry
route and authorization metadata only, never request bodies.

`AuditTrail` is what the management API needs of a log: `AuditLog` here (one process) or
`audit_redis.RedisAuditLog` (one chain shared by every Ingress replica).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel, Field

AUDIT_RING = 10_000
GENESIS = "0" * 64


class AuditEntry(BaseModel):
    sequence: int
    timestamp: str
    action: str
    request_id: str | None = None
    principal: str | None = None
    role: str | None = None
    method: str | None = None
    path: str | None = None
    status: int | None = None
    config: dict[str, Any] | None = None
    detail: dict[str, Any] | None = None
    prev_hash: str
    hash: str = ""

    def digest(self) -> str:
        payload = self.model_dump(exclude={"hash"}, exclude_none=True)
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256((self.prev_hash + text).encode("utf-8")).hexdigest()


class AuditPage(BaseModel):
    entries: list[AuditEntry]
    next_sequence: int = Field(
        description="pass as after_sequence to continue (also to poll for new entries)"
    )
    has_more: bool
    truncated: bool = Field(description="entries after `after_sequence` were dropped from the ring")
    oldest_sequence: int | None


class AuditVerification(BaseModel):
    ok: bool
    checked: int
    first_bad_sequence: int | None = None
    reason: str | None = None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_entry(action: str, sequence: int, prev_hash: str, **fields: Any) -> AuditEntry:
    """The chain's entry after (sequence - 1, prev_hash), stamped now and hashed."""
    entry = AuditEntry(sequence=sequence, timestamp=_now(), action=action, prev_hash=prev_hash, **fields)
    entry.hash = entry.digest()
    return entry


class AuditTrail(Protocol):
    """What the management API needs of an audit log: `AuditLog` (one process) or
    `app.management.audit_redis.RedisAuditLog` (shared by every Ingress replica)."""

    def record(self, action: str, **fields: Any) -> AuditEntry: ...

    def query(self, action: str | None = None, limit: int = 100, after_sequence: int = 0) -> AuditPage: ...

    def verify(self) -> AuditVerification: ...

    @property
    def last_sequence(self) -> int: ...

    def __len__(self) -> int: ...


class AuditLog:
    def __init__(self, capacity: int = AUDIT_RING) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._entries: deque[AuditEntry] = deque(maxlen=capacity)
        self._lock = threading.Lock()  # recorded from request handlers and activation threads
        self._sequence = 0
        self._last_hash = GENESIS

    def record(self, action: str, **fields: Any) -> AuditEntry:
        with self._lock:
            self._sequence += 1
            entry = new_entry(action, self._sequence, self._last_hash, **fields)
            self._last_hash = entry.hash
            self._entries.append(entry)
            return entry

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def last_sequence(self) -> int:
        return self._sequence

    def query(self, action: str | None = None, limit: int = 100, after_sequence: int = 0) -> AuditPage:
        with self._lock:
            entries = list(self._entries)
        oldest = entries[0].sequence if entries else None
        truncated = oldest is not None and after_sequence < oldest - 1
        matching = [
            e for e in entries if e.sequence > after_sequence and (action is None or e.action == action)
        ]
        page = matching[:limit]
        has_more = len(matching) > limit
        return AuditPage(
            entries=page,
            next_sequence=page[-1].sequence if page else max(after_sequence, 0),
            has_more=has_more,
            truncated=truncated,
            oldest_sequence=oldest,
        )

    def verify(self) -> AuditVerification:
        with self._lock:
            entries = list(self._entries)
        return verify_chain(entries)


def verify_chain(entries: list[AuditEntry]) -> AuditVerification:
    """Check hashes and links of consecutive entries (the first one's prev_hash is the anchor)."""
    previous: AuditEntry | None = None
    for entry in entries:
        if previous is not None:
            if entry.sequence != previous.sequence + 1:
                return AuditVerification(
                    ok=False, checked=len(entries), first_bad_sequence=entry.sequence, reason="sequence gap"
                )
            if entry.prev_hash != previous.hash:
                return AuditVerification(
                    ok=False,
                    checked=len(entries),
                    first_bad_sequence=entry.sequence,
                    reason="prev_hash does not match the previous entry",
                )
        if entry.digest() != entry.hash:
            return AuditVerification(
                ok=False,
                checked=len(entries),
                first_bad_sequence=entry.sequence,
                reason="entry hash does not match its content",
            )
        previous = entry
    return AuditVerification(ok=True, checked=len(entries))
