"""How a run routes when it is cross-validated or swept (app/benchmark/crossval.py says what
those are): the run's own questions fold by fold, then its curve over the knob.

The run's own results (at the config's setting) are checkpointed batch by batch like any run's
(`feeds.on_batch`), so `cancel` and `recover` work on them; the curve is routed after them and
kept in memory until the run is stored (a recovered run routes its curve again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.benchmark.baselines import point
from app.benchmark.crossval import FoldTrainer, parse_folds, parse_sweep, split, with_knob
from app.benchmark.dataset import Dataset
from app.benchmark.frontier import CurvePoint
from app.benchmark.local_services import RunFeeds, VectorTable, shared_vector_table
from app.benchmark.records import QuestionResult
from app.benchmark.runner import ProgressFn, run_benchmark
from app.config.document import RouterConfig


@dataclass(frozen=True)
class RunPlan:
    """What one run routes: its questions, and how (cross-validated, swept)."""

    dataset: Dataset
    planned: list[int]  # every question of the run, in dataset order
    cross_validate: str | None = None  # "5" (folds by question) or "category"
    sweep: str | None = None  # "budget_per_1k=0.1,0.2"
    batch_size: int = 64
    seed: int = 0


class PlannedRun:
    """One run's routing; `close()` removes the folds' scratch artifacts."""

    def __init__(self, config: RouterConfig, plan: RunPlan, table: VectorTable | None = None) -> None:
        self.config, self.plan = config, plan
        self.table = table if table is not None else shared_vector_table()
        self.knob = parse_sweep(plan.sweep) if plan.sweep else None
        if self.knob is not None:
            with_knob(config, self.knob[0], self.knob[1][0])  # a knob no decision takes: said now
        self.trainer: FoldTrainer | None = None
        if plan.cross_validate is not None:
            folds = split(plan.dataset, plan.planned, parse_folds(plan.cross_validate))
            self.trainer = FoldTrainer(config, plan.dataset, plan.planned, folds, self.table)
            self.trainer.kinds()  # a predictor it cannot train: said before any work

    def close(self) -> None:
        if self.trainer is not None:
            self.trainer.close()

    async def route(
        self, ids: Sequence[int], progress: ProgressFn | None = None, feeds: RunFeeds | None = None
    ) -> list[QuestionResult]:
        """The questions `ids` at the config's own setting (each by its fold's config)."""
        return await self._route(self.config, None, ids, progress, feeds)

    async def curve(self, progress: ProgressFn | None = None) -> list[CurvePoint]:
        """The run's questions at each knob value: one point each."""
        return [
            CurvePoint(
                knob=label,
                point=point(label, len(rows), sum(r.correct for r in rows), sum(r.cost for r in rows)),
            )
            for label, rows in (await self.curve_rows(progress)).items()
        ]

    async def curve_rows(self, progress: ProgressFn | None = None) -> dict[str, list[QuestionResult]]:
        """Each knob value's label -> the run's questions routed at it (intervals need the rows)."""
        if self.knob is None:
            return {}
        knob, values = self.knob
        out = {}
        for value in values:
            label = f"{knob}={value:g}"
            out[label] = await self._route(
                self.config, (knob, value), self.plan.planned, _phase(progress, label), None
            )
        return out

    async def _route(
        self,
        config: RouterConfig,
        knob: tuple[str, float] | None,
        ids: Sequence[int],
        progress: ProgressFn | None,
        feeds: RunFeeds | None,
    ) -> list[QuestionResult]:
        wanted = set(ids)
        groups: list[tuple[RouterConfig, list[int]]] = []
        if self.trainer is None:
            groups.append((config, [i for i in self.plan.planned if i in wanted]))
        else:
            for fold, members in self.trainer.folds.items():
                chosen = [i for i in members if i in wanted]
                if chosen:
                    embedding = (lambda done, total: progress("embed", done, total)) if progress else None
                    groups.append((await self.trainer.fold_config(fold, embedding), chosen))
        results: list[QuestionResult] = []
        done, total = 0, len(wanted)
        for base, chosen in groups:
            routed = with_knob(base, *knob) if knob is not None else base
            rows, _ = await run_benchmark(
                routed, self.plan.dataset, chosen, batch_size=self.plan.batch_size, vectors=self.table,
                feeds=feeds, seed=self.plan.seed, progress=_offset(progress, done, total),
            )  # fmt: skip
            results += rows
            done += len(rows)
        order = {qid: n for n, qid in enumerate(self.plan.planned)}
        return sorted(results, key=lambda r: order[r.question_id])


def _phase(progress: ProgressFn | None, label: str) -> ProgressFn | None:
    if progress is None:
        return None
    return lambda phase, done, total: progress(label if phase == "route" else phase, done, total)


def _offset(progress: ProgressFn | None, before: int, total: int) -> ProgressFn | None:
    """A fold's progress as part of the whole run's."""
    if progress is None:
        return None
    return lambda phase, done, _total: progress(phase, before + done, total)
