"""A benchmark run's report (`svc-sr benchmark report`) and the comparison of two runs
(`svc-sr benchmark compare`), computed from the run's per-question results.

Accuracy counts every question of the run: a question that was not scored (no route, a model
without recorded answers) counts as wrong, so a config cannot look better by failing to route.
Cost per 1,000 queries is the mean cost per question x 1000, the unit RouterArena reports.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from app.benchmark.baselines import PER_THOUSAND, Baselines, Point, point
from app.benchmark.frontier import CurvePoint, Frontier, compute_frontier
from app.benchmark.records import QuestionResult, RunRecord, Summary

DEFAULT_DECISION = "(default)"  # the default model answered: no decision matched
NOT_ROUTED = "(none)"  # no model was selected


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CategoryRow(_Shape):
    category: str
    questions: int
    correct: int
    accuracy: float
    cost: float
    models: dict[str, int] = Field(default_factory=dict)  # model chosen -> questions, most first


class Report(_Shape):
    run_id: str
    kind: str
    created_at: str
    dataset: str
    config: str
    questions: int
    scored: int
    correct: int
    accuracy: float
    cost: float
    cost_per_1k: float
    cost_per_correct: float | None  # None when no answer was right
    categories: list[CategoryRow]
    decision_mix: dict[str, int]  # decision (or "(default)") -> questions, most first
    model_mix: dict[str, int]  # model (or "(none)") -> questions, most first
    algorithm_mix: dict[str, int]  # algorithm.type that chose -> questions, most first
    errors: dict[str, int]  # why questions were not scored -> questions
    baselines: Baselines | None = None  # on the run's questions; None without recorded answers
    cross_validation: str | None = None  # the run's `--cross-validate` (None: not cross-validated)
    # The run (or its curve over the knob) against fixed mixes of models: app/benchmark/frontier.py.
    frontier: Frontier | None = None


class CategoryDelta(_Shape):
    category: str
    questions: int
    accuracy_a: float
    accuracy_b: float
    accuracy_delta: float  # b - a
    cost_a: float
    cost_b: float
    cost_delta: float  # b - a


class Comparison(_Shape):
    """Two runs on the questions they share; every delta is B minus A."""

    run_a: str
    run_b: str
    questions: int  # shared questions: everything below is on these
    only_in_a: int
    only_in_b: int
    accuracy_a: float
    accuracy_b: float
    accuracy_delta: float
    cost_a: float
    cost_b: float
    cost_delta: float
    cost_per_1k_a: float
    cost_per_1k_b: float
    same_model: int  # questions both runs sent to the same model
    right_only_in_a: int
    right_only_in_b: int
    both_right: int
    both_wrong: int
    categories: list[CategoryDelta]


def _mix(values: Iterable[str]) -> dict[str, int]:
    """Counts, most frequent first (ties by name) so tables and JSON read the same way."""
    counts = Counter(values)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _ratio(numerator: float, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def run_questions(results: Iterable[QuestionResult]) -> dict[int, str]:
    """The run's questions (id -> category, in run order): the set its baselines are computed on."""
    return {result.question_id: result.category for result in results}


def category_rows(results: Sequence[QuestionResult]) -> list[CategoryRow]:
    by_category: dict[str, list[QuestionResult]] = {}
    for result in results:
        by_category.setdefault(result.category, []).append(result)
    return [
        CategoryRow(
            category=category,
            questions=len(rows),
            correct=(correct := sum(row.correct for row in rows)),
            accuracy=_ratio(correct, len(rows)),
            cost=sum(row.cost for row in rows),
            models=_mix(row.model or NOT_ROUTED for row in rows),
        )
        for category, rows in sorted(by_category.items())
    ]


def summarize(results: Sequence[QuestionResult]) -> Summary:
    """Accuracy over every question (an unscored one counts as wrong), total cost, and the
    per-1,000-queries and per-correct-answer costs."""
    questions = len(results)
    correct = sum(result.correct for result in results)
    cost = sum(result.cost for result in results)
    return Summary(
        accuracy=_ratio(correct, questions),
        cost=cost,
        questions=questions,
        scored=sum(result.error is None for result in results),
        cost_per_1k=_ratio(cost, questions) * PER_THOUSAND,
        cost_per_correct=cost / correct if correct else None,
    )


