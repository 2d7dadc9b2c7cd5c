"""Where the Elo ratings live (`algorithm.type: elo`): one `RatingsDocument` in the management
store, so every Router replica reads the same ratings and a restart keeps them.

The document is a JsonDocumentStore (app/state/json_document.py) over the management store's own
backends with their compare-and-set: `apply(games)` reads the document, applies the games
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

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.models.elo import Game, RatingsDocument, apply_games
from app.state.json_document import DocumentStores, JsonDocumentStore
from app.state.shared_store import ManagementStoreSettings
from app.state.state_stores import StateStore

if TYPE_CHECKING:
    import redis

RATINGS_FILE = "elo_ratings.json"
RATINGS_LOCK = ".elo_ratings.lock"


class RatingStore(JsonDocumentStore[RatingsDocument]):
    """The ratings document over one state backend (see the module doc)."""

    def __init__(self, backend: StateStore | None = None) -> None:
        super().__init__(RatingsDocument, "elo ratings", backend)

    def apply(self, games: Sequence[Game]) -> RatingsDocument:
        """Apply `games` atomically; the document as saved."""
        saved = self.update(lambda current: apply_games(current, games))
        assert saved is not None  # apply_games always returns a document
        return saved


def open_rating_store(
    settings: ManagementStoreSettings, app_name: str, state_dir: Path, client: redis.Redis | None = None
) -> RatingStore:
    """The ratings of application `app_name`: Redis under the management store's prefix, or
    the state directory's file (`client`: one the caller already holds)."""
    backends = DocumentStores(settings, app_name, state_dir, client)
    return RatingStore(backends.open("elo:", RATINGS_FILE, RATINGS_LOCK))
