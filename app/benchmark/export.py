"""`svc-sr benchmark export`: a stored run as JSON (its record and every question's result) or
CSV (one row per question), in shapes that QuestionResult and RunRecord read back."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from app.benchmark.records import QuestionResult, RunRecord

CSV_COLUMNS = tuple(QuestionResult.model_fields)


class RunExport(BaseModel):
    """`svc-sr benchmark export --format json`: the run's record and every question's result."""

    model_config = ConfigDict(extra="forbid")

    run: RunRecord
    results: list[QuestionResult]


def export_json(record: RunRecord, results: Sequence[QuestionResult]) -> bytes:
    return RunExport(run=record, results=list(results)).model_dump_json(indent=1).encode("utf-8") + b"\n"


def export_csv(results: Iterable[QuestionResult]) -> bytes:
    """One row per question, QuestionResult's fields as columns; an absent value is an empty cell
    and a boolean is true/false, both of which QuestionResult reads back."""
    text = io.StringIO(newline="")
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for result in results:
        row = result.model_dump(mode="json")
        writer.writerow(_cell(row[column]) for column in CSV_COLUMNS)
    return text.getvalue().encode("utf-8")


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
