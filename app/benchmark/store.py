"""Where benchmark runs and prepared datasets live: a store directory (`svc-sr benchmark
--store`, default `$SVC_SR_STATE_DIR/benchmark`, else `.cache/benchmark`).

    runs/<run_id>/run.json        a RunRecord (app/benchmark/records.py)
    runs/<run_id>/results.jsonl   one QuestionResult a line, in dataset order
    datasets/<name>.json          a DatasetIndex, written by `dataset prepare`

A run is written into a hidden temporary directory and renamed into place, so a reader (or a
crash) never sees half a run; an index file is written to a temporary file and renamed the
same way. Run ids sort by creation time (`YYYYmmdd-HHMMSS-<6 hex>`); a unique prefix names a
run as well as its full id.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from app.benchmark.dataset import Dataset
from app.benchmark.records import QuestionResult, RunRecord
from app.common.persist import atomic_write_bytes, fsync_dir, write_synced

RUNS = "runs"
DATASETS = "datasets"
RUN_FILE = "run.json"
RESULTS_FILE = "results.jsonl"
DATASET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class StoreError(ValueError):
    """An unknown or ambiguous run id, a damaged run, an unknown dataset name."""


class DatasetIndex(BaseModel):
    """What `dataset prepare` records about a dataset directory."""

    model_config = ConfigDict(extra="forbid")

    name: str
    path: str  # the dataset directory, absolute
    fingerprint: str  # sha256 of questions.jsonl + model_results.csv
    prepared_at: str  # ISO 8601, UTC
    questions: int
    results: int
    models: list[str]
    categories: dict[str, int]  # category -> questions
    accuracy: dict[str, float]  # model -> share of its recorded answers that are right


def default_store_dir() -> Path:
    state = os.environ.get("SVC_SR_STATE_DIR")
    return Path(state) / "benchmark" if state else Path(".cache/benchmark")


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_run_id(created: datetime) -> str:
    return f"{created:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def index_dataset(dataset: Dataset, name: str | None = None) -> DatasetIndex:
    categories: dict[str, int] = {}
    for question in dataset.questions:
        categories[question.category] = categories.get(question.category, 0) + 1
    return DatasetIndex(
        name=check_dataset_name(name or dataset.name),
        path=str(dataset.path),
        fingerprint=dataset.fingerprint,
        prepared_at=utc_now().isoformat(timespec="seconds"),
        questions=len(dataset.questions),
        results=len(dataset.answers),
        models=dataset.models,
        categories=dict(sorted(categories.items())),
        accuracy=dataset.accuracy_by_model(),
    )


def check_dataset_name(name: str) -> str:
    if not DATASET_NAME.match(name):
        raise StoreError(
            f"dataset name {name!r}: use letters, digits, '.', '_' or '-' "
            "(at most 64, starting with a letter or digit)"
        )
    return name


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def runs_dir(self) -> Path:
        return self.root / RUNS

    @property
    def datasets_dir(self) -> Path:
        return self.root / DATASETS

    # ------------------------------------------------------------------ runs

    def save(self, record: RunRecord, results: list[QuestionResult]) -> Path:
        """Write a run atomically (a temporary directory renamed into place); its directory."""
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        target = self.runs_dir / record.run_id
        if target.exists():
            raise StoreError(f"run {record.run_id} already exists in {self.runs_dir}")
        staging = Path(tempfile.mkdtemp(prefix=f".{record.run_id}.", dir=self.runs_dir))
        try:
            write_synced(
                staging / RESULTS_FILE, "".join(r.model_dump_json() + "\n" for r in results).encode()
            )
            write_synced(staging / RUN_FILE, (record.model_dump_json(indent=1) + "\n").encode())
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fsync_dir(self.runs_dir)
        return target

    def run_ids(self) -> list[str]:
        """Stored run ids, newest first: by the id's second, then by when the run was stored (two
        runs of one second would otherwise order by their random suffix)."""
        if not self.runs_dir.is_dir():
            return []
        stored = [
            (p.name[:15], (p / RUN_FILE).stat().st_mtime_ns, p.name)
            for p in self.runs_dir.iterdir()
            if not p.name.startswith(".") and (p / RUN_FILE).is_file()
        ]
        return [name for _, _, name in sorted(stored, reverse=True)]

    def list_runs(self) -> list[RunRecord]:
        """Every readable run, newest first (a damaged one is left out)."""
        out = []
        for run_id in self.run_ids():
            with contextlib.suppress(StoreError):
                out.append(self.load_record(run_id))
        return out

    def resolve(self, ref: str) -> str:
        """The run id that `ref` is, or is the unique prefix of; StoreError otherwise."""
        ids = self.run_ids()
        if ref in ids:
            return ref
        matches = [run_id for run_id in ids if ref and run_id.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise StoreError(f"no run {ref!r} in {self.runs_dir}")
        shown = ", ".join(matches[:5]) + (" ..." if len(matches) > 5 else "")
        raise StoreError(f"run id {ref!r} is ambiguous: it starts {len(matches)} runs ({shown})")

    def load_record(self, ref: str) -> RunRecord:
        path = self.runs_dir / self.resolve(ref) / RUN_FILE
        try:
            return RunRecord.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            raise StoreError(f"{path}: unreadable run record ({type(exc).__name__})") from None

    def load_results(self, ref: str) -> list[QuestionResult]:
        path = self.runs_dir / self.resolve(ref) / RESULTS_FILE
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
            return [QuestionResult.model_validate_json(line) for line in lines if line.strip()]
        except (OSError, UnicodeDecodeError, ValidationError) as exc:
            raise StoreError(f"{path}: unreadable results ({type(exc).__name__})") from None

    def load(self, ref: str) -> tuple[RunRecord, list[QuestionResult]]:
        return self.load_record(ref), self.load_results(ref)

    # ------------------------------------------------------------------ datasets

    def save_dataset(self, index: DatasetIndex) -> Path:
        path = self.datasets_dir / f"{check_dataset_name(index.name)}.json"
        atomic_write_bytes(path, (index.model_dump_json(indent=1) + "\n").encode())
        return path

    def load_dataset(self, name: str) -> DatasetIndex:
        path = self.datasets_dir / f"{check_dataset_name(name)}.json"
        try:
            return DatasetIndex.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            raise StoreError(
                f"no prepared dataset {name!r} in {self.datasets_dir} (run `dataset prepare`)"
            ) from None
        except (OSError, ValidationError) as exc:
            raise StoreError(f"{path}: unreadable dataset index ({type(exc).__name__})") from None

    def list_datasets(self) -> list[DatasetIndex]:
        """Prepared datasets by name (an unreadable index is left out)."""
        if not self.datasets_dir.is_dir():
            return []
        out = []
        for path in sorted(self.datasets_dir.glob("*.json"), key=lambda p: p.stem):
            if path.name.startswith("."):
                continue
            with contextlib.suppress(StoreError):
                out.append(self.load_dataset(path.stem))
        return out
