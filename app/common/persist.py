"""Crash-safe file writes: a reader sees the old bytes or the new bytes, never a mix.

Write to a temp file in the same directory, fsync it, os.replace() it over the target,
then fsync the directory so the rename itself survives a power cut.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            _write_flushed(handle, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def remove_orphan_temps(path: Path) -> int:
    """Delete the temp files atomic_write_bytes left for `path` when its process died mid-write.
    Only safe while holding the lock every writer of `path` takes (a live writer's temp file
    looks the same); returns how many were removed."""
    removed = 0
    for orphan in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            orphan.unlink()
            removed += 1
    return removed


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1).encode("utf-8"))


def write_synced(path: Path, data: bytes) -> None:
    """Write `path` and fsync it (the caller makes it visible atomically: a rename)."""
    with path.open("wb") as handle:
        _write_flushed(handle, data)


def _write_flushed(handle: BinaryIO, data: bytes) -> None:
    handle.write(data)
    handle.flush()
    os.fsync(handle.fileno())


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories; the rename is still atomic
        pass
    finally:
        os.close(fd)
