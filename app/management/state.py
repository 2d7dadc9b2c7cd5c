"""ConfigStore: the persisted configuration document, its version history and the active record.

The whole state is one document saved by compare-and-set in a backend (app/state/state_stores.py:
memory, `<state_dir>/state.json`, or Redis shared by every Ingress replica): a crash leaves
the previous state or the next one, never a half-written document or a history that
disagrees with it; two replicas changing it at once cannot lose either change, and a
change made against a stale document (If-Match) is refused atomically (StaleDocument). The
in-memory copy changes only after the store took the write.

At a start `initialize` resumes the stored active version when the configuration file did
not change since it was last loaded (a PATCH survives a restart); a changed file wins and
becomes a new version (`StartupRecord` says which; stores.resolve_startup_document decides it for
the graph builder before anything is deployed).

History keeps the last `history_limit` persisted documents (10, as the contract asks); the active
document is kept separately, so a rollback target and the last known good configuration
survive even when ten failed attempts have pushed it out of the history.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field

from app.common.persist import atomic_write_bytes
from app.management.documents import CheckedDocument
from app.state.shared_store import StoreUnavailable
from app.state.state_stores import (
    STATE_FILE,
    FileStateStore,
    MemoryStateStore,
    StateConflict,
    StateStore,
    StoreCorrupt,
)

log = logging.getLogger("svc_sr.management.state")

__all__ = ["STATE_FILE", "ConfigStore", "StaleDocument", "StoreCorrupt", "StoreState", "StoreUnavailable"]

STATE_SCHEMA = 1
DEFAULT_HISTORY_LIMIT = 10

VersionResult = Literal["pending", "active", "failed", "superseded"]


class VersionRecord(BaseModel):
    """One persisted document (GET /api/v1/config/versions shows it without `document`)."""

    version: str = Field(description="version id: the persist timestamp (unique)")
    timestamp: str
    source: str = Field(description="startup, file, api.put, api.patch or rollback")
    filename: str
    attempt: int
    hash: str = Field(description="source hash of the document")
    runtime_hash: str
    config_version: int | None = Field(default=None, description="set when this document was activated")
    result: VersionResult = "pending"
    rollback_of: str | None = None
    request_id: str | None = None
    document: dict[str, Any]


class ActiveRecord(BaseModel):
    version: str
    config_version: int
    source_hash: str
    runtime_hash: str
    activated_at: str
    document: dict[str, Any]


class StoreState(BaseModel):
    schema_version: int = STATE_SCHEMA
    revision: int = 0  # advanced by every save: the compare-and-set token (app/state/state_stores.py)
    filename: str = "config.yaml"
    # Source hash of the configuration file (or inline document) as last loaded at a start:
    # an unchanged file means "resume the active version", a changed one wins (resolve_startup).
    file_hash: str = ""
    attempt: int = 0
    config_version: int = 0
    document: dict[str, Any] = Field(default_factory=dict)
    source_hash: str = ""
    runtime_hash: str = ""
    latest_version: str = ""
    active: ActiveRecord | None = None
    versions: list[VersionRecord] = Field(default_factory=list)  # oldest first


class StaleDocument(Exception):
    """The document changed since the caller read it (another replica wrote): 412."""

    def __init__(self, current_hash: str) -> None:
        super().__init__("the configuration changed since it was read")
        self.current_hash = current_hash


StartupKind = Literal["first", "unchanged", "resumed", "file"]


class StartupRecord(BaseModel):
    """What `initialize` did, for the start-up log line and the audit entry."""

    kind: StartupKind = Field(
        description="first: no stored state; unchanged: the file is the active version; resumed: "
        "the stored active version serves (the file did not change since it was loaded); file: the "
        "file changed and became a new version"
    )
    version: str
    config_version: int
    store: str


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _after(floor: str) -> str:
    """A version stamp later than `floor`: ids stay unique and ordered across replicas."""
    stamp = _now()
    if stamp <= floor:
        last = datetime.fromisoformat(floor.replace("Z", "+00:00"))
        stamp = (last + timedelta(microseconds=1)).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return stamp


def parse_state(text: str | None, where: str) -> StoreState | None:
    if text is None:
        return None
    try:
        return StoreState.model_validate_json(text)
    except ValueError as exc:
        raise StoreCorrupt(f"cannot read {where}: {exc}") from None


MAX_WRITE_ATTEMPTS = 20  # compare-and-set retries under contention before giving up (503)
UNREACHABLE_BACKOFF_S = 1.0  # after a failed read, serve the last state this long before asking again


class ConfigStore:
    def __init__(
        self,
        state_dir: Path | str | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        mirror_file: Path | str | None = None,
        backend: StateStore | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be >= 1")
        self.state_dir = Path(state_dir) if state_dir is not None else None
        if backend is None:
            backend = FileStateStore(self.state_dir) if self.state_dir is not None else MemoryStateStore()
        self.backend = backend
        self.history_limit = history_limit
        self.mirror_file = Path(mirror_file) if mirror_file is not None else None
        self._state = StoreState()
        self._lock = threading.Lock()
        self._clock = clock
        self._unreachable_until = 0.0
        self.last_startup: StartupRecord | None = None

    # ------------------------------------------------------------------ backend
    @property
    def path(self) -> Path | None:
        return self.state_dir / STATE_FILE if self.state_dir is not None else None

    def _load(self) -> StoreState | None:
        return parse_state(self.backend.load_json(), self.backend.describe())

    def _fresh(self) -> StoreState:
        """The stored state when another process may have written it (a revision check), else
        this replica's copy; the copy while the store is unreachable (reads keep answering)."""
        if not self.backend.shared or self._clock() < self._unreachable_until:
            return self._state
        try:
            if self.backend.revision() != self._state.revision:
                stored = self._load()
                if stored is None and self._state.active is not None:
                    self._write_back()
                else:
                    self._state = stored or StoreState()
        except StoreUnavailable as exc:
            self._unreachable_until = self._clock() + UNREACHABLE_BACKOFF_S
            log.warning("%s; serving the last state read (revision %d)", exc, self._state.revision)
        return self._state

    def _write_back(self) -> None:
        """The store answers but holds no state (a Redis restarted without persistence, a
        state file deleted): write this replica's last state back rather than serve nothing."""
        state = self._state.model_copy(update={"revision": 1})
        try:
            self.backend.save(state, 0)
        except StateConflict:  # another replica wrote first: read theirs
            self._state = self._load() or StoreState()
            return
        log.warning(
            "management store %s was empty: wrote this replica's last state back", self.backend.describe()
        )
        self._state = state

    def _update(self, change: Callable[[StoreState], StoreState | None]) -> StoreState:
        """Read, change a copy, compare-and-set; retried when another writer got there first.
        Memory changes only after the store took the write. Raises StoreUnavailable."""
        with self._lock:
            for _ in range(MAX_WRITE_ATTEMPTS):
                current = self._load() if self.backend.shared else self._state
                current = current or StoreState()
                changed = change(current.model_copy(deep=True))
                if changed is None:
                    self._state = current
                    return current
                changed.revision = current.revision + 1
                try:
                    self.backend.save(changed, current.revision)
                except StateConflict:
                    self._state = self._load() or StoreState()
                    continue
                self._state = changed
                self._unreachable_until = 0.0
                self._write_mirror(changed)
                return changed
        raise StoreUnavailable(f"management store {self.backend.describe()}: too many concurrent writers")

    def _write_mirror(self, state: StoreState) -> None:
        if self.mirror_file is None:
            return
        try:
            text = yaml.safe_dump(state.document, sort_keys=False, allow_unicode=True, width=100)
            atomic_write_bytes(self.mirror_file, text.encode("utf-8"))
        except OSError as exc:  # the state is the truth; the mirror is a convenience
            log.warning("could not write %s: %s", self.mirror_file, exc.strerror)

    # ------------------------------------------------------------------ startup
    def initialize(
        self,
        serving: CheckedDocument,
        filename: str = "config.yaml",
        source: str = "startup",
        file_hash: str | None = None,
    ) -> StartupRecord:
        """Record `serving` (what this replica was started with) as the active configuration:
        a new version when it is not the stored active one. `file_hash`: the source hash of
        the configuration file as loaded now (None: `serving` is the file)."""
        file_hash = serving.source_hash if file_hash is None else file_hash
        with self._lock:
            self._state = self._load() or StoreState()
        kinds: list[StartupKind] = []

        def record_start(state: StoreState) -> StoreState | None:
            kinds.clear()
            active = state.active
            if active is None:
                kinds.append("first")
            elif serving.source_hash != file_hash:
                kinds.append("resumed")
            else:
                kinds.append("unchanged" if active.source_hash == serving.source_hash else "file")
            if active is not None and active.source_hash == state.source_hash == serving.source_hash:
                if state.file_hash == file_hash:
                    return None  # nothing to write: a replica restarted, or a second replica
                state.file_hash = file_hash
                return state
            state.filename = filename
            state.file_hash = file_hash
            record = self._new_record(state, serving, "file" if active is not None else source, None, None)
            return self._activated(self._append(state, record, serving), record.version)

        state = self._update(record_start)
        assert state.active is not None
        self.last_startup = StartupRecord(
            kind=kinds[0],
            version=state.active.version,
            config_version=state.active.config_version,
            store=self.backend.describe(),
        )
        return self.last_startup

    def seed_local(self, serving: CheckedDocument, filename: str) -> None:
        """The store is unreachable at start: keep `serving` as this replica's local copy (not
        saved; revision -1, so the stored state is read again as soon as the store answers)."""
        state = StoreState(filename=filename, revision=-1)
        record = self._new_record(state, serving, "startup", None, None)
        self._state = self._activated(self._append(state, record, serving), record.version)
        self._unreachable_until = self._clock() + UNREACHABLE_BACKOFF_S

    def _new_record(
        self,
        state: StoreState,
        candidate: CheckedDocument,
        source: str,
        rollback_of: str | None,
        request_id: str | None,
    ) -> VersionRecord:
        stamp = _after(max(state.latest_version, max((v.version for v in state.versions), default="")))
        return VersionRecord(
            version=stamp,
            timestamp=stamp,
            source=source,
            filename=state.filename,
            attempt=state.attempt + 1,
            hash=candidate.source_hash,
            runtime_hash=candidate.runtime_hash,
            rollback_of=rollback_of,
            request_id=request_id,
            document=copy.deepcopy(candidate.document),
        )

    def _append(self, state: StoreState, record: VersionRecord, candidate: CheckedDocument) -> StoreState:
        state.attempt = record.attempt
        state.document = copy.deepcopy(candidate.document)
        state.source_hash = candidate.source_hash
        state.runtime_hash = candidate.runtime_hash
        state.latest_version = record.version
        state.versions = [*state.versions, record][-self.history_limit :]
        return state

    def _activated(self, state: StoreState, version: str) -> StoreState:
        record = next(v for v in state.versions if v.version == version)
        state.config_version += 1
        record.config_version = state.config_version
        record.result = "active"
        state.active = ActiveRecord(
            version=record.version,
            config_version=state.config_version,
            source_hash=record.hash,
            runtime_hash=record.runtime_hash,
            activated_at=_now(),
            document=copy.deepcopy(record.document),
        )
        return state

    # ------------------------------------------------------------------ mutations
    def persist(
        self,
        candidate: CheckedDocument,
        source: str,
        rollback_of: str | None = None,
        request_id: str | None = None,
        expected_hash: str | None = None,
    ) -> VersionRecord:
        """The candidate becomes the persisted document (result pending). `expected_hash`: the
        source hash the change was made against; another one stored raises StaleDocument."""
        records: list[VersionRecord] = []

        def append(state: StoreState) -> StoreState:
            if expected_hash is not None and state.source_hash != expected_hash:
                raise StaleDocument(state.source_hash)
            records[:] = [self._new_record(state, candidate, source, rollback_of, request_id)]
            return self._append(state, records[0], candidate)

        self._update(append)
        return records[0].model_copy(deep=True)

    def mark_active(self, version: str) -> int:
        """Record a successful activation of `version`; returns its config_version."""

        def activate(state: StoreState) -> StoreState:
            if not any(v.version == version for v in state.versions):
                raise KeyError(version)
            return self._activated(state, version)

        state = self._update(activate)
        return state.config_version

    def mark_result(self, version: str, result: VersionResult) -> None:
        def mark(state: StoreState) -> StoreState | None:
            for record in state.versions:
                if record.version == version:
                    record.result = result
                    return state
            return None

        self._update(mark)

    # ------------------------------------------------------------------ reads
    def reachable(self) -> bool:
        """Whether the store answers now (GET /api/v1/status, condition ManagementStoreAvailable)."""
        try:
            self.backend.revision()
        except (StoreUnavailable, StoreCorrupt):
            return False
        return True

    @property
    def document(self) -> dict[str, Any]:
        return copy.deepcopy(self._fresh().document)

    @property
    def source_hash(self) -> str:
        return self._fresh().source_hash

    @property
    def runtime_hash(self) -> str:
        return self._fresh().runtime_hash

    @property
    def latest_version(self) -> str:
        return self._fresh().latest_version

    @property
    def attempt(self) -> int:
        return self._fresh().attempt

    @property
    def active(self) -> ActiveRecord | None:
        active = self._fresh().active
        return active.model_copy(deep=True) if active else None

    @property
    def filename(self) -> str:
        return self._fresh().filename

    def versions(self) -> list[VersionRecord]:
        """Newest first."""
        return [v.model_copy(deep=True) for v in reversed(self._fresh().versions)]

    def find(self, version: str | None = None, config_version: int | None = None) -> VersionRecord | None:
        """A history entry by version id (or timestamp) or by the config_version it took.
        The active document is found even after it left the history."""
        state = self._fresh()
        for record in reversed(state.versions):
            if version is not None and version in (record.version, record.timestamp):
                return record.model_copy(deep=True)
            if config_version is not None and record.config_version == config_version:
                return record.model_copy(deep=True)
        active = state.active
        if active is not None and (version == active.version or config_version == active.config_version):
            return VersionRecord(
                version=active.version,
                timestamp=active.version,
                source="active",
                filename=state.filename,
                attempt=0,
                hash=active.source_hash,
                runtime_hash=active.runtime_hash,
                config_version=active.config_version,
                result="active",
                document=copy.deepcopy(active.document),
            )
        return None

    def snapshot_json(self) -> str:
        return json.dumps(self._fresh().model_dump(mode="json"), sort_keys=True)


STATE_ROOT_ENV = "SVC_SR_MANAGEMENT_STATE_DIR"


def state_dir_of(
    configured: str | Path | None, app_name: str, environ: Mapping[str, str] | None = None
) -> Path:
    """`configured` (GraphArgs.state_dir), else <$SVC_SR_MANAGEMENT_STATE_DIR>/<app>, else
    <working directory>/.cache/state/<app> (each application keeps its own history)."""
    if configured:
        return Path(configured)
    root = (os.environ if environ is None else environ).get(STATE_ROOT_ENV)
    return (Path(root) if root else Path.cwd() / ".cache" / "state") / app_name


def open_store(state_dir: Path, now: Callable[[], float] = time.time) -> ConfigStore:
    """A store over `state_dir`; an unreadable state file is moved aside (kept for inspection)
    and the history starts fresh, so a corrupt file never keeps the router down."""
    store = ConfigStore(state_dir)
    try:
        store._load()
    except StoreCorrupt as exc:
        aside = state_dir / f"{STATE_FILE}.corrupt-{int(now())}"
        log.error("%s; moved aside to %s", exc, aside)
        (state_dir / STATE_FILE).replace(aside)
    return store
