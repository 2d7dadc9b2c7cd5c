"""The labelled rows `svc-srun train` reads (docs/model-runtime.md, "Train one"), their check
and the seeded held-out split.

Rows, JSON lines (`.jsonl`, `.json`) or CSV (a header row; a `spans` cell holds the JSON list):
- sequence-classification: `{"text", "label"}`;
- token-classification: `{"text", "spans": [{"start", "end", "label"}]}`, offsets in code
  points of the text (Python `str` indices), end exclusive, spans apart from each other.
A bad row is a `TrainDataError` naming the file, the line and the reason; nothing is written.
"""

from __future__ import annotations

import csv
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.common.digest import file_sha256

Kind = Literal["sequence-classification", "token-classification"]
KINDS: tuple[Kind, ...] = ("sequence-classification", "token-classification")


class TrainDataError(ValueError):
    """A data file that cannot train: where (file, line) and why."""


class _Row(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str = Field(min_length=1)


class LabelRow(_Row):
    label: str = Field(min_length=1)


class SpanLabel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    start: int = Field(ge=0)
    end: int = Field(ge=1)
    label: str = Field(min_length=1)

    @model_validator(mode="after")
    def _a_type(self) -> SpanLabel:
        if self.label == "O" or self.label[:2] in ("B-", "I-"):
            raise ValueError(f"label {self.label!r}: name the entity type (EMAIL), not a BIO tag")
        return self


class SpanRow(_Row):
    spans: list[SpanLabel]

    @model_validator(mode="after")
    def _inside_and_apart(self) -> SpanRow:
        previous = 0
        for span in sorted(self.spans, key=lambda s: s.start):
            if span.end <= span.start or span.end > len(self.text):
                raise ValueError(
                    f"span {span.start}-{span.end} is not inside the text ({len(self.text)} characters)"
                )
            if span.start < previous:
                raise ValueError(f"span {span.start}-{span.end} overlaps the one before it")
            previous = span.end
        return self


Row = LabelRow | SpanRow


def _records(path: Path) -> list[tuple[int, object]]:
    """(line number, parsed record) of a JSON-lines or CSV file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainDataError(f"{path}: cannot read: {exc}") from None
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        out: list[tuple[int, object]] = []
        for record in reader:
            row: dict[str, object] = dict(record)
            if isinstance(row.get("spans"), str):
                try:
                    row["spans"] = json.loads(str(row["spans"]))
                except json.JSONDecodeError as exc:
                    raise TrainDataError(f"{path}:{reader.line_num}: spans is not JSON: {exc}") from None
            out.append((reader.line_num, row))
        return out
    records = []
    # lines end at "\n" only: a JSON string may hold U+2028 or U+0085, which splitlines() breaks on
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            try:
                records.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise TrainDataError(f"{path}:{number}: not JSON: {exc}") from None
    return records


def read_rows(path: Path, kind: Kind) -> list[Row]:
    """Every row of `path`, checked; TrainDataError on the first bad one."""
    model: type[LabelRow] | type[SpanRow] = LabelRow if kind == "sequence-classification" else SpanRow
    rows: list[Row] = []
    for number, record in _records(path):
        try:
            rows.append(model.model_validate(record))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "row"
            raise TrainDataError(f"{path}:{number}: {where}: {first['msg']}") from None
    if not rows:
        raise TrainDataError(f"{path}: no rows")
    return rows


def label_set(rows: list[Row]) -> list[str]:
    """The labels (sequence classification) or entity types (token classification), sorted."""
    found: set[str] = set()
    for row in rows:
        if isinstance(row, LabelRow):
            found.add(row.label)
        else:
            found.update(span.label for span in row.spans)
    return sorted(found)


def split(rows: list[Row], eval_fraction: float, seed: int) -> tuple[list[Row], list[Row]]:
    """(train, held out): a seeded shuffle, stratified by label for sequence classification,
    so every label with two rows or more has one held out."""
    rng = random.Random(seed)
    groups: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        groups[row.label if isinstance(row, LabelRow) else ""].append(row)
    train: list[Row] = []
    held: list[Row] = []
    for key in sorted(groups):
        group = list(groups[key])
        rng.shuffle(group)
        n_held = max(1, round(len(group) * eval_fraction)) if len(group) > 1 else 0
        held += group[:n_held]
        train += group[n_held:]
    rng.shuffle(train)
    return train, held


def data_digest(path: Path) -> str:
    return "sha256:" + file_sha256(path)
