"""Where the Elo ratings live (`algorithm.type: elo`): one `RatingsDocument` in the management
store, so every Router replica reads the same ratings and a restart keeps them.

The document is kept by the management store's own backends (state_backends.py) with
their compare-and-set: `apply(games)` reads the document, applies the games
(app/models/elo.py `apply_games`) and saves it only if no other writer saved since, else
re-reads and retries. So two Ingress replicas accepting outcomes at once both count.

- memory: one process (tests; the standalone app).
- file: `<state_dir>/elo_ratings.json` under its own lock file (every replica on the node).
- redis: keys `<prefix>elo:state` and `<prefix>elo:revision` (every replica on every node).

Readers (the Routers' selectors, app/pipeline/elo_selector.py) poll `revision()` (a stat or
one GET) and `load()` the document when it changed. Every failure to reach the store raises
`StoreUnavailable`; a document that cannot be read back raises `StoreCorrupt`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from app.management.redaction import redact_url
from app.management.shared_store import ManagementStoreSettings, StoreUnavailable, redis_client
from app.management.state_backends import (
    FileStateBackend,
    MemoryStateBackend,
    RedisStateBackend,
    StateBackend,
    StateConflict,
    StoreCorrupt,
)
from app.models.elo import Game, RatingsDocument, apply_games

if TYPE_CHECKING:
    import redis

RATINGS_FILE = "elo_ratings.json"
RATINGS_LOCK = ".elo_ratings.lock"
# Compare-and-set attempts before an update gives up (each lost race means another
# writer's update went in, so this many in a row is a store under heavy contention).
MAX_ATTEMPTS = 20


class RatingStore:
    """The ratings document over one state backend (see the module doc)."""

    def __init__(self, backend: StateBackend | None = None) -> None:
        self.backend = backend or MemoryStateBackend()
        # One update at a time in this process (the memory backend's compare-and-set is not
        # thread-safe); other processes are kept apart by the backend's compare-and-set.
        self._lock = threading.Lock()

    def describe(self) -> str:
        return self.backend.describe()

    def revision(self) -> int:
        return self.backend.revision()

    def load(self) -> RatingsDocument:
        text = self.backend.load_json()
        if text is None:
            return RatingsDocument()
        try:
            return RatingsDocument.model_validate_json(text)
        except ValidationError as exc:
            raise StoreCorrupt(f"elo ratings in {self.describe()}: {exc}") from None

    def apply(self, games: Sequence[Game]) -> RatingsDocument:
        """Apply `games` atomically; the document as saved."""
        with self._lock:
            for _ in range(MAX_ATTEMPTS):
                current = self.load()
                updated = apply_games(current, games)
                try:
                    self.backend.save(updated, expected=current.revision)
                except StateConflict:
                    continue
                return updated
        raise StoreUnavailable(f"elo ratings in {self.describe()}: {MAX_ATTEMPTS} concurrent writers won")


def open_rating_store(
    settings: ManagementStoreSettings, app_name: str, state_dir: Path, client: redis.Redis | None = None
) -> RatingStore:
    """The ratings of application `app_name`: Redis under the management store's prefix, or
    the state directory's file (`client`: one the caller already holds)."""
    if settings.backend == "redis":
        assert settings.url is not None  # the settings' validator requires it
        prefix = f"{settings.prefix_for(app_name)}elo:"
        where = redact_url(settings.url)
        return RatingStore(RedisStateBackend(client or redis_client(settings), prefix, where=where))
    return RatingStore(FileStateBackend(state_dir, filename=RATINGS_FILE, lock_name=RATINGS_LOCK))
