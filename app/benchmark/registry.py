"""What the benchmark store keeps beside runs and dataset indexes (app/benchmark/store.py):

    experiments/<name>.json   an Experiment: a named group of runs (`benchmark experiment`)
    targets/<name>.json       a Target: a named router or config to benchmark (`benchmark target`)
    exclusions/<name>.json    the question ids a prepared dataset's runs leave out
    store.json                the store's marker, written by `benchmark setup`

Every file is written to a temporary file and renamed (never half written). Names follow the
dataset names' rule (letters, digits, '.', '_', '-'), so a name is always a safe file name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from app.benchmark.store import RunStore, StoreError, check_dataset_name, utc_now
from app.common.persist import atomic_write_bytes

EXPERIMENTS = "experiments"
TARGETS = "targets"
EXCLUSIONS = "exclusions"
MARKER = "store.json"
STORE_VERSION = 1


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Experiment(_Entry):
    name: str
    description: str = ""
    created_at: str
    runs: list[str] = []  # run ids, in the order they were attached


class Target(_Entry):
    """A router's management API (`kind: router`, replayed) or a config file (`kind: config`, run)."""

    name: str
    kind: Literal["router", "config"]
    url: str | None = None
    token_env: str | None = None
    config: str | None = None  # absolute path
    description: str = ""
    registered_at: str


class Exclusions(_Entry):
    dataset: str
    question_ids: list[int] = []  # sorted
    updated_at: str


class StoreMarker(_Entry):
    version: int = STORE_VERSION
    created_at: str


def now() -> str:
    return utc_now().isoformat(timespec="seconds")


E = TypeVar("E", bound=_Entry)


class Registry:
    """Experiments, targets and exclusions of one store."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.root = store.root

    # ------------------------------------------------------------------ generic

    def _path(self, folder: str, name: str) -> Path:
        return self.root / folder / f"{check_name(name, folder[:-1])}.json"

    def _load(self, model: type[E], folder: str, name: str) -> E | None:
        path = self._path(folder, name)
        try:
            return model.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            raise StoreError(f"{path}: unreadable ({type(exc).__name__})") from None

    def _save(self, folder: str, name: str, entry: _Entry) -> Path:
        path = self._path(folder, name)
        atomic_write_bytes(path, (entry.model_dump_json(indent=1) + "\n").encode())
        return path

    def _list(self, model: type[E], folder: str) -> list[E]:
        directory = self.root / folder
        if not directory.is_dir():
            return []
        out: list[E] = []
        for path in sorted(directory.glob("*.json"), key=lambda p: p.stem):
            if path.name.startswith("."):
                continue
            with contextlib.suppress(StoreError):
                entry = self._load(model, folder, path.stem)
                if entry is not None:
                    out.append(entry)
        return out

    # ------------------------------------------------------------------ experiments

    def experiments(self) -> list[Experiment]:
        return self._list(Experiment, EXPERIMENTS)

    def experiment(self, name: str) -> Experiment:
        found = self._load(Experiment, EXPERIMENTS, name)
        if found is None:
            raise StoreError(f"no experiment {name!r} (see `svc-sr benchmark experiment list`)")
        return found

    def create_experiment(self, name: str, description: str = "") -> Experiment:
        if self._load(Experiment, EXPERIMENTS, name) is not None:
            raise StoreError(f"experiment {name!r} already exists")
        experiment = Experiment(name=name, description=description, created_at=now())
        self._save(EXPERIMENTS, name, experiment)
        return experiment

    def attach(self, name: str, refs: Iterable[str]) -> tuple[Experiment, list[str]]:
        """Attach runs (ids or unique prefixes) to an experiment; the experiment and the ids
        newly attached (a run attached already is not repeated)."""
        experiment = self.experiment(name)
        added = []
        for ref in refs:
            run_id = self.store.resolve(ref)
            if run_id not in experiment.runs and run_id not in added:
                added.append(run_id)
        experiment.runs += added
        self._save(EXPERIMENTS, name, experiment)
        return experiment, added

    def delete_experiment(self, name: str) -> Experiment:
        experiment = self.experiment(name)
        self._path(EXPERIMENTS, name).unlink()
        return experiment

    # ------------------------------------------------------------------ targets

    def targets(self) -> list[Target]:
        return self._list(Target, TARGETS)

    def target(self, name: str) -> Target:
        found = self._load(Target, TARGETS, name)
        if found is None:
            raise StoreError(f"no target {name!r} (see `svc-sr benchmark target list`)")
        return found

    def register_target(self, target: Target, replace: bool = False) -> Path:
        if not replace and self._load(Target, TARGETS, target.name) is not None:
            raise StoreError(f"target {target.name!r} already exists (--replace overwrites it)")
        return self._save(TARGETS, target.name, target)

    # ------------------------------------------------------------------ exclusions

    def exclusions(self, dataset: str) -> Exclusions:
        found = self._load(Exclusions, EXCLUSIONS, dataset)
        return found or Exclusions(dataset=dataset, updated_at="")

    def save_exclusions(self, exclusions: Exclusions) -> None:
        exclusions.question_ids = sorted(set(exclusions.question_ids))
        exclusions.updated_at = now()
        self._save(EXCLUSIONS, exclusions.dataset, exclusions)

    # ------------------------------------------------------------------ marker

    def marker(self) -> StoreMarker | None:
        path = self.root / MARKER
        try:
            return StoreMarker.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            return None

    def set_up(self) -> tuple[StoreMarker, bool]:
        """The store's folders and marker; (marker, whether this call created it)."""
        for folder in (self.store.runs_dir, self.store.datasets_dir, *(self.root / f for f in FOLDERS)):
            folder.mkdir(parents=True, exist_ok=True)
        existing = self.marker()
        if existing is not None:
            return existing, False
        marker = StoreMarker(created_at=now())
        atomic_write_bytes(self.root / MARKER, (marker.model_dump_json(indent=1) + "\n").encode())
        return marker, True


FOLDERS = (EXPERIMENTS, TARGETS, EXCLUSIONS)


def check_name(name: str, what: str) -> str:
    try:
        return check_dataset_name(name)
    except StoreError:
        raise StoreError(
            f"{what} name {name!r}: use letters, digits, '.', '_' or '-' "
            "(at most 64, starting with a letter or digit)"
        ) from None
