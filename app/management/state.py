"""ConfigStore: the persisted configuration document, its version history and the active record.

Everything lives in one file, `<state_dir>/state.json`, replaced atomically (persist.py) on
every change, so a crash leaves either the previous state or the next one, never a
half-written document or a history that disagrees with it. The in-memory state changes
only after the write succeeded. `state_dir=None` keeps everything in memory (tests, the
standalone app without a state directory).

History keeps the last `history_limit` persisted documents (spec 1: 10); the active
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

from app.management.documents import Candidate
from app.management.persist import atomic_write_bytes, atomic_write_json

log = logging.getLogger("svc_sr.management.state")

STATE_FILE = "state.json"
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
    filename: str = "config.yaml"
    attempt: int = 0
    config_version: int = 0
    document: dict[str, Any] = Field(default_factory=dict)
    source_hash: str = ""
    runtime_hash: str = ""
    latest_version: str = ""
    active: ActiveRecord | None = None
    versions: list[VersionRecord] = Field(default_factory=list)  # oldest first


class StoreCorrupt(Exception):
    pass


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class ConfigStore:
    def __init__(
        self,
        state_dir: Path | str | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        mirror_file: Path | str | None = None,
    ) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be >= 1")
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.history_limit = history_limit
        self.mirror_file = Path(mirror_file) if mirror_file is not None else None
        self._state = StoreState()
        self._lock = threading.Lock()
        self._last_stamp = ""

    # ------------------------------------------------------------------ files
    @property
    def path(self) -> Path | None:
        return self.state_dir / STATE_FILE if self.state_dir is not None else None

    def _load(self) -> StoreState | None:
        path = self.path
        if path is None or not path.exists():
            return None
        try:
            return StoreState.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise StoreCorrupt(f"cannot read {path}: {exc}") from None

    def _commit(self, state: StoreState) -> None:
        """Write, then swap in memory: a failed write leaves both the file and memory unchanged."""
        if self.path is not None:
            atomic_write_json(self.path, state.model_dump(mode="json"))
        self._state = state
        if self.mirror_file is not None:
            try:
                text = yaml.safe_dump(state.document, sort_keys=False, allow_unicode=True, width=100)
                atomic_write_bytes(self.mirror_file, text.encode("utf-8"))
            except OSError as exc:  # the state file is the truth; the mirror is a convenience
                log.warning("could not write %s: %s", self.mirror_file, exc.strerror)

    def _stamp(self) -> str:
        stamp = _now()
        if stamp <= self._last_stamp:  # two persists within one microsecond stay ordered and unique
            last = datetime.fromisoformat(self._last_stamp.replace("Z", "+00:00"))
            stamp = (
                (last + timedelta(microseconds=1)).isoformat(timespec="microseconds").replace("+00:00", "Z")
            )
        self._last_stamp = stamp
        return stamp

    # ------------------------------------------------------------------ startup
    def initialize(self, serving: Candidate, filename: str = "config.yaml", source: str = "startup") -> None:
        """Load the state directory (if any) and record `serving` (what the process was started with)
        as the active configuration: a new version when its document differs from the stored one."""
        with self._lock:
            stored = self._load()
            state = stored or StoreState(filename=filename)
            self._last_stamp = max((v.version for v in state.versions), default="")
            if (
                state.active is not None
                and state.active.source_hash == serving.source_hash
                and state.source_hash == serving.source_hash
            ):
                self._state = state
                return
            state = state.model_copy(deep=True)
            state.filename = filename
            record = self._new_record(state, serving, "file" if stored else source, None, None)
            state = self._append(state, record, serving)
            state = self._activated(state, record.version)
            self._commit(state)

    def _new_record(
        self,
        state: StoreState,
        candidate: Candidate,
        source: str,
        rollback_of: str | None,
        request_id: str | None,
    ) -> VersionRecord:
        stamp = self._stamp()
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

    def _append(self, state: StoreState, record: VersionRecord, candidate: Candidate) -> StoreState:
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
        self, candidate: Candidate, source: str, rollback_of: str | None = None, request_id: str | None = None
    ) -> VersionRecord:
        """The candidate becomes the persisted document (result pending)."""
        with self._lock:
            state = self._state.model_copy(deep=True)
            record = self._new_record(state, candidate, source, rollback_of, request_id)
            self._commit(self._append(state, record, candidate))
            return record.model_copy(deep=True)

    def mark_active(self, version: str) -> int:
        """Record a successful activation of `version`; returns its config_version."""
        with self._lock:
            state = self._state.model_copy(deep=True)
            if not any(v.version == version for v in state.versions):
                raise KeyError(version)
            state = self._activated(state, version)
            self._commit(state)
            return state.config_version

    def mark_result(self, version: str, result: VersionResult) -> None:
        with self._lock:
            state = self._state.model_copy(deep=True)
            for record in state.versions:
                if record.version == version:
                    record.result = result
                    self._commit(state)
                    return

    # ------------------------------------------------------------------ reads
    @property
    def document(self) -> dict[str, Any]:
        return copy.deepcopy(self._state.document)

    @property
    def source_hash(self) -> str:
        return self._state.source_hash

    @property
    def runtime_hash(self) -> str:
        return self._state.runtime_hash

    @property
    def latest_version(self) -> str:
        return self._state.latest_version

    @property
    def attempt(self) -> int:
        return self._state.attempt

    @property
    def active(self) -> ActiveRecord | None:
        return self._state.active.model_copy(deep=True) if self._state.active else None

    @property
    def filename(self) -> str:
        return self._state.filename

    def versions(self) -> list[VersionRecord]:
        """Newest first."""
        return [v.model_copy(deep=True) for v in reversed(self._state.versions)]

    def find(self, version: str | None = None, config_version: int | None = None) -> VersionRecord | None:
        """A history entry by version id (or timestamp) or by the config_version it took.
        The active document is found even after it left the history."""
        for record in reversed(self._state.versions):
            if version is not None and version in (record.version, record.timestamp):
                return record.model_copy(deep=True)
            if config_version is not None and record.config_version == config_version:
                return record.model_copy(deep=True)
        active = self._state.active
        if active is not None and (version == active.version or config_version == active.config_version):
            return VersionRecord(
                version=active.version,
                timestamp=active.version,
                source="active",
                filename=self.filename,
                attempt=0,
                hash=active.source_hash,
                runtime_hash=active.runtime_hash,
                config_version=active.config_version,
                result="active",
                document=copy.deepcopy(active.document),
            )
        return None

    def snapshot_json(self) -> str:
        return json.dumps(self._state.model_dump(mode="json"), sort_keys=True)


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
