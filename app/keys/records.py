"""The issued API keys: one `KeyRegistry` document in the management store, so every Ingress
replica, every Router replica's front door and the ext_proc sidecar read the same keys.

- memory: one process (tests; the standalone app).
- file: `<state_dir>/api_keys.json` under its own lock file (every process on the node).
- redis: keys `<prefix>keys:state` and `<prefix>keys:revision` (every replica on every node).

A key's secret is shown once, when it is issued; the store keeps only its SHA-256 (a secret of
256 random bits needs no slow hash). Revoking deletes the record. `lookup` trusts what it read
for at most `cache_seconds` (<= 1 s), so a revoked key is refused within that on every replica.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from app.config.global_config import Budget, RateLimitRule
from app.state.json_document import DocumentStores, JsonDocumentStore
from app.state.shared_store import ManagementStoreSettings
from app.state.state_stores import StateStore

if TYPE_CHECKING:
    import redis

KEYS_FILE = "api_keys.json"
KEYS_LOCK = ".api_keys.lock"
SECRET_PREFIX = "sk-svc-"
# A miss re-checks the registry's revision at most this often per process: a key issued on
# another replica is known within it, and a flood of unknown keys costs the store at most one
# read per interval, not one per request.
MISS_RECHECK_S = 0.05


class KeyRecord(BaseModel):
    """One issued key as stored (never its secret)."""

    id: str
    name: str
    key_hash: str
    models: list[str]  # the granted models; a MoM selection never leaves them
    budget: Budget | None = None
    team: str | None = None  # its spend also counts against global.services.api_keys.teams[team]
    rate_limit: RateLimitRule | None = None  # this key's own bucket (else ratelimit.per_key)
    created_at: str


class KeyRegistry(BaseModel):
    revision: int = 0
    keys: dict[str, KeyRecord] = Field(default_factory=dict)


class KeySpec(BaseModel):
    """What an operator asks for: POST /api/v1/keys, `svc-sr keys create`."""

    name: str = Field(min_length=1, max_length=100)
    models: list[str] = Field(min_length=1, description="the models this key may use")
    budget: Budget | None = None
    team: str | None = Field(default=None, min_length=1, max_length=100)
    rate_limit: RateLimitRule | None = None


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyStore(JsonDocumentStore[KeyRegistry]):
    """The registry over one state backend (see the module doc)."""

    def __init__(
        self,
        backend: StateStore | None = None,
        cache_seconds: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(KeyRegistry, "API keys", backend)
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._by_hash: dict[str, KeyRecord] = {}
        self._read_at: float | None = None
        self._revision = -1  # the registry's revision as last read
        self._revision_checked_at: float | None = None  # a miss's last revision check
        self.has_read = False  # the keys were read at least once (the last read serves an outage)

    def issue(self, spec: KeySpec) -> tuple[KeyRecord, str]:
        """A new key: its record and its secret (returned this once, never stored)."""
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        record = KeyRecord(
            id="key_" + secrets.token_hex(8),
            key_hash=hash_secret(secret),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            **spec.model_dump(),
        )

        def add(registry: KeyRegistry) -> KeyRegistry:
            # A new document: the compare-and-set expects the one read unchanged (json_document.py).
            return KeyRegistry(revision=registry.revision + 1, keys={**registry.keys, record.id: record})

        self.update(add)
        self._read_at = None
        return record, secret

    def revoke(self, key_id: str) -> KeyRecord | None:
        """Delete the key; the record it had (None: no such key)."""
        removed: list[KeyRecord] = []

        def drop(registry: KeyRegistry) -> KeyRegistry | None:
            keys = dict(registry.keys)
            record = keys.pop(key_id, None)
            if record is None:
                return None
            removed.append(record)
            return KeyRegistry(revision=registry.revision + 1, keys=keys)

        self.update(drop)
        self._read_at = None
        return removed[0] if removed else None

    def records(self) -> list[KeyRecord]:
        return sorted(self.load().keys.values(), key=lambda r: r.created_at)

    def lookup(self, secret: str) -> KeyRecord | None:
        """The key whose secret this is (None: unknown or revoked). Raises StoreUnavailable.
        A miss checks the store's revision (one read) so a key issued a moment ago on another
        replica is known at once."""
        now = self._clock()
        digest = hash_secret(secret)
        stale = self._read_at is None or now - self._read_at >= self.cache_seconds
        if not stale and digest not in self._by_hash and not self.miss_settled():
            stale = self.revision() != self._revision
            if not stale:  # set only once confirmed: concurrent misses must not trust a check in flight
                self._revision_checked_at = now
        if stale:
            registry = self.load()
            self._by_hash = {r.key_hash: r for r in registry.keys.values()}
            self._revision, self._read_at, self.has_read = registry.revision, now, True
            self._revision_checked_at = now
        return self._by_hash.get(digest)

    def miss_settled(self) -> bool:
        """The registry's revision was checked within MISS_RECHECK_S: a miss now is a miss."""
        checked = self._revision_checked_at
        return checked is not None and self._clock() - checked < MISS_RECHECK_S

    def fresh(self) -> bool:
        """The keys were read within `cache_seconds`: `last_read` answers without the store."""
        return self._read_at is not None and self._clock() - self._read_at < self.cache_seconds

    def last_read(self, secret: str) -> KeyRecord | None:
        """The key as this process read it last (the store does not answer)."""
        return self._by_hash.get(hash_secret(secret))


def open_key_store(
    settings: ManagementStoreSettings,
    app_name: str,
    state_dir: Path,
    client: redis.Redis | None = None,
    cache_seconds: float = 0.5,
) -> KeyStore:
    """The keys of application `app_name`: Redis under the management store's prefix, or the
    state directory's file (`client`: one the caller already holds)."""
    backends = DocumentStores(settings, app_name, state_dir, client)
    return KeyStore(backends.open("keys:", KEYS_FILE, KEYS_LOCK), cache_seconds)
