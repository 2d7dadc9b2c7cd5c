"""What a router is measured against, from recorded answers alone: every single model, the
per-category best and the per-question oracle, over one set of questions.

Inputs are plain mappings so the caller decides where they come from (a dataset directory, a
fold, a test's hand-made table): questions (id -> category, in dataset order), recorded answers
((question_id, dataset model) -> correct and tokens) and per-model pricing. Costs use the
product's one cost formula (app/accounting/cost.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field

from app.accounting.cost import compute_cost
from app.config.pricing import Pricing

PER_THOUSAND = 1000


class Answer(Protocol):
    """One model's recorded answer to one question (app/benchmark/dataset.py's RecordedAnswer)."""

    @property
    def correct(self) -> bool: ...

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def completion_tokens(self) -> int: ...


Answers = Mapping[tuple[int, str], Answer]


class Point(BaseModel):
    """One way of answering the questions: its accuracy and what it cost."""

    model_config = ConfigDict(extra="forbid")

    name: str
    questions: int
    correct: int
    accuracy: float
    cost: float
    cost_per_1k: float  # mean cost per question x 1000 (RouterArena's unit)


class Baselines(BaseModel):
    model_config = ConfigDict(extra="forbid")

    questions: int
    models: list[Point]  # every single model, in name order
    category_best: Point
    category_choice: dict[str, str] = Field(default_factory=dict)  # category -> its best model
    oracle: Point


def answer_cost(answer: Answer, pricing: Pricing | None) -> float:
    usage = {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens}
    return compute_cost(usage, pricing)


def point(name: str, questions: int, correct: int, cost: float) -> Point:
    return Point(
        name=name,
        questions=questions,
        correct=correct,
        accuracy=correct / questions if questions else 0.0,
        cost=cost,
        cost_per_1k=cost / questions * PER_THOUSAND if questions else 0.0,
    )


class _Priced(NamedTuple):
    model: str
    answer: Answer
    cost: float


class _Tally:
    """Correct answers and cost of one model over some questions; a missing answer is wrong, free."""

    def __init__(self) -> None:
        self.questions = 0
        self.correct = 0
        self.cost = 0.0

    def add(self, priced: _Priced | None) -> None:
        self.questions += 1
        if priced is not None:
            self.correct += int(priced.answer.correct)
            self.cost += priced.cost


def compute_baselines(
    questions: Mapping[int, str], answers: Answers, pricing: Mapping[str, Pricing | None]
) -> Baselines:
    """The baselines over `questions` (id -> category) for the models `pricing` names.

    The per-category best picks, in each category, the model most accurate on THESE questions
    (ties: the cheaper, then the first by name): it is chosen with hindsight on the questions it
    is scored on, an upper bound for a router that routes by category, not a trained router.
    The oracle answers each question with its cheapest right model, or the cheapest model
    when none is right. ValueError without a model.
    """
    models = sorted(pricing)
    if not models:
        raise ValueError("baselines need at least one model")
    by_category: dict[str, dict[str, _Tally]] = {}
    oracle = _Tally()
    for question_id, category in questions.items():
        tallies = by_category.setdefault(category, {model: _Tally() for model in models})
        recorded = {
            model: _Priced(model, answer, answer_cost(answer, pricing[model]))
            for model in models
            if (answer := answers.get((question_id, model))) is not None
        }
        for model in models:
            tallies[model].add(recorded.get(model))
        oracle.add(_oracle_pick(list(recorded.values())))
    singles = [_merge(model, [tallies[model] for tallies in by_category.values()]) for model in models]
    choice = {category: _best(tallies) for category, tallies in sorted(by_category.items())}
    best = _merge("per-category best", [by_category[c][m] for c, m in choice.items()])
    return Baselines(
        questions=len(questions),
        models=singles,
        category_best=best,
        category_choice=choice,
        oracle=point("oracle", oracle.questions, oracle.correct, oracle.cost),
    )


def _oracle_pick(recorded: list[_Priced]) -> _Priced | None:
    """The cheapest right answer, else the cheapest answer (ties: the first model by name)."""
    right = [priced for priced in recorded if priced.answer.correct] or recorded
    return min(right, key=lambda priced: (priced.cost, priced.model), default=None)


def _best(tallies: Mapping[str, _Tally]) -> str:
    return min(tallies, key=lambda model: (-tallies[model].correct, tallies[model].cost, model))


def _merge(name: str, tallies: list[_Tally]) -> Point:
    return point(
        name,
        sum(t.questions for t in tallies),
        sum(t.correct for t in tallies),
        sum(t.cost for t in tallies),
    )
