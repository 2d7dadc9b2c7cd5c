"""Where ConfigStore keeps its state: in memory, in one file, or in Redis.

Every backend stores one `StoreState` document with a `revision` and saves it by
compare-and-set: `save(state, expected)` writes only if the stored revision is still
`expected`, else raises `StateConflict` and the caller re-reads and retries. That one rule
makes an If-Match check, a version append and an activation record atomic across Ingress
replicas on different nodes, without locks held over the network.

- `MemoryStateStore`: tests and the standalone app without a state directory.
- `FileStateStore`: `<state_dir>/state.json` (or another document: the Elo ratings),
  replaced atomically (app/common/persist.py); the compare-and-set runs under an advisory
  lock file, so several Ingress replicas on one node share it safely; a reader re-reads the
  file only when its stat changed.
- `RedisStateStore`: two keys, `<prefix>state` (the JSON document) and `<prefix>revision`;
  a Lua script compares and sets both in one step. `shared`: readers check the revision
  (one GET) and reload when another replica wrote.

Failures to reach the store (Redis down or slower than its timeout, a disk that refuses
the write) raise `StoreUnavailable`: nothing was written.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

from app.common.persist import atomic_write_bytes, remove_orphan_temps
from app.state.shared_store import StoreUnavailable, store_errors

if TYPE_CHECKING:
    import redis

STATE_FILE = "state.json"
LOCK_FILE = ".state.lock"


class StoreCorrupt(Exception):
    """The stored state cannot be read back (not JSON, not the schema)."""


class StateConflict(Exception):
    """Another writer saved since this state was read: re-read and retry."""


class Revisioned(Protocol):
    """What a backend needs of the state it stores (state.StoreState)."""

    revision: int

    def model_dump_json(self, *, indent: int | None = None) -> str: ...


class StateStore(Protocol):
    shared: bool  # other processes write it too: readers must check for their changes

    def describe(self) -> str: ...

    def load_json(self) -> str | None: ...

    def revision(self) -> int: ...

    def save(self, state: Revisioned, expected: int) -> None: ...


class MemoryStateStore:
    shared = False

    def __init__(self) -> None:
        self._text: str | None = None
        self._revision = 0

    def describe(self) -> str:
        return "memory"

    def load_json(self) -> str | None:
        return self._text

    def revision(self) -> int:
        return self._revision

    def save(self, state: Revisioned, expected: int) -> None:
        if expected != self._revision:
            raise StateConflict(f"revision {self._revision}, expected {expected}")
        self._text, self._revision = state.model_dump_json(), state.revision


class _RevisionOnly(BaseModel):
    revision: int = 0


class FileStateStore:
    shared = True  # other replicas on this node may write it

    def __init__(self, state_dir: Path, filename: str = STATE_FILE, lock_name: str = LOCK_FILE) -> None:
        self.state_dir = state_dir
        self.path = state_dir / filename
        self.lock_name = lock_name  # another document in the same directory takes its own lock
        self._seen: tuple[tuple[int, int, int], int] | None = None  # (stat, revision) last parsed

    def describe(self) -> str:
        return str(self.state_dir)

    def load_json(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreCorrupt(f"cannot read {self.path}: {exc}") from None

    def revision(self) -> int:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if self._seen is not None and self._seen[0] == key:
            return self._seen[1]  # unchanged since parsed: no read (reads check on every access)
        text = self.load_json()
        if text is None:
            return 0
        try:
            revision = _RevisionOnly.model_validate_json(text).revision
        except ValueError as exc:
            raise StoreCorrupt(f"cannot read {self.path}: {exc}") from None
        self._seen = (key, revision)
        return revision

    def save(self, state: Revisioned, expected: int) -> None:
        try:
            with self._locked():
                current = self.revision()
                if current != expected:
                    raise StateConflict(f"revision {current}, expected {expected}")
                remove_orphan_temps(self.path)  # a writer killed mid-write (writers hold the lock)
                atomic_write_bytes(self.path, state.model_dump_json(indent=1).encode("utf-8"))
        except OSError as exc:
            raise StoreUnavailable(f"cannot write {self.path}: {exc.strerror or exc}") from exc

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / self.lock_name, "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# KEYS[1] state, KEYS[2] revision; ARGV[1] expected revision, ARGV[2] state JSON, ARGV[3] new revision.
_COMPARE_AND_SET = """
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current ~= tonumber(ARGV[1]) then return current end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
return -1
"""


class RedisStateStore:
    shared = True

    def __init__(self, client: redis.Redis, prefix: str, where: str = "redis") -> None:
        self.client = client
        self.prefix = prefix
        self.where = where
        self._script = client.register_script(_COMPARE_AND_SET)

    def describe(self) -> str:
        return f"{self.where} (keys {self.prefix}*)"

    def load_json(self) -> str | None:
        with store_errors(f"{self.where} read"):
            raw = self.client.get(f"{self.prefix}state")
        return raw.decode("utf-8") if isinstance(raw, bytes) else raw

    def revision(self) -> int:
        with store_errors(f"{self.where} read"):
            raw = self.client.get(f"{self.prefix}revision")
        return int(raw) if raw is not None else 0

    def save(self, state: Revisioned, expected: int) -> None:
        with store_errors(f"{self.where} write"):
            current = self._script(
                keys=[f"{self.prefix}state", f"{self.prefix}revision"],
                args=[expected, state.model_dump_json(), state.revision],
            )
        if int(current) != -1:
            raise StateConflict(f"revision {current}, expected {expected}")
