"""Runs in progress, so that one can be cancelled and an interrupted one recovered.

While `benchmark run` / `replay` works, its run lives in `<store>/active/<run_id>/`:

    state.json     an ActiveState: what the run is (dataset, config, the planned question ids,
                   batch size, seed), who runs it (host, pid) and its status
    config.json    the exact configuration document routed (a replay's too: recovery never
                   re-fetches a router's config, which may have changed since)
    results.jsonl  one QuestionResult a line, appended and synced after every batch

The runner's batch hook appends each batch and reads the status: `benchmark cancel` writes
`cancel-requested`, and the run stops at its next batch boundary, keeping what it scored
(status `cancelled`). A run whose process died shows as `interrupted` (its pid is gone on
this host). `benchmark recover` routes the questions not scored yet and stores the run as a
finished one would be; the active directory is removed when a run is stored.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from app.benchmark.records import QuestionResult
from app.benchmark.store import RunStore, StoreError, utc_now
from app.common.persist import atomic_write_bytes, fsync_dir

ACTIVE = "active"
STATE_FILE = "state.json"
CONFIG_FILE = "config.json"
RESULTS_FILE = "results.jsonl"

Status = Literal["running", "cancel-requested", "cancelled", "interrupted", "failed"]


class RunCancelled(Exception):  # noqa: N818 - a stop, not an error
    """Raised from the batch hook when the run's status asks it to stop."""


class ActiveState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    created_at: str
    updated_at: str
    kind: str  # run | replay
    dataset: str  # directory, absolute
    dataset_fingerprint: str
    config: str  # the label the record will carry (path or `<url>#version=N`)
    planned: list[int]  # every question id the run routes, in dataset order
    subset: bool  # the record's question_ids: the planned ids (True) or None (every question)
    batch_size: int
    seed: int
    experiment: str | None = None
    cross_validate: str | None = None  # `run --cross-validate` (app/benchmark/sweep.py)
    sweep: str | None = None  # `run --sweep`: routed again when the run is recovered
    host: str
    pid: int
    status: Status = "running"
    error: str | None = None
    duration_s: float = 0.0  # time spent routing, over every attempt


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


class ActiveRuns:
    def __init__(self, store: RunStore) -> None:
        self.dir = store.root / ACTIVE

    def _run_dir(self, run_id: str) -> Path:
        return self.dir / run_id

    # ------------------------------------------------------------------ writing

    def start(self, state: ActiveState, config_document: dict[str, Any]) -> None:
        run_dir = self._run_dir(state.run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(run_dir / CONFIG_FILE, json.dumps(config_document).encode())
        (run_dir / RESULTS_FILE).touch()
        self.write_state(state)

    def adopt(self, state: ActiveState) -> ActiveState:
        """This process now runs `state` (recovery): its host, pid and status."""
        state.host, state.pid, state.status, state.error = socket.gethostname(), os.getpid(), "running", None
        self.write_state(state)
        return state

    def write_state(self, state: ActiveState) -> None:
        state.updated_at = utc_now().isoformat(timespec="seconds")
        atomic_write_bytes(self._run_dir(state.run_id) / STATE_FILE, state.model_dump_json(indent=1).encode())

    def append(self, run_id: str, results: list[QuestionResult]) -> None:
        path = self._run_dir(run_id) / RESULTS_FILE
        with path.open("ab") as out:
            out.write("".join(r.model_dump_json() + "\n" for r in results).encode())
            out.flush()
            os.fsync(out.fileno())

    def checkpoint(self, run_id: str, results: list[QuestionResult]) -> None:
        """The batch hook: keep the batch, then stop when a cancel was asked for."""
        self.append(run_id, results)
        if self.load(run_id).status == "cancel-requested":
            raise RunCancelled(run_id)

    def finish(self, run_id: str) -> None:
        shutil.rmtree(self._run_dir(run_id), ignore_errors=True)
        with contextlib.suppress(OSError):
            fsync_dir(self.dir)

    # ------------------------------------------------------------------ reading

    def ids(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(
            (p.name for p in self.dir.iterdir() if (p / STATE_FILE).is_file()),
            reverse=True,
        )

    def resolve(self, ref: str) -> str:
        ids = self.ids()
        if ref in ids:
            return ref
        matches = [i for i in ids if ref and i.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise StoreError(f"no run in progress or interrupted named {ref!r} in {self.dir}")
        raise StoreError(f"run id {ref!r} is ambiguous: it starts {len(matches)} runs in progress")

    def load(self, ref: str) -> ActiveState:
        """The state, with `running` read as `interrupted` when its process is gone."""
        path = self._run_dir(self.resolve(ref)) / STATE_FILE
        try:
            state = ActiveState.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            raise StoreError(f"{path}: unreadable run state ({type(exc).__name__})") from None
        if state.status in ("running", "cancel-requested") and not self.alive(state):
            state.status = "interrupted"
        return state

    def states(self) -> list[ActiveState]:
        out = []
        for run_id in self.ids():
            with contextlib.suppress(StoreError):
                out.append(self.load(run_id))
        return out

    @staticmethod
    def alive(state: ActiveState) -> bool:
        """Whether the run's process still runs; another host's run is taken as alive."""
        return state.host != socket.gethostname() or pid_alive(state.pid)

    def config_document(self, run_id: str) -> dict[str, Any]:
        path = self._run_dir(run_id) / CONFIG_FILE
        try:
            document = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise StoreError(f"{path}: unreadable config ({type(exc).__name__})") from None
        if not isinstance(document, dict):
            raise StoreError(f"{path}: not a config document")
        return document

    def results(self, run_id: str) -> list[QuestionResult]:
        """The results kept so far; a torn last line (a crash mid-write) is dropped."""
        path = self._run_dir(run_id) / RESULTS_FILE
        out: dict[int, QuestionResult] = {}
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"{path}: unreadable results ({type(exc).__name__})") from None
        for line in lines:
            with contextlib.suppress(ValidationError):
                result = QuestionResult.model_validate_json(line)
                out[result.question_id] = result
        return list(out.values())


def new_state(**fields: Any) -> ActiveState:
    now = utc_now().isoformat(timespec="seconds")
    return ActiveState(updated_at=now, host=socket.gethostname(), pid=os.getpid(), **fields)
