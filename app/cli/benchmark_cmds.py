"""`svc-sr benchmark`: routing quality measured on recorded answers (issue 17).

- `dataset prepare DIR`: validate a dataset directory (the ../shared/data/mmlu-pro format) and
  index it in the store; `dataset show NAME`, `dataset options`: the prepared datasets.
- `run --dataset DIR --config FILE`: route every question through the config's pipeline, score
  the chosen models' recorded answers, store the run (app/benchmark/runner.py, store.py).
- `replay --dataset DIR --url URL`: the same over the configuration a running router serves
  (its management API), stored with kind `replay`.
- report, compare, runs, show, export: app/cli/benchmark_report_cmds.py.

Global options: `--store DIR` (default `$SVC_SR_STATE_DIR/benchmark`, else `.cache/benchmark`),
`--url` (the router's management API, for replay), `--no-autostart` (use only a store `setup`
made, never create one on first use). Execution: benchmark_exec.py. Exit codes as app/cli/main.py: bad input
(a malformed dataset, an invalid config, an unknown run or dataset) is one message and 2.
With `--json`, the last stdout line of run/replay is `{"accuracy": ..., "cost": ..., "questions": ...}`.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from app.benchmark.dataset import Dataset, DatasetError
from app.benchmark.registry import Registry
from app.benchmark.store import StoreError, index_dataset
from app.cli.benchmark_agent_cmd import register_agent_command
from app.cli.benchmark_audit_cmds import register_audit_commands
from app.cli.benchmark_dataset_cmds import register_dataset_commands
from app.cli.benchmark_exec import RunOptions, execute, invalid, load_dataset, parse_ids, question_ids
from app.cli.benchmark_guard_cmd import register_guard_command
from app.cli.benchmark_plan_cmds import register_plan_commands
from app.cli.benchmark_recovery_cmds import register_recovery_commands
from app.cli.benchmark_registry_cmds import register_registry_commands
from app.cli.benchmark_report_cmds import current_store, open_store, register_report_commands
from app.cli.benchmark_serve_cmd import serve_command
from app.cli.benchmark_sources import URL_KEY, config_file, fetch_config, router_client, router_options
from app.cli.remote import DEFAULT_ENDPOINT, echo_json, option_group
from app.config.document import RouterConfig

console = Console(stderr=True, highlight=False)
OPTIONS_LIMIT = (1, 25, 10)  # the contract's paging: options limit 1 to 25 (default 10)


@click.group("benchmark")
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Benchmark store directory (default $SVC_SR_STATE_DIR/benchmark, else .cache/benchmark).",
)
@click.option("--url", default=None, help=f"Router management API, for replay (default {DEFAULT_ENDPOINT}).")
@click.option(
    "--no-autostart",
    is_flag=True,
    help="Use only a store `benchmark setup` made: no command creates one on first use (exit 2).",
)
@click.pass_context
def benchmark(ctx: click.Context, store: Path | None, url: str | None, no_autostart: bool) -> None:
    """Measure routing quality on recorded answers: datasets, runs, replays, reports,
    experiments, targets, recovery."""
    open_store(ctx, store, autostart=not no_autostart)
    ctx.meta[URL_KEY] = url


def _invalid(exc: Exception) -> NoReturn:
    invalid(exc)


# ---------------------------------------------------------------------- dataset


@benchmark.group("dataset")
def dataset_group() -> None:
    """Validate, index and list benchmark datasets."""


@dataset_group.command("prepare")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--name", default=None, help="Name in the store (default: the directory's name).")
@click.option("--json", "as_json", is_flag=True, help="Print the index as JSON.")
def dataset_prepare(directory: Path, name: str | None, as_json: bool) -> None:
    """Validate DIRECTORY (questions.jsonl + model_results.csv) and index it in the store."""
    try:
        started = time.perf_counter()
        index = index_dataset(Dataset.load(directory), name)
        path = current_store().save_dataset(index)
    except (DatasetError, StoreError) as exc:
        _invalid(exc)
    console.print(f"dataset {index.name}: valid ({time.perf_counter() - started:.1f} s), indexed in {path}")
    if as_json:
        echo_json(index.model_dump())
        return
    _print_index(index.model_dump())


@dataset_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def dataset_show(name: str, as_json: bool) -> None:
    """A prepared dataset's index: counts, models and their accuracy, categories."""
    try:
        index = current_store().load_dataset(name)
    except StoreError as exc:
        _invalid(exc)
    if as_json:
        echo_json(index.model_dump())
        return
    _print_index(index.model_dump())


