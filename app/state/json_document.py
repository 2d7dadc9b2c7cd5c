"""One typed JSON document kept in a state store (state_stores.py), shared by every replica:
the elo ratings (ratings.py), the knowledge bases and each base's vectors (knowledge_bases.py).

- memory: one process (tests; the standalone app).
- file: `<state_dir>/<filename>` under its own lock file, replaced atomically (every replica on
  the node).
- redis: keys `<prefix><key>state` and `<prefix><key>revision` (every replica on every node).

Writes are the backend's compare-and-set: `update(change)` reads the document, applies
`change` and saves only if no other writer saved since, else re-reads and retries. Every
failure to reach the store raises `StoreUnavailable`; a document that cannot be read back
raises `StoreCorrupt`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Protocol, Self, TypeVar

from pydantic import ValidationError

from app.common.redaction import redact_url
from app.state.shared_store import ManagementStoreSettings, StoreUnavailable, redis_client
from app.state.state_stores import (
    FileStateStore,
    MemoryStateStore,
    RedisStateStore,
    StateConflict,
    StateStore,
    StoreCorrupt,
)

if TYPE_CHECKING:
    import redis

# Compare-and-set attempts before an update gives up (each lost race means another
# writer's update went in, so this many in a row is a store under heavy contention).
MAX_ATTEMPTS = 20


class RevisionedDocument(Protocol):
    """A pydantic model with a `revision` field (the backend's compare-and-set counter: each
    save stores revision + 1) and defaults for every field (the empty document)."""

    revision: int

    def __init__(self) -> None: ...

    def model_dump_json(self, *, indent: int | None = None) -> str: ...

    @classmethod
    def model_validate_json(cls, json_data: str) -> Self: ...


D = TypeVar("D", bound=RevisionedDocument)
R = TypeVar("R")


class JsonDocumentStore(Generic[D]):
    """Document `model` over one backend; `what` names it in errors ("elo ratings")."""

    def __init__(self, model: type[D], what: str, backend: StateStore | None = None) -> None:
        self.model = model
        self.what = what
        self.backend = backend or MemoryStateStore()
        # One update at a time in this process (the memory backend's compare-and-set is not
        # thread-safe); other processes are kept apart by the backend's compare-and-set.
        self._lock = threading.Lock()

    def describe(self) -> str:
        return self.backend.describe()

    def revision(self) -> int:
        return self.backend.revision()

    def read(self) -> D | None:
        """The stored document (None: nothing stored yet)."""
        text = self.backend.load_json()
        if text is None:
            return None
        try:
            return self.model.model_validate_json(text)
        except ValidationError as exc:
            raise StoreCorrupt(f"{self.what} in {self.describe()}: {exc}") from None

    def load(self) -> D:
        """The stored document, or an empty one."""
        found = self.read()
        return found if found is not None else self.model()

    def save(self, document: D, expected: int) -> None:
        """Save `document` if the stored revision is still `expected` (else StateConflict)."""
        self.backend.save(document, expected)

    def update(self, change: Callable[[D], D | None]) -> D | None:
        """`change(current)` saved by compare-and-set, retried on a lost race; the document as
        saved (None: `change` returned None, nothing to save). Exceptions of `change` propagate."""
        return self._retry(lambda: self._update_once(change))

    def replace(self, make: Callable[[int], D]) -> D:
        """Save `make(revision)`, a document that does not depend on the stored one (whose
        revision is `revision + 1`), without reading the stored one."""

        def once() -> D:
            current = self.backend.revision()
            document = make(current)
            self.backend.save(document, expected=current)
            return document

        return self._retry(once)

    def _update_once(self, change: Callable[[D], D | None]) -> D | None:
        current = self.load()
        updated = change(current)
        if updated is not None:
            self.backend.save(updated, expected=current.revision)
        return updated

    def _retry(self, once: Callable[[], R]) -> R:
        with self._lock:
            for _ in range(MAX_ATTEMPTS):
                try:
                    return once()
                except StateConflict:
                    continue
        raise StoreUnavailable(f"{self.what} in {self.describe()}: {MAX_ATTEMPTS} concurrent writers won")


@dataclass
class DocumentStores:
    """Where an application's documents live: Redis under the management store's prefix, or
    files in the state directory (`client`: a Redis client the caller already holds; else
    one is made on first use and shared by every document opened here)."""

    settings: ManagementStoreSettings
    app_name: str
    state_dir: Path
    client: redis.Redis | None = None

    def open(self, key: str, filename: str, lock_name: str) -> StateStore:
        """`key`: the Redis key prefix under the application's ("elo:"); `filename` and
        `lock_name`: the document's file and lock file in the state directory."""
        if self.settings.backend == "redis":
            assert self.settings.url is not None  # the settings' validator requires it
            if self.client is None:
                self.client = redis_client(self.settings)
            prefix = f"{self.settings.prefix_for(self.app_name)}{key}"
            return RedisStateStore(self.client, prefix, where=redact_url(self.settings.url))
        return FileStateStore(self.state_dir, filename=filename, lock_name=lock_name)
