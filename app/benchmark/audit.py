"""Checks of a finished run against what it was computed from: `benchmark regrade` and
`reconcile-usage`. Stored runs are never changed: a regrade is stored as a new run.

- regrade: each scored question's recorded answer (the dataset's `pred` of the model the run
  scored) graded again against the question's answer key (letters compared, case and spaces
  ignored), instead of the dataset's `correct` column the run used. A dataset whose column
  disagrees with its key (the shared one has 53 such rows), or was corrected since, changes
  grades; the run's routing is kept as it was.
- reconcile: each row's tokens against the recorded answer's usage (the token rule: what the
  model reported), each row's cost against that usage at the config's pricing, and the run's
  stored totals against the sum of its rows.
"""

from __future__ import annotations

from pydantic import BaseModel

from app.accounting.cost import compute_cost
from app.benchmark.dataset import Dataset
from app.benchmark.records import QuestionResult, RunRecord
from app.config.pricing import Pricing

COST_TOLERANCE = 1e-9  # dollars: float sums of fractions of a cent


def grade(pred: str, answer: str) -> bool:
    return pred.strip().upper() == answer.strip().upper() != ""


class GradeChange(BaseModel):
    question_id: int
    model: str
    pred: str
    answer: str
    was: bool
    now: bool


def regrade(
    results: list[QuestionResult], dataset: Dataset
) -> tuple[list[QuestionResult], list[GradeChange]]:
    """The results graded again, and the grades that changed."""
    out: list[QuestionResult] = []
    changes: list[GradeChange] = []
    for row in results:
        question = dataset.question(row.question_id)
        recorded = dataset.answer(row.question_id, row.dataset_model) if row.dataset_model else None
        if question is None or recorded is None or row.error:
            out.append(row)
            continue
        correct = grade(recorded.pred, question.answer)
        if correct != row.correct:
            changes.append(
                GradeChange(
                    question_id=row.question_id,
                    model=row.dataset_model or "",
                    pred=recorded.pred,
                    answer=question.answer,
                    was=row.correct,
                    now=correct,
                )
            )
        out.append(row.model_copy(update={"correct": correct}))
    return out, changes


class UsageMismatch(BaseModel):
    question_id: int
    model: str
    field: str  # prompt_tokens | completion_tokens | cost
    stored: float
    expected: float


class Reconciliation(BaseModel):
    run_id: str
    rows: int
    checked: int  # rows with a recorded answer to check against
    repriced: bool  # whether costs were checked (the config's pricing was readable)
    prompt_tokens: int
    completion_tokens: int
    cost_rows: float  # the sum of the rows' costs
    cost_stored: float  # the run's stored total
    cost_expected: float | None  # the recorded usage at the config's pricing
    mismatches: list[UsageMismatch]

    @property
    def reconciled(self) -> bool:
        return not self.mismatches and abs(self.cost_rows - self.cost_stored) <= COST_TOLERANCE


def reconcile(
    record: RunRecord,
    results: list[QuestionResult],
    dataset: Dataset | None,
    pricing: dict[str, Pricing | None] | None,
) -> Reconciliation:
    """`pricing`: configured model name -> its pricing (None: costs are not checked)."""
    mismatches: list[UsageMismatch] = []
    checked = 0
    expected_total = 0.0
    for row in results:
        recorded = (
            dataset.answer(row.question_id, row.dataset_model) if dataset and row.dataset_model else None
        )
        if recorded is None or row.model is None:
            continue
        checked += 1
        expected = {"prompt_tokens": recorded.prompt_tokens, "completion_tokens": recorded.completion_tokens}
        for field, value in expected.items():
            stored = getattr(row, field)
            if stored != value:
                mismatches.append(
                    UsageMismatch(
                        question_id=row.question_id,
                        model=row.model,
                        field=field,
                        stored=stored,
                        expected=value,
                    )
                )
        if pricing is not None:
            cost = compute_cost(expected, pricing.get(row.model))
            expected_total += cost
            if abs(cost - row.cost) > COST_TOLERANCE:
                mismatches.append(
                    UsageMismatch(
                        question_id=row.question_id,
                        model=row.model,
                        field="cost",
                        stored=row.cost,
                        expected=cost,
                    )
                )
    return Reconciliation(
        run_id=record.run_id,
        rows=len(results),
        checked=checked,
        repriced=pricing is not None,
        prompt_tokens=sum(r.prompt_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        cost_rows=sum(r.cost for r in results),
        cost_stored=record.summary.cost,
        cost_expected=expected_total if pricing is not None else None,
        mismatches=mismatches,
    )