def decision_mix(results: Iterable[QuestionResult]) -> dict[str, int]:
    """Questions per matched decision (`(default)`: none matched), most first."""
    return _mix(result.decision or DEFAULT_DECISION for result in results)


def model_mix(results: Iterable[QuestionResult]) -> dict[str, int]:
    """Questions per selected model (`(none)`: no model answered), most first."""
    return _mix(result.model or NOT_ROUTED for result in results)


def build_report(
    record: RunRecord,
    results: Sequence[QuestionResult],
    baselines: Baselines | None = None,
    weak: str | None = None,
    strong: str | None = None,
) -> Report:
    """The report; with baselines, the frontier of the run's curve (its one point when it was
    not swept), the weak and strong models of APGR named or chosen (ValueError: an unknown one)."""
    summary = summarize(results)
    frontier = None
    if baselines is not None:
        own = point(record.run_id, summary.questions, sum(r.correct for r in results), summary.cost)
        curve = record.curve or [CurvePoint(knob="run", point=own)]
        frontier = compute_frontier(baselines.models, curve, weak, strong)
    return Report(
        run_id=record.run_id,
        kind=record.kind,
        created_at=record.created_at,
        dataset=record.dataset,
        config=record.config,
        questions=summary.questions,
        scored=summary.scored,
        correct=sum(result.correct for result in results),
        accuracy=summary.accuracy,
        cost=summary.cost,
        cost_per_1k=summary.cost_per_1k,
        cost_per_correct=summary.cost_per_correct,
        categories=category_rows(results),
        decision_mix=decision_mix(results),
        model_mix=model_mix(results),
        algorithm_mix=_mix(result.algorithm for result in results),
        errors=_mix(result.error for result in results if result.error is not None),
        baselines=baselines,
        cross_validation=record.cross_validation,
        frontier=frontier,
    )


def compare_runs(
    a: tuple[RunRecord, Sequence[QuestionResult]], b: tuple[RunRecord, Sequence[QuestionResult]]
) -> Comparison:
    rows_a = {row.question_id: row for row in a[1]}
    rows_b = {row.question_id: row for row in b[1]}
    shared = [question for question in rows_a if question in rows_b]
    pairs = [(rows_a[question], rows_b[question]) for question in shared]
    tally = Counter((x.correct, y.correct) for x, y in pairs)
    cost_a = sum(x.cost for x, _ in pairs)
    cost_b = sum(y.cost for _, y in pairs)
    accuracy_a = _ratio(tally[True, True] + tally[True, False], len(pairs))
    accuracy_b = _ratio(tally[True, True] + tally[False, True], len(pairs))
    return Comparison(
        run_a=a[0].run_id,
        run_b=b[0].run_id,
        questions=len(pairs),
        only_in_a=len(rows_a) - len(pairs),
        only_in_b=len(rows_b) - len(pairs),
        accuracy_a=accuracy_a,
        accuracy_b=accuracy_b,
        accuracy_delta=accuracy_b - accuracy_a,
        cost_a=cost_a,
        cost_b=cost_b,
        cost_delta=cost_b - cost_a,
        cost_per_1k_a=_ratio(cost_a, len(pairs)) * PER_THOUSAND,
        cost_per_1k_b=_ratio(cost_b, len(pairs)) * PER_THOUSAND,
        same_model=sum(x.model == y.model for x, y in pairs),
        right_only_in_a=tally[True, False],
        right_only_in_b=tally[False, True],
        both_right=tally[True, True],
        both_wrong=tally[False, False],
        categories=_category_deltas(pairs),
    )


def _category_deltas(pairs: Sequence[tuple[QuestionResult, QuestionResult]]) -> list[CategoryDelta]:
    rows_a = category_rows([x for x, _ in pairs])
    rows_b = {row.category: row for row in category_rows([y for _, y in pairs])}
    return [
        CategoryDelta(
            category=row.category,
            questions=row.questions,
            accuracy_a=row.accuracy,
            accuracy_b=rows_b[row.category].accuracy,
            accuracy_delta=rows_b[row.category].accuracy - row.accuracy,
            cost_a=row.cost,
            cost_b=rows_b[row.category].cost,
            cost_delta=rows_b[row.category].cost - row.cost,
        )
        for row in rows_a
    ]


def run_point(report: Report) -> Point:
    """The run as a point of the accuracy-vs-cost plot."""
    return point(report.run_id, report.questions, report.correct, report.cost)
