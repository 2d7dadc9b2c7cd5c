"""A benchmark run: route every question through the config's real pipeline, score the
chosen model's recorded answer.

Each question goes through `RouterPipeline.route()` as a chat request (`model: MoM`, one user
message, the question) over local services (local_services.py): the code that serves live
requests, signals, decisions and selection included, never a reimplementation. Then
`complete()` is called with the recorded answer and the token rule's usage, so the cost comes
from app/accounting at the config's pricing, and the run feeds the same metrics (and, for
decisions with `router_replay`, replay records) as live traffic.

A configured model is matched to the dataset by its `name`, else its `provider_model_id`. A
question that is not answered by a dataset model (no route, a block or fast response, a model
the dataset lacks, a missing recorded answer) becomes a row with `error`: it counts as wrong
and costs nothing, it never stops the run.

Batched: questions route `batch_size` at a time, concurrently (asyncio.gather). When the config
needs query vectors (the first question's route asked for one), every question is embedded
first, in batches (the `embed` progress phase), then routed (`route`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from app.benchmark.dataset import Dataset, Question, RecordedAnswer, question_text
from app.benchmark.local_services import BatchFn, RunFeeds, VectorTable, local_services, shared_vector_table
from app.benchmark.records import QuestionResult, Summary
from app.benchmark.report import summarize
from app.config.document import RouterConfig
from app.config.loader import load_config
from app.pipeline.pipeline import RouterPipeline
from app.pipeline.plan import CompletionReport, RoutePlan
from app.pipeline.selection import RoutingError
from app.pipeline.selectors import recorded_name

DEFAULT_BATCH_SIZE = 64
AUTO_MODEL = "MoM"
ProgressFn = Callable[[str, int, int], None]  # (phase "embed" | "route", done, total)


def dataset_models(config: RouterConfig, dataset: Dataset) -> dict[str, str]:
    """Configured model name -> the dataset model whose recorded answers it gives (the learned
    selectors match models to recorded answers the same way)."""
    out: dict[str, str] = {}
    for model in config.providers.models:
        name = recorded_name(model, dataset.models)
        if name is not None:
            out[model.name] = name
    return out


def chat_request(question: Question) -> dict[str, Any]:
    return {"model": AUTO_MODEL, "messages": [{"role": "user", "content": question_text(question)}]}


def completion_response(model: str, question: Question, answer: RecordedAnswer) -> dict[str, Any]:
    """The chat.completion the chosen model gave, rebuilt from its recorded answer."""
    usage = {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
    }
    message = {"role": "assistant", "content": answer.pred}
    return {
        "id": f"benchmark-{question.question_id}",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    }


class _Scorer:
    """Routes and scores one question at a time over one pipeline."""

    def __init__(self, pipeline: RouterPipeline, dataset: Dataset) -> None:
        self.pipeline = pipeline
        self.dataset = dataset
        config = pipeline.config
        self.models = dataset_models(config, dataset)
        self.algorithms = {d.name: d.algorithm.type for d in config.routing.decisions}

    async def score(self, question: Question) -> QuestionResult:
        row = QuestionResult(question_id=question.question_id, category=question.category)
        try:
            plan = await self.pipeline.route(chat_request(question), {}, f"benchmark-{question.question_id}")
        except RoutingError as exc:
            row.error = f"not routed ({exc.code}): {exc.message}"
            return row
        row.decision, row.model = plan.decision, plan.selected_model
        row.algorithm = self.algorithms.get(plan.decision or "", "static")
        if plan.immediate is not None:  # answered without a model: completed as live traffic is
            await self.pipeline.complete(
                plan, CompletionReport(status=plan.immediate.status, response=plan.immediate.body)
            )
            row.model = None
            row.error = f"answered without a model ({plan.immediate.kind})"
            return row
        return await self._score_answer(question, plan, row)

    async def _score_answer(self, question: Question, plan: RoutePlan, row: QuestionResult) -> QuestionResult:
        model = plan.selected_model or ""
        dataset_model = self.models.get(model)
        if dataset_model is None:
            row.error = f"model {model!r} is not in the dataset (neither its name nor its provider_model_id)"
            return row
        answer = self.dataset.answer(question.question_id, dataset_model)
        if answer is None:
            row.error = f"no recorded answer of {dataset_model!r} to question {question.question_id}"
            return row
        report = CompletionReport(
            status=200, model=model, response=completion_response(model, question, answer)
        )
        accounting = await self.pipeline.complete(plan, report)
        row.dataset_model = dataset_model
        row.correct = answer.correct
        row.prompt_tokens, row.completion_tokens = answer.prompt_tokens, answer.completion_tokens
        row.cost = accounting.cost
        return row


def as_config(config: RouterConfig | str | Path) -> RouterConfig:
    """A loaded config, or the one at a path (ConfigError when invalid)."""
    return config if isinstance(config, RouterConfig) else load_config(config).config


async def run_benchmark(
    config: RouterConfig | str | Path,
    dataset: Dataset,
    question_ids: Iterable[int] | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: ProgressFn | None = None,
    vectors: VectorTable | None = None,
    feeds: RunFeeds | None = None,
    seed: int = 0,
) -> tuple[list[QuestionResult], Summary]:
    """Route and score the questions (all, or `question_ids` in dataset order).

    `vectors`: the query-vector table (default: the process's shared one; a vector depends on
    its text alone, so runs of different configs share it safely). `feeds`: where the run's
    router metrics and replay records go, as live traffic's do (default: a recorder of its
    own, no replay records; its `on_batch` sees each batch's results). `seed`: weighted
    selection's draws, so a run is repeatable.
    Nothing else outlives the call: each call builds its pipeline from `config`, so configs
    whose artifacts differ under one path never mix. DatasetError for an unknown question id;
    ConfigError for an invalid config file."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    chosen = dataset.subset(question_ids) if question_ids is not None else dataset
    questions = chosen.questions
    loaded = as_config(config)
    table = vectors if vectors is not None else shared_vector_table()
    local = local_services(loaded, table, feeds)
    try:
        pipeline = RouterPipeline(loaded, local.services, rng=random.Random(seed))
        await pipeline.warm_up()
        scorer = _Scorer(pipeline, chosen)
        on_batch = feeds.on_batch if feeds is not None else None
        results = await _route_all(scorer, questions, table, batch_size, progress, on_batch)
    finally:
        await local.aclose()
    return results, summarize(results)


async def _route_all(
    scorer: _Scorer,
    questions: list[Question],
    table: VectorTable,
    batch_size: int,
    progress: ProgressFn | None,
    on_batch: BatchFn | None = None,
) -> list[QuestionResult]:
    if not questions:
        return []
    misses = table.misses
    results = [await scorer.score(questions[0])]  # the probe: does this config embed queries?
    if on_batch is not None:
        on_batch(results[:])
    if table.misses > misses:
        texts = [question_text(q) for q in questions]
        await table.fill(
            texts, progress=(lambda done, total: progress("embed", done, total)) if progress else None
        )
    total = len(questions)
    if progress is not None:
        progress("route", 1, total)
    for start in range(1, total, batch_size):
        batch = questions[start : start + batch_size]
        scored = await asyncio.gather(*(scorer.score(q) for q in batch))
        results += scored
        if on_batch is not None:
            on_batch(list(scored))
        if progress is not None:
            progress("route", len(results), total)
    return results
