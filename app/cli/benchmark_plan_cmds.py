"""`svc-sr benchmark plan | candidate-plan | preview`: what a run would do, before it runs.

- `plan`: the questions, each model's recorded answers and the cost if it answered them all,
  the run's cost range, the signal models it loads, stored runs it would repeat. Nothing is
  routed (app/benchmark/planning.py).
- `candidate-plan --config A --config B ...`: a plan per candidate config, and for each
  whether a stored run already measured it on these questions (reuse it) or a run is needed;
  the commands that measure and compare them (against --baseline RUN when given).
- `preview`: route a few questions (default 5, at most 25) through the real pipeline and show
  each decision, model and grade; nothing is stored.

The config comes from --config FILE, --target NAME or --url URL (a router's active one).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from app.benchmark.store import StoreError
from app.cli.benchmark_exec import invalid, load_dataset, parse_ids, question_ids
from app.cli.benchmark_report_cmds import _money, current_store, stderr, stdout
from app.cli.benchmark_sources import any_config, config_file, router_options
from app.cli.remote import echo_json, option_group

if TYPE_CHECKING:
    from app.benchmark.planning import BenchmarkPlan

PREVIEW_MAX = 25


def _sources(func: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--dataset", "dataset_ref", required=True, help="Dataset directory or prepared name."
            ),
            click.option("--ids", callback=parse_ids, default=None, help="Only these question ids (1,2,3)."),
            click.option(
                "--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions."
            ),
        ]
    ):
        func = option(func)
    return func


config_source = option_group(
    "source",
    lambda **kw: kw,
    click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None),
    click.option("--target", "target_name", default=None, help="A registered target (either kind)."),
    click.option("--url", default=None, help="A router's management API: its active config."),
    *router_options,
)


@click.command("plan")
@_sources
@config_source
@click.option("--batch-size", type=click.IntRange(1, 4096), default=64, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def plan_command(
    dataset_ref: str,
    ids: list[int] | None,
    limit: int | None,
    source: dict[str, Any],
    batch_size: int,
    as_json: bool,
) -> None:
    """What a run would do: questions, models' recorded answers, cost range; nothing is routed."""
    from app.benchmark.planning import plan_run  # imports the pipeline: only when planning

    config, label = any_config(**source)
    dataset, excluded = load_dataset(dataset_ref)
    chosen = question_ids(dataset, ids, limit, excluded)
    plan = plan_run(
        config, label, dataset, chosen, excluded=len(excluded), batch_size=batch_size, store=current_store()
    )
    if as_json:
        echo_json(plan.model_dump())
    else:
        _print_plan(plan)


def _print_plan(plan: BenchmarkPlan) -> None:
    stdout.print(
        f"dataset {plan.dataset}: {plan.questions} questions ({plan.excluded} excluded), "
        f"{len(plan.categories)} categories, {plan.prompt_tokens:,} prompt tokens, {plan.batches} batches"
    )
    stdout.print(
        f"config  {plan.config}: {plan.decisions} decisions, default model {plan.default_model or '-'}"
    )
    table = Table("model", "dataset model", "answers", "accuracy", "cost if it answered all")
    for m in plan.models:
        accuracy = "-" if m.accuracy is None else f"{m.accuracy:.3f}"
        table.add_row(
            m.name, m.dataset_model or "(none: not scored)", str(m.answers), accuracy, _money(m.cost_if_all)
        )
    stdout.print(table)
    stdout.print(
        f"cost between {_money(plan.cost_low)} and {_money(plan.cost_high)}; "
        f"signal models loaded: {', '.join(plan.learned_signals) or 'none'}"
    )
    if plan.reusable_runs:
        stdout.print(f"already measured by: {', '.join(plan.reusable_runs)}")


