"""ConfigStore persistence: atomic writes (an exception or a kill mid-write leaves the old
state), restart from the state directory, history limit, lookups."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.common import persist
from app.config.loader import parse_config
from app.management.documents import candidate_of
from app.management.state import ConfigStore, StoreCorrupt, StoreUnavailable
from tests.unit.management.test_management_support import Harness, base_document, etag


def candidate(strategy: str = "priority", default: str = "small"):
    document = base_document()
    document["routing"]["strategy"] = strategy
    document["providers"]["defaults"]["default_model"] = default
    return candidate_of(parse_config(document).config)


def test_persist_then_reopen_restores_document_history_and_active(tmp_path: Path):
    store = ConfigStore(tmp_path)
    store.initialize(candidate())
    record = store.persist(candidate("confidence"), "api.patch")
    assert store.mark_active(record.version) == 2
    reopened = ConfigStore(tmp_path)
    reopened.initialize(candidate("confidence"))  # the process restarts with the persisted document
    assert reopened.document["routing"]["strategy"] == "confidence"
    assert reopened.active is not None and reopened.active.config_version == 2
    assert [v.source for v in reopened.versions()] == ["api.patch", "startup"]


def test_the_next_write_removes_temp_files_a_killed_writer_left(tmp_path: Path):
    store = ConfigStore(tmp_path)
    store.initialize(candidate())
    # What atomic_write_bytes leaves when its process is killed between mkstemp and rename.
    orphans = [tmp_path / ".state.json.k1ll3d.tmp", tmp_path / ".state.json.0ther.tmp"]
    for orphan in orphans:
        orphan.write_text('{"revision": 99, "torn')
    unrelated = tmp_path / ".other.json.x.tmp"
    unrelated.write_text("{}")
    store.persist(candidate("confidence"), "api.patch")
    assert not any(o.exists() for o in orphans)
    assert unrelated.exists()  # another document's temp files are its own writers' business
    reopened = ConfigStore(tmp_path)
    reopened.initialize(candidate("confidence"))
    assert reopened.document["routing"]["strategy"] == "confidence"


def test_a_changed_file_at_restart_becomes_a_new_active_version(tmp_path: Path):
    ConfigStore(tmp_path).initialize(candidate())
    reopened = ConfigStore(tmp_path)
    reopened.initialize(candidate(default="big"))
    assert reopened.active is not None and reopened.active.config_version == 2
    assert reopened.versions()[0].source == "file"


def test_exception_during_write_leaves_file_and_memory_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = ConfigStore(tmp_path)
    store.initialize(candidate())
    before_bytes = (tmp_path / "state.json").read_bytes()
    before_hash = store.source_hash

    def crash(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(persist.os, "replace", crash)
    with pytest.raises(StoreUnavailable, match="No space left on device"):
        store.persist(candidate("confidence"), "api.put")
    assert (tmp_path / "state.json").read_bytes() == before_bytes
    assert store.source_hash == before_hash and len(store.versions()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".state.lock", "state.json"]  # no temp file


@pytest.mark.file_store
async def test_failed_write_answers_503_and_the_old_document_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    h = Harness(state_dir=tmp_path)
    async with h.client() as c:
        tag = await etag(c)
        monkeypatch.setattr(persist.os, "replace", lambda *_: (_ for _ in ()).throw(OSError(5, "I/O error")))
        r = await c.patch(
            "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
        )
        monkeypatch.undo()
        assert await etag(c) == tag
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "STORE_UNAVAILABLE" and "I/O error" in r.json()["error"]["message"]
    assert json.loads((tmp_path / "state.json").read_text())["source_hash"] == tag.strip('"')


_WRITER = r"""
import sys
from pathlib import Path
from app.common.persist import atomic_write_json
path = Path(sys.argv[1])
big = "x" * 200_000
i = 0
while True:
    i += 1
    atomic_write_json(path, {"generation": i, "payload": big, "check": i * 7})
    if i == 3:  # writing steadily now: the parent's kill lands somewhere inside a later write
        print("writing", flush=True)
"""


def test_kill_during_writes_never_leaves_a_torn_file(tmp_path: Path):
    target = tmp_path / "state.json"
    persist.atomic_write_json(target, {"generation": 0, "payload": "", "check": 0})
    root = Path(__file__).resolve().parents[3]
    for _ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(target)], cwd=root, stdout=subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"writing"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        state = json.loads(target.read_text())  # parses: never half-written
        assert state["check"] == state["generation"] * 7


def test_history_is_capped_but_the_active_document_stays_findable(tmp_path: Path):
    store = ConfigStore(tmp_path, history_limit=3)
    store.initialize(candidate())
    first_active = store.active
    assert first_active is not None
    for i in range(5):
        store.persist(candidate(default="big" if i % 2 == 0 else "small", strategy="confidence"), "api.put")
    assert len(store.versions()) == 3
    found = store.find(config_version=1)
    assert found is not None and found.hash == first_active.source_hash
    assert store.find(version="nope") is None


def test_corrupt_state_file_is_reported(tmp_path: Path):
    (tmp_path / "state.json").write_text("{ not json")
    with pytest.raises(StoreCorrupt):
        ConfigStore(tmp_path).initialize(candidate())


def test_mirror_file_gets_the_persisted_document_as_yaml(tmp_path: Path):
    import yaml

    mirror = tmp_path / "config.yaml"
    store = ConfigStore(tmp_path / "state", mirror_file=mirror)
    store.initialize(candidate())
    store.persist(candidate("confidence"), "api.put")
    assert yaml.safe_load(mirror.read_text())["routing"]["strategy"] == "confidence"
    assert parse_config(mirror.read_text()).config.routing.strategy == "confidence"
