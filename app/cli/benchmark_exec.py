"""How `benchmark run`, `replay` and `recover` execute a run: the questions chosen (a prepared
dataset's exclusions left out), routing with progress bars, a checkpoint after every batch
(app/benchmark/active.py: what makes `cancel` and `recover` possible), the stored record.

Bad input is one message and exit 2; a cancelled run exits 1 and says how to recover it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.benchmark.active import ActiveRuns, ActiveState, RunCancelled, Status, new_state
from app.benchmark.dataset import Dataset, DatasetError
from app.benchmark.frontier import CurvePoint
from app.benchmark.records import QuestionResult, RunRecord, Summary
from app.benchmark.registry import Registry
from app.benchmark.store import StoreError, new_run_id, utc_now
from app.cli.benchmark_report_cmds import current_store
from app.cli.remote import EXIT_FAILURE, EXIT_INVALID, fail
from app.config.document import RouterConfig

if TYPE_CHECKING:
    from app.benchmark.sweep import PlannedRun

console = Console(stderr=True, highlight=False)


@dataclass(frozen=True)
class RunOptions:
    """What run and replay share: the dataset, which of its questions, batching, output."""

    dataset_ref: str
    ids: list[int] | None
    limit: int | None
    batch_size: int
    seed: int
    as_json: bool
    experiment: str | None
    cross_validate: str | None = None  # `run` only (app/benchmark/sweep.py)
    sweep: str | None = None


def parse_ids(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        ids = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give question ids as 1,2,3") from None
    if not ids:
        raise click.BadParameter("no question ids given")
    return ids


def invalid(exc: Exception) -> NoReturn:
    fail(str(exc), EXIT_INVALID)


def load_dataset(ref: str) -> tuple[Dataset, list[int]]:
    """A dataset directory, else the prepared dataset of that name with the ids its
    exclusions leave out (none for a directory: exclusions belong to prepared names)."""
    path = Path(ref)
    excluded: list[int] = []
    try:
        if not path.is_dir():
            try:
                path = Path(current_store().load_dataset(ref).path)
                excluded = Registry(current_store()).exclusions(ref).question_ids
            except StoreError:
                raise DatasetError(
                    f"{ref}: neither a dataset directory nor a prepared dataset's name"
                ) from None
        return Dataset.load(path), excluded
    except DatasetError as exc:
        invalid(exc)


def question_ids(
    dataset: Dataset, ids: list[int] | None, limit: int | None, excluded: Sequence[int] = ()
) -> list[int] | None:
    """The ids a run routes (None: every question)."""
    if ids is not None and limit is not None:
        raise click.UsageError("--ids and --limit go alone, not together")
    left_out = set(excluded)
    if ids is not None:
        try:
            dataset.subset(ids)  # an unknown id is bad input: said before any work starts
        except DatasetError as exc:
            invalid(exc)
        named = sorted(left_out.intersection(ids))
        if named:
            fail(f"question(s) {', '.join(map(str, named))} are excluded from this dataset", EXIT_INVALID)
        return ids
    kept = [q.question_id for q in dataset.questions if q.question_id not in left_out]
    if not kept:
        fail("every question of this dataset is excluded (`dataset exclusions NAME --clear`)", EXIT_INVALID)
    if limit is not None:
        return kept[:limit]
    return kept if left_out else None


def execute(
    config: RouterConfig,
    config_label: str,
    kind: str,
    dataset: Dataset,
    chosen: list[int] | None,
    options: RunOptions,
) -> None:
    """Start a run: its active state, then route, store, report."""
    created = utc_now()
    planned = chosen if chosen is not None else [q.question_id for q in dataset.questions]
    state = new_state(
        run_id=new_run_id(created),
        created_at=created.isoformat(timespec="seconds"),
        kind=kind,
        dataset=str(dataset.path),
        dataset_fingerprint=dataset.fingerprint,
        config=config_label,
        planned=planned,
        subset=chosen is not None,
        batch_size=options.batch_size,
        seed=options.seed,
        experiment=options.experiment,
        cross_validate=options.cross_validate,
        sweep=options.sweep,
    )
    planned_run(config, dataset, state)  # bad input is said before the run starts
    active = ActiveRuns(current_store())
    try:
        active.start(state, config.to_document())
    except OSError as exc:
        fail(f"cannot start the run in {active.dir}: {exc}", EXIT_FAILURE)
    route_and_store(config, dataset, state, [], options.as_json)


def route_and_store(
    config: RouterConfig,
    dataset: Dataset,
    state: ActiveState,
    done: list[QuestionResult],
    as_json: bool,
) -> RunRecord:
    """Route the planned questions not in `done`, checkpointing each batch; store the run."""
    from app.benchmark.local_services import RunFeeds
    from app.benchmark.report import decision_mix, model_mix, summarize
    from app.config.loader import config_hash

    active = ActiveRuns(current_store())
    finished = {r.question_id for r in done}
    remaining = [i for i in state.planned if i not in finished]
    started = time.perf_counter()

    def stop(status: Status, message: str, code: int) -> NoReturn:
        state.status = status
        state.duration_s = round(state.duration_s + time.perf_counter() - started, 3)
        active.write_state(state)
        fail(message, code)

    feeds = RunFeeds(on_batch=lambda batch: active.checkpoint(state.run_id, batch))
    planned = planned_run(config, dataset, state)

    async def routed(
        progress: Callable[[str, int, int], None],
    ) -> tuple[list[QuestionResult], list[CurvePoint]]:
        rows = await planned.route(remaining, progress, feeds)
        return rows, await planned.curve(progress)

    try:
        with _progress() as report:
            results, curve = asyncio.run(routed(report))
    except (RunCancelled, KeyboardInterrupt):
        kept = len(active.results(state.run_id))
        stop(
            "cancelled",
            f"run {state.run_id} cancelled: {kept} of {len(state.planned)} questions scored and kept; "
            f"`svc-sr benchmark recover {state.run_id}` finishes it",
            EXIT_FAILURE,
        )
    except ValueError as exc:  # a selection artifact that cannot be used: nothing to recover
        active.finish(state.run_id)
        invalid(exc)
    except Exception as exc:
        state.error = f"{type(exc).__name__}: {exc}"
        stop("failed", f"run {state.run_id} failed: {state.error}", EXIT_FAILURE)
    finally:
        planned.close()
    by_id = {r.question_id: r for r in [*done, *results]}
    ordered = [by_id[i] for i in state.planned if i in by_id]
    record = RunRecord(
        run_id=state.run_id,
        created_at=state.created_at,
        dataset=state.dataset,
        dataset_fingerprint=state.dataset_fingerprint,
        config=state.config,
        config_fingerprint=config_hash(config),
        kind=state.kind,
        question_ids=state.planned if state.subset else None,
        summary=summarize(ordered),
        decision_mix=decision_mix(ordered),
        model_mix=model_mix(ordered),
        duration_s=round(state.duration_s + time.perf_counter() - started, 3),
        cross_validation=state.cross_validate,
        sweep=state.sweep,
        curve=curve,
    )
    store = current_store()
    try:
        path = store.save(record, ordered)
    except (OSError, StoreError) as exc:
        fail(f"cannot store the run: {exc}", EXIT_FAILURE)
    active.finish(state.run_id)
    if state.experiment is not None:
        try:
            Registry(store).attach(state.experiment, [record.run_id])
        except StoreError as exc:
            console.print(f"not attached: {exc}")
    print_summary(record, ordered, path)
    if as_json:
        click.echo(json.dumps(json_line(record.summary)))
    return record


def planned_run(config: RouterConfig, dataset: Dataset, state: ActiveState) -> PlannedRun:
    """How the run routes (cross-validated, swept); bad input (a knob no decision takes, a
    predictor cross-validation cannot train) is one message and exit 2."""
    from app.benchmark.crossval import CrossValidationError
    from app.benchmark.sweep import PlannedRun, RunPlan

    plan = RunPlan(dataset, state.planned, state.cross_validate, state.sweep, state.batch_size, state.seed)
    try:
        return PlannedRun(config, plan)
    except CrossValidationError as exc:
        invalid(exc)


def json_line(summary: Summary) -> dict[str, Any]:
    return {"accuracy": summary.accuracy, "cost": summary.cost, "questions": summary.questions}


class _progress:  # noqa: N801 - used as a context manager, like rich's own
    """Two bars on stderr: embedding (when the config needs vectors), then routing."""

    def __init__(self) -> None:
        self._bar = Progress(
            TextColumn("{task.description:<9}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> Callable[[str, int, int], None]:
        self._bar.start()
        return self.report

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def report(self, phase: str, done: int, total: int) -> None:
        task = self._tasks.get(phase)
        if task is None:
            task = self._tasks[phase] = self._bar.add_task(phase, total=total)
        self._bar.update(task, completed=done, total=total)


def print_summary(record: RunRecord, results: list[QuestionResult], path: Path) -> None:
    s = record.summary
    table = Table("", "value", title=f"{record.kind} {record.run_id}")
    table.add_row("questions", f"{s.questions} ({s.scored} scored)")
    table.add_row("accuracy", f"{s.accuracy:.4f}")
    table.add_row("cost", f"{s.cost:.6g}")
    table.add_row("cost / 1k queries", f"{s.cost_per_1k:.6g}")
    table.add_row("cost / correct", "-" if s.cost_per_correct is None else f"{s.cost_per_correct:.6g}")
    table.add_row("decisions", mix_text(record.decision_mix))
    table.add_row("models", mix_text(record.model_mix))
    table.add_row("duration", f"{record.duration_s:.1f} s")
    console.print(table)
    errors = [r for r in results if r.error]
    if errors:
        console.print(f"{len(errors)} questions not scored, e.g. {errors[0].question_id}: {errors[0].error}")
    console.print(f"stored in {path}")


def mix_text(mix: dict[str, int], shown: int = 5) -> str:
    parts = [f"{name} {count}" for name, count in list(mix.items())[:shown]]
    return ", ".join(parts) + (f", +{len(mix) - shown} more" if len(mix) > shown else "")
