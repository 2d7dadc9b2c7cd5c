"""JsonDocumentStore (app/state/json_document.py): the compare-and-set loop the elo
ratings and the knowledge bases share."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from app.state.json_document import MAX_ATTEMPTS, JsonDocumentStore
from app.state.shared_store import StoreUnavailable
from app.state.state_stores import (
    FileStateStore,
    MemoryStateStore,
    Revisioned,
    StateConflict,
    StoreCorrupt,
)


class Counter(BaseModel):
    revision: int = 0
    count: int = 0


def bump(doc: Counter) -> Counter:
    return Counter(revision=doc.revision + 1, count=doc.count + 1)


class RacingBackend(MemoryStateStore):
    """Another writer saves just before each of this store's first `races` saves."""

    def __init__(self, races: int) -> None:
        super().__init__()
        self.races = races
        self.saves = 0

    def save(self, state: Revisioned, expected: int) -> None:
        self.saves += 1
        if self.races:
            self.races -= 1
            current = Counter.model_validate_json(self.load_json() or "{}")
            super().save(bump(current), current.revision)
        super().save(state, expected)


def test_a_lost_race_rereads_and_both_updates_count() -> None:
    backend = RacingBackend(races=2)
    store = JsonDocumentStore(Counter, "counter", backend)
    saved = store.update(bump)
    assert saved is not None and saved.count == 3 and saved.revision == 3
    assert store.load() == saved and backend.saves == 3


def test_an_update_that_keeps_losing_gives_up_unavailable() -> None:
    backend = RacingBackend(races=MAX_ATTEMPTS)
    store = JsonDocumentStore(Counter, "counter", backend)
    with pytest.raises(StoreUnavailable, match="counter in memory"):
        store.update(bump)
    assert backend.saves == MAX_ATTEMPTS


def test_no_change_writes_nothing_and_empty_reads_default(tmp_path: Path) -> None:
    store = JsonDocumentStore(Counter, "counter", FileStateStore(tmp_path, "c.json", ".c.lock"))
    assert store.read() is None and store.load() == Counter()
    assert store.update(lambda doc: None) is None
    assert not (tmp_path / "c.json").exists()
    store.replace(lambda revision: Counter(revision=revision + 1, count=7))
    store.replace(lambda revision: Counter(revision=revision + 1, count=8))
    assert store.read() == Counter(revision=2, count=8)


def test_a_stale_save_conflicts_and_a_bad_document_is_corrupt(tmp_path: Path) -> None:
    store = JsonDocumentStore(Counter, "counter", FileStateStore(tmp_path, "c.json", ".c.lock"))
    store.update(bump)
    with pytest.raises(StateConflict):
        store.save(Counter(revision=1, count=5), expected=0)
    (tmp_path / "c.json").write_text('{"revision": 2, "count": "many"}')
    with pytest.raises(StoreCorrupt, match="counter in"):
        store.load()
