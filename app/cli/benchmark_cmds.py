"""`svc-sr benchmark`: routing quality measured on recorded answers (issue 17).

- `dataset prepare DIR`: validate a dataset directory (the ../shared/data/mmlu-pro format) and
  index it in the store; `dataset show NAME`, `dataset options`: the prepared datasets.
- `run --dataset DIR --config FILE`: route every question through the config's pipeline, score
  the chosen models' recorded answers, store the run (app/benchmark/runner.py, store.py).
- `replay --dataset DIR --url URL`: the same over the configuration a running router serves
  (its management API), stored with kind `replay`.
- report, compare, runs, show, export: app/cli/benchmark_report_cmds.py.

Global options: `--store DIR` (default `$SVC_SR_STATE_DIR/benchmark`, else `.cache/benchmark`),
`--url` (the router's management API, for replay). Exit codes as app/cli/main.py: bad input
(a malformed dataset, an invalid config, an unknown run or dataset) is one message and 2.
With `--json`, the last stdout line of run/replay is `{"accuracy": ..., "cost": ..., "questions": ...}`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.benchmark.dataset import Dataset, DatasetError
from app.benchmark.records import QuestionResult, RunRecord, Summary
from app.benchmark.store import StoreError, index_dataset, new_run_id, utc_now
from app.cli.benchmark_report_cmds import current_store, open_store, register_report_commands
from app.cli.remote import (
    DEFAULT_ENDPOINT,
    DEFAULT_TIMEOUT,
    DEFAULT_TOKEN_ENV,
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    MgmtClient,
    check,
    echo_json,
    fail,
    option_group,
)
from app.config.models import RouterConfig

console = Console(stderr=True, highlight=False)
OPTIONS_LIMIT = (1, 25, 10)  # spec 2 "Benchmark paging": options limit 1 to 25 (default 10)
URL_KEY = "svc_sr.benchmark.url"


@click.group("benchmark")
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Benchmark store directory (default $SVC_SR_STATE_DIR/benchmark, else .cache/benchmark).",
)
@click.option("--url", default=None, help=f"Router management API, for replay (default {DEFAULT_ENDPOINT}).")
@click.pass_context
def benchmark(ctx: click.Context, store: Path | None, url: str | None) -> None:
    """Measure routing quality on recorded answers: datasets, runs, replays, reports."""
    open_store(ctx, store)
    ctx.meta[URL_KEY] = url


def _invalid(exc: Exception) -> NoReturn:
    fail(str(exc), EXIT_INVALID)


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


def _parse_ids(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        ids = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give question ids as 1,2,3") from None
    if not ids:
        raise click.BadParameter("no question ids given")
    return ids


@dataclass(frozen=True)
class RunOptions:
    """What run and replay share: the dataset, which of its questions, batching, output."""

    dataset_ref: str
    ids: list[int] | None
    limit: int | None
    batch_size: int
    seed: int
    as_json: bool


run_options = option_group(
    "options",
    RunOptions,
    click.option(
        "--dataset", "dataset_ref", required=True, help="Dataset directory, or a prepared dataset's name."
    ),
    click.option("--ids", callback=_parse_ids, default=None, help="Only these question ids (1,2,3)."),
    click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions."),
    click.option("--batch-size", type=click.IntRange(1, 4096), default=64, show_default=True),
    click.option("--seed", type=int, default=0, show_default=True, help="Weighted selection's draws."),
    click.option("--json", "as_json", is_flag=True, help="Last stdout line: the JSON summary."),
)


def _load_dataset(ref: str) -> Dataset:
    """A dataset directory, else the directory of the prepared dataset of that name."""
    path = Path(ref)
    try:
        if not path.is_dir():
            try:
                path = Path(current_store().load_dataset(ref).path)
            except StoreError:
                raise DatasetError(
                    f"{ref}: neither a dataset directory nor a prepared dataset's name"
                ) from None
        return Dataset.load(path)
    except DatasetError as exc:
        _invalid(exc)


def _question_ids(dataset: Dataset, ids: list[int] | None, limit: int | None) -> list[int] | None:
    if ids is not None and limit is not None:
        raise click.UsageError("--ids and --limit go alone, not together")
    if limit is not None:
        return [q.question_id for q in dataset.questions[:limit]]
    if ids is not None:
        try:
            dataset.subset(ids)  # an unknown id is bad input: said before any work starts
        except DatasetError as exc:
            _invalid(exc)
    return ids


@benchmark.command("run")
@run_options
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
def benchmark_run(config_path: Path, options: RunOptions) -> None:
    """Route every question of a dataset through CONFIG's pipeline and score the answers."""
    from app.config.errors import ConfigError
    from app.config.loader import load_config

    dataset = _load_dataset(options.dataset_ref)
    try:
        config = load_config(config_path).config
    except ConfigError as exc:
        _invalid(exc)
    _run_and_store(config, str(config_path.resolve()), "run", dataset, options)


