"""Dataset housekeeping for `svc-sr benchmark`: combining datasets, the state of each
preparation, and the catalog of dataset directories on this machine.

- combine: the questions and recorded answers of several datasets written as one dataset
  directory (`<store>/datasets/combined/<name>/`, the mmlu-pro format) to prepare like any
  other. A question id found in two sources is one question when both give the same question
  (answers merged; one (question, model) answered twice differently is an error), else an
  error, or, with `renumber`, the later source's ids are shifted past the largest id so far.
- preparation status: `current` while the directory still has the fingerprint it was
  prepared with, `changed` when its files changed since, `missing` when it is gone.
- catalog: dataset directories (questions.jsonl + model_results.csv) under the data roots
  (`$SVC_SR_BENCHMARK_DATA`, `:`-separated; else `../shared/data` and `data` when present),
  two levels deep, with the prepared name of each.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from app.benchmark.dataset import QUESTIONS_FILE, RESULT_COLUMNS, RESULTS_FILE, Dataset, DatasetError
from app.benchmark.store import DatasetIndex, RunStore, check_dataset_name
from app.common.persist import atomic_write_bytes

COMBINED = "combined"
DATA_ENV = "SVC_SR_BENCHMARK_DATA"
DEFAULT_ROOTS = ("../shared/data", "data")


class Preparation(BaseModel):
    name: str
    path: str
    prepared_at: str
    questions: int
    status: Literal["current", "changed", "missing"]


class CatalogEntry(BaseModel):
    path: str
    prepared_as: list[str]  # the prepared names of this directory
    size_bytes: int


def combine(sources: list[Dataset], store: RunStore, name: str, renumber: bool = False) -> Path:
    """Write the combined dataset directory; its path (DatasetError on a conflict)."""
    questions: dict[int, str] = {}  # id -> the question's JSON line
    rows: dict[tuple[int, str], tuple[str, bool, int]] = {}
    for source in sources:
        shift = 0
        if renumber and questions and any(q.question_id in questions for q in source.questions):
            shift = max(questions) + 1 - min(q.question_id for q in source.questions)
        for question in source.questions:
            moved = question.model_copy(update={"question_id": question.question_id + shift})
            line = moved.model_dump_json()
            known = questions.setdefault(moved.question_id, line)
            if known != line:
                raise DatasetError(
                    f"{source.path}: question_id {moved.question_id} is another question in an earlier "
                    "source (--renumber gives the later source's questions new ids)"
                )
        for (question_id, model), answer in source.answers.items():
            key = (question_id + shift, model)
            value = (answer.pred, answer.correct, answer.output_chars)
            if rows.setdefault(key, value) != value:
                raise DatasetError(
                    f"{source.path}: model {model!r} answered question {key[0]} differently in an earlier source"
                )
    directory = store.datasets_dir / COMBINED / check_dataset_name(name)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(
        directory / QUESTIONS_FILE, "".join(questions[i] + "\n" for i in sorted(questions)).encode()
    )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(RESULT_COLUMNS)
    for (question_id, model), (pred, correct, chars) in sorted(rows.items()):
        writer.writerow([question_id, model, pred, int(correct), chars])
    atomic_write_bytes(directory / RESULTS_FILE, out.getvalue().encode())
    return directory


def fingerprint(directory: Path) -> str | None:
    """The dataset fingerprint of a directory's two files (None: either is unreadable)."""
    try:
        digest = hashlib.sha256((directory / QUESTIONS_FILE).read_bytes())
        digest.update((directory / RESULTS_FILE).read_bytes())
    except OSError:
        return None
    return digest.hexdigest()


def preparation(index: DatasetIndex) -> Preparation:
    found = fingerprint(Path(index.path))
    status: Literal["current", "changed", "missing"] = (
        "missing" if found is None else "current" if found == index.fingerprint else "changed"
    )
    return Preparation(
        name=index.name,
        path=index.path,
        prepared_at=index.prepared_at,
        questions=index.questions,
        status=status,
    )


def data_roots(given: list[Path] | None = None) -> list[Path]:
    if given:
        return given
    env = os.environ.get(DATA_ENV)
    candidates = [Path(p) for p in env.split(":") if p] if env else [Path(p) for p in DEFAULT_ROOTS]
    return [p for p in candidates if p.is_dir()]


def is_dataset_dir(path: Path) -> bool:
    return (path / QUESTIONS_FILE).is_file() and (path / RESULTS_FILE).is_file()


def discover(roots: list[Path], depth: int = 2) -> list[Path]:
    """Dataset directories at or under the roots (at most `depth` levels down), resolved."""
    found: dict[Path, None] = {}
    level = [r for r in roots if r.is_dir()]
    for _ in range(depth + 1):
        following: list[Path] = []
        for directory in level:
            if is_dataset_dir(directory):
                found[directory.resolve()] = None
            try:
                following += sorted(
                    p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")
                )
            except OSError:
                continue
        level = following
    return list(found)


def catalog(roots: list[Path], prepared: list[DatasetIndex]) -> list[CatalogEntry]:
    names: dict[str, list[str]] = {}
    for index in prepared:
        names.setdefault(index.path, []).append(index.name)
    paths = dict.fromkeys(
        [*discover(roots), *(Path(i.path) for i in prepared if is_dataset_dir(Path(i.path)))]
    )
    out = []
    for path in paths:
        size = sum((path / f).stat().st_size for f in (QUESTIONS_FILE, RESULTS_FILE))
        out.append(CatalogEntry(path=str(path), prepared_as=names.get(str(path), []), size_bytes=size))
    return out