@click.command("candidate-plan")
@_sources
@click.option(
    "--config",
    "configs",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A candidate config file (repeatable).",
)
@click.option("--target", "targets", multiple=True, help="A candidate config target (repeatable).")
@click.option("--baseline", default=None, help="A stored run the candidates are compared with.")
@click.option("--json", "as_json", is_flag=True)
def candidate_plan_command(
    dataset_ref: str,
    ids: list[int] | None,
    limit: int | None,
    configs: tuple[Path, ...],
    targets: tuple[str, ...],
    baseline: str | None,
    as_json: bool,
) -> None:
    """BenchmarkPlan measuring candidate configs: per candidate, reuse a stored run or run it; then compare."""
    from app.benchmark.planning import CandidateConfig, plan_run

    if not configs and not targets:
        raise click.UsageError("give one --config FILE or --target NAME or more")
    loaded = [config_file(path, None) for path in configs] + [config_file(None, name) for name in targets]
    dataset, excluded = load_dataset(dataset_ref)
    chosen = question_ids(dataset, ids, limit, excluded)
    store = current_store()
    base = None
    if baseline is not None:
        try:
            base = store.load_record(baseline)
        except StoreError as exc:
            invalid(exc)
        if base.dataset_fingerprint != dataset.fingerprint:
            invalid(ValueError(f"baseline {base.run_id} measured another dataset ({base.dataset})"))
    rows = []
    for config, label in loaded:
        plan = plan_run(config, label, dataset, chosen, excluded=len(excluded), store=store)
        reuse = plan.reusable_runs[0] if plan.reusable_runs else None
        subset = f" --ids {','.join(map(str, chosen))}" if chosen is not None and len(chosen) <= 50 else ""
        rows.append(
            CandidateConfig(
                plan=plan,
                action="reuse" if reuse else "run",
                run=reuse,
                command=None
                if reuse
                else f"svc-sr benchmark run --dataset {dataset_ref} --config {label}{subset}",
                compare=f"svc-sr benchmark compare {base.run_id} {reuse or '<new run>'}" if base else None,
            )
        )
    if as_json:
        echo_json({"baseline": base.run_id if base else None, "candidates": [r.model_dump() for r in rows]})
        return
    table = Table("candidate", "questions", "cost range", "action", title=f"{len(rows)} candidates")
    for row in rows:
        table.add_row(
            row.plan.config,
            str(row.plan.questions),
            f"{_money(row.plan.cost_low)} - {_money(row.plan.cost_high)}",
            f"reuse {row.run}" if row.run else "run",
        )
    stdout.print(table)
    for row in rows:
        for line in (row.command, row.compare):
            if line:
                stdout.print(line)


@click.command("preview")
@_sources
@config_source
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def preview_command(
    dataset_ref: str,
    ids: list[int] | None,
    limit: int | None,
    source: dict[str, Any],
    seed: int,
    as_json: bool,
) -> None:
    """Route a few questions (--limit, default 5, at most 25) and show how; nothing is stored."""
    from app.benchmark.runner import run_benchmark

    config, label = any_config(**source)
    dataset, excluded = load_dataset(dataset_ref)
    if (limit or 0) > PREVIEW_MAX or len(ids or []) > PREVIEW_MAX:
        raise click.UsageError("preview routes at most 25 questions (--limit, --ids); `run` routes them all")
    chosen = question_ids(dataset, ids, None if ids is not None else (limit or 5), excluded)
    try:
        results, summary = asyncio.run(run_benchmark(config, dataset, chosen, seed=seed))
    except ValueError as exc:
        invalid(exc)
    if as_json:
        echo_json(
            {"config": label, "results": [r.model_dump() for r in results], "summary": summary.model_dump()}
        )
        return
    table = Table(
        "question", "category", "decision", "model", "correct", "cost", "error", title=f"preview of {label}"
    )
    for r in results:
        table.add_row(
            str(r.question_id),
            r.category,
            r.decision or "(default)",
            r.model or "-",
            "yes" if r.correct else "no",
            _money(r.cost),
            r.error or "",
        )
    stdout.print(table)
    stderr.print(
        f"accuracy {summary.accuracy:.3f} on {summary.questions} questions, cost {_money(summary.cost)} (not stored)"
    )


def register_plan_commands(group: click.Group) -> None:
    for command in (plan_command, candidate_plan_command, preview_command):
        group.add_command(command)