@benchmark.command("replay")
@run_options
@click.option("--url", default=None, help="Router management API (default: the group's --url, else local).")
@click.option(
    "--version",
    "version",
    type=click.IntRange(min=1),
    default=None,
    help="Config version (default: the active one).",
)
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, type=float)
@click.option(
    "--token-env", default=DEFAULT_TOKEN_ENV, show_default=True, help="Env var with the management token."
)
def benchmark_replay(
    url: str | None, version: int | None, timeout: float, token_env: str, options: RunOptions
) -> None:
    """Replay a dataset through the configuration a running router serves (before activating
    a candidate, compare it with this run)."""
    endpoint = url or click.get_current_context().find_root().meta.get(URL_KEY) or DEFAULT_ENDPOINT
    dataset = _load_dataset(options.dataset_ref)
    config, served = _fetch_config(MgmtClient(endpoint, timeout, token_env), version)
    _run_and_store(config, f"{endpoint.rstrip('/')}#version={served}", "replay", dataset, options)


def _fetch_config(client: MgmtClient, version: int | None) -> tuple[RouterConfig, str]:
    """The router's active configuration document and its config_version. The management API
    serves only the active document, so another --version is refused (exit 2), an unknown one 8."""
    from app.config.errors import ConfigError
    from app.config.loader import parse_config

    with client:
        response = client.request("GET", "/api/v1/config", params={"format": "json"})
        check(response)
        served = response.headers.get("x-svc-config-version", "?")
        if version is not None and str(version) != served:
            listed = client.request("GET", "/api/v1/config/versions", params={"limit": 100})
            check(listed)
            known = {str(v.get("config_version")) for v in listed.json().get("versions", [])}
            if str(version) not in known:
                fail(f"config version {version} is unknown to {client.endpoint}", EXIT_NOT_FOUND)
            fail(
                f"version {version} is not active ({served} is); the management API serves only the "
                "active document: replay that one, or `benchmark run` a config file of the version",
                EXIT_INVALID,
            )
    try:
        return parse_config(response.json(), source=f"{client.endpoint}/api/v1/config").config, served
    except (ConfigError, ValueError) as exc:
        fail(f"the router's configuration cannot be replayed: {exc}", EXIT_INVALID)


def _run_and_store(
    config: RouterConfig,
    config_label: str,
    kind: str,
    dataset: Dataset,
    options: RunOptions,
) -> None:
    from app.benchmark.report import decision_mix, model_mix
    from app.benchmark.runner import run_benchmark
    from app.config.loader import config_hash

    question_ids = _question_ids(dataset, options.ids, options.limit)
    created = utc_now()
    started = time.perf_counter()
    try:
        with _progress() as report:
            results, summary = asyncio.run(
                run_benchmark(
                    config,
                    dataset,
                    question_ids,
                    batch_size=options.batch_size,
                    progress=report,
                    seed=options.seed,
                )
            )
    except ValueError as exc:  # an unknown question id, a selection artifact that cannot be used
        _invalid(exc)
    record = RunRecord(
        run_id=new_run_id(created),
        created_at=created.isoformat(timespec="seconds"),
        dataset=str(dataset.path),
        dataset_fingerprint=dataset.fingerprint,
        config=config_label,
        config_fingerprint=config_hash(config),
        kind=kind,
        question_ids=question_ids,
        summary=summary,
        decision_mix=decision_mix(results),
        model_mix=model_mix(results),
        duration_s=round(time.perf_counter() - started, 3),
    )
    try:
        path = current_store().save(record, results)
    except (OSError, StoreError) as exc:
        fail(f"cannot store the run: {exc}", EXIT_FAILURE)
    _print_summary(record, results, path)
    if options.as_json:
        click.echo(json.dumps(_json_line(summary)))


def _json_line(summary: Summary) -> dict[str, Any]:
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


def _print_summary(record: RunRecord, results: list[QuestionResult], path: Path) -> None:
    s = record.summary
    table = Table("", "value", title=f"{record.kind} {record.run_id}")
    table.add_row("questions", f"{s.questions} ({s.scored} scored)")
    table.add_row("accuracy", f"{s.accuracy:.4f}")
    table.add_row("cost", f"{s.cost:.6g}")
    table.add_row("cost / 1k queries", f"{s.cost_per_1k:.6g}")
    table.add_row("cost / correct", "-" if s.cost_per_correct is None else f"{s.cost_per_correct:.6g}")
    table.add_row("decisions", _mix(record.decision_mix))
    table.add_row("models", _mix(record.model_mix))
    table.add_row("duration", f"{record.duration_s:.1f} s")
    console.print(table)
    errors = [r for r in results if r.error]
    if errors:
        console.print(f"{len(errors)} questions not scored, e.g. {errors[0].question_id}: {errors[0].error}")
    console.print(f"stored in {path}")


def _mix(mix: dict[str, int], shown: int = 5) -> str:
    parts = [f"{name} {count}" for name, count in list(mix.items())[:shown]]
    return ", ".join(parts) + (f", +{len(mix) - shown} more" if len(mix) > shown else "")


register_report_commands(benchmark)