@dataset_group.command("options")
@click.option(
    "--limit",
    type=click.IntRange(OPTIONS_LIMIT[0], OPTIONS_LIMIT[1]),
    default=OPTIONS_LIMIT[2],
    show_default=True,
    help="Datasets listed, 1 to 25.",
)
@click.option("--json", "as_json", is_flag=True)
def dataset_options(limit: int, as_json: bool) -> None:
    """The prepared datasets a run can name with --dataset."""
    indexes = current_store().list_datasets()
    shown = indexes[:limit]
    if as_json:
        echo_json(
            {
                "datasets": [i.model_dump(exclude={"categories", "accuracy"}) for i in shown],
                "total": len(indexes),
            }
        )
        return
    if not indexes:
        console.print(
            f"no prepared datasets in {current_store().datasets_dir} (see `svc-sr benchmark dataset prepare`)"
        )
        return
    table = Table("name", "questions", "models", "categories", "path")
    for index in shown:
        table.add_row(
            index.name, str(index.questions), str(len(index.models)), str(len(index.categories)), index.path
        )
    Console(highlight=False).print(table)
    if len(indexes) > limit:
        console.print(f"{limit} of {len(indexes)} shown (--limit)")


def _print_index(index: dict[str, Any]) -> None:
    out = Console(highlight=False)
    out.print(
        f"{index['name']}: {index['questions']} questions, {index['results']} results, "
        f"{len(index['models'])} models, {len(index['categories'])} categories\n"
        f"path {index['path']}\nfingerprint {index['fingerprint']}"
    )
    table = Table("model", "accuracy")
    for model, accuracy in sorted(index["accuracy"].items(), key=lambda kv: -kv[1]):
        table.add_row(model, f"{accuracy:.3f}")
    out.print(table)


# ---------------------------------------------------------------------- run, replay


run_options = option_group(
    "options",
    RunOptions,
    click.option(
        "--dataset", "dataset_ref", required=True, help="Dataset directory, or a prepared dataset's name."
    ),
    click.option("--ids", callback=parse_ids, default=None, help="Only these question ids (1,2,3)."),
    click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions."),
    click.option("--batch-size", type=click.IntRange(1, 4096), default=64, show_default=True),
    click.option("--seed", type=int, default=0, show_default=True, help="Weighted selection's draws."),
    click.option("--json", "as_json", is_flag=True, help="Last stdout line: the JSON summary."),
    click.option("--experiment", default=None, help="Attach the stored run to this experiment."),
)


@benchmark.command("run")
@run_options
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Config file.",
)
@click.option(
    "--target", "target_name", default=None, help="A registered config target, instead of --config."
)
@click.option(
    "--cross-validate",
    "cross_validate",
    default=None,
    metavar="K|category",
    help="Train the config's learned predictors per fold (K folds by question, or one per category) "
    "and route each fold by the predictors that never saw it.",
)
@click.option(
    "--sweep",
    default=None,
    metavar="KNOB=V1,V2,...",
    help="Route the questions again at each value of budget_per_1k or cost_quality_tradeoff "
    "(every learned decision): the router's curve in the report.",
)
def benchmark_run(
    config_path: Path | None,
    target_name: str | None,
    cross_validate: str | None,
    sweep: str | None,
    options: RunOptions,
) -> None:
    """Route every question of a dataset through CONFIG's pipeline and score the answers."""
    config, label = config_file(config_path, target_name)
    _start(config, label, "run", dataclasses.replace(options, cross_validate=cross_validate, sweep=sweep))


@benchmark.command("replay")
@run_options
@click.option("--url", default=None, help="Router management API (default: the group's --url, else local).")
@click.option("--target", "target_name", default=None, help="A registered router target, instead of --url.")
@click.option(
    "--version",
    "version",
    type=click.IntRange(min=1),
    default=None,
    help="Config version (default: the active one).",
)
@router_options[0]
@router_options[1]
def benchmark_replay(
    url: str | None,
    target_name: str | None,
    version: int | None,
    timeout: float,
    token_env: str,
    options: RunOptions,
) -> None:
    """Replay a dataset through the configuration a running router serves (before activating
    a candidate, compare it with this run)."""
    client = router_client(url, target_name, timeout, token_env)
    loaded = load_dataset(options.dataset_ref)  # bad input is said before the router is asked
    config, served = fetch_config(client, version)
    _start(config, f"{client.endpoint}#version={served}", "replay", options, loaded)


def _start(
    config: RouterConfig,
    label: str,
    kind: str,
    options: RunOptions,
    loaded: tuple[Dataset, list[int]] | None = None,
) -> None:
    dataset, excluded = loaded or load_dataset(options.dataset_ref)
    chosen = question_ids(dataset, options.ids, options.limit, excluded)
    if options.experiment is not None:
        try:
            Registry(current_store()).experiment(options.experiment)
        except StoreError as exc:
            invalid(exc)
    execute(config, label, kind, dataset, chosen, options)


register_report_commands(benchmark)
register_guard_command(benchmark)
register_agent_command(benchmark)
register_registry_commands(benchmark)
register_dataset_commands(benchmark, dataset_group)
register_plan_commands(benchmark)
register_audit_commands(benchmark)
register_recovery_commands(benchmark)
benchmark.add_command(serve_command)
