"""What a run would do, without routing a question: `benchmark plan` and `candidate-plan`.

A plan reads the config and the dataset only: the questions the run takes, each configured
model's recorded answers on them (matched by name, else provider_model_id, as runs do), the
cost of the run if that one model answered every question (its recorded tokens at its
pricing: the run's cost lies between the cheapest and the dearest of these), the learned
signal models the run loads, and stored runs that already measured this config on these
questions (a candidate plan reuses them instead of running again).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel

from app.accounting.cost import compute_cost
from app.benchmark.dataset import Dataset, prompt_tokens
from app.benchmark.local_services import learned_families
from app.benchmark.runner import dataset_models
from app.benchmark.store import RunStore
from app.config.document import RouterConfig
from app.config.loader import config_hash


class ModelPlan(BaseModel):
    name: str
    dataset_model: str | None  # None: no recorded answers, a question routed to it is not scored
    answers: int  # recorded answers on the run's questions
    accuracy: float | None  # right share of those answers
    cost_if_all: float  # the run's cost if this model answered every question it has answers to


class BenchmarkPlan(BaseModel):
    dataset: str
    dataset_fingerprint: str
    questions: int
    excluded: int
    categories: dict[str, int]
    config: str
    config_fingerprint: str
    decisions: int
    default_model: str | None
    models: list[ModelPlan]
    learned_signals: list[str]  # model-backed signal families the run loads
    prompt_tokens: int  # the token rule's prompt tokens of every question
    batches: int
    cost_low: float
    cost_high: float
    reusable_runs: list[str]  # stored runs of this config on exactly these questions, newest first


def plan_run(
    config: RouterConfig,
    label: str,
    dataset: Dataset,
    question_ids: list[int] | None,
    *,
    excluded: int = 0,
    batch_size: int = 64,
    store: RunStore | None = None,
) -> BenchmarkPlan:
    chosen = dataset.subset(question_ids) if question_ids is not None else dataset
    ids = [q.question_id for q in chosen.questions]
    categories: dict[str, int] = {}
    for question in chosen.questions:
        categories[question.category] = categories.get(question.category, 0) + 1
    matched = dataset_models(config, dataset)
    models = []
    for model in config.providers.models:
        name = matched.get(model.name)
        answers = [a for i in ids if name is not None and (a := dataset.answer(i, name)) is not None]
        cost = sum(
            compute_cost(
                {"prompt_tokens": a.prompt_tokens, "completion_tokens": a.completion_tokens}, model.pricing
            )
            for a in answers
        )
        models.append(
            ModelPlan(
                name=model.name,
                dataset_model=name,
                answers=len(answers),
                accuracy=sum(a.correct for a in answers) / len(answers) if answers else None,
                cost_if_all=cost,
            )
        )
    costs = [m.cost_if_all for m in models if m.answers]
    fingerprint = config_hash(config)
    return BenchmarkPlan(
        dataset=str(dataset.path),
        dataset_fingerprint=dataset.fingerprint,
        questions=len(ids),
        excluded=excluded,
        categories=dict(sorted(categories.items())),
        config=label,
        config_fingerprint=fingerprint,
        decisions=len(config.routing.decisions),
        default_model=config.default_model,
        models=models,
        learned_signals=sorted(learned_families(config)),
        prompt_tokens=sum(prompt_tokens(q) for q in chosen.questions),
        batches=math.ceil(len(ids) / batch_size) if ids else 0,
        cost_low=min(costs, default=0.0),
        cost_high=max(costs, default=0.0),
        reusable_runs=_reusable(store, dataset.fingerprint, fingerprint, ids, dataset) if store else [],
    )


def _reusable(
    store: RunStore, dataset_fingerprint: str, config_fingerprint: str, ids: list[int], dataset: Dataset
) -> list[str]:
    every = [q.question_id for q in dataset.questions]
    wanted = sorted(ids)
    out = []
    for record in store.list_runs():
        if (
            record.dataset_fingerprint != dataset_fingerprint
            or record.config_fingerprint != config_fingerprint
        ):
            continue
        if sorted(record.question_ids if record.question_ids is not None else every) == wanted:
            out.append(record.run_id)
    return out


class CandidateConfig(BaseModel):
    """One candidate config of `candidate-plan`: its plan and what to do about it."""

    plan: BenchmarkPlan
    action: Literal["reuse", "run"]
    run: str | None  # the stored run reused
    command: str | None  # the run to start
    compare: str | None  # the comparison with --baseline
