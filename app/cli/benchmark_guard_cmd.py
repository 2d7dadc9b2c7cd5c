"""`svc-sr benchmark guard SET...`: the guards' catch rate and false-block rate, with 95% Wilson
intervals, overall and per category, source and style (docs/security.md).

SETs are labeled JSONL files (app/benchmark/guard_sets.py). Offline by default: the config's
pipeline in this process (`--config`, default configs/config.yaml); `--endpoint URL` sends the
cases to a running router instead. `--split heldout` keeps only the cases marked so. `--json`
prints the whole report as JSON on stdout. Exit 2 on an unreadable set or an invalid config.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from app.benchmark.guard_report import GuardReport, Rate, summarize
from app.benchmark.guard_run import run_endpoint, run_offline
from app.benchmark.guard_sets import GuardSetError, load_cases
from app.cli.benchmark_sources import config_file
from app.cli.remote import EXIT_INVALID, fail

console = Console(stderr=True, highlight=False)
DEFAULT_CONFIG = Path("configs/config.yaml")


def _pct(rate: Rate) -> str:
    return f"{rate.rate:6.1%}  [{rate.low:.1%}, {rate.high:.1%}]"


def _table(title: str, rows: list[Rate], word: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("name")
    table.add_column("n", justify="right")
    table.add_column(word, justify="right")
    table.add_column("rate  [95% Wilson]", justify="right")
    for r in rows:
        table.add_row(r.name, str(r.n), str(r.hits), _pct(r))
    return table


def print_report(report: GuardReport, show: int) -> None:
    out = Console(highlight=False)
    out.print(f"attacks caught:  {report.catch.hits}/{report.catch.n}  {_pct(report.catch)}")
    out.print(
        f"benign blocked:  {report.false_block.hits}/{report.false_block.n}  {_pct(report.false_block)}"
    )
    if report.errors:
        out.print(f"errors (in no rate): {report.errors}")
    for group, rows in report.attacks_by.items():
        out.print(_table(f"attacks by {group}", rows, "caught"))
    for group, rows in report.benign_by.items():
        out.print(_table(f"benign by {group}", rows, "blocked"))
    for title, cases in (("missed attacks", report.missed), ("false blocks", report.false_blocks)):
        for case in cases[:show]:
            out.print(f"{title[:-1]}: [{case.source}/{case.category}] {case.code or ''} {case.preview}")


def register_guard_command(group: click.Group) -> None:
    @group.command("guard")
    @click.argument("sets", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
    @click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Config whose guards are measured (default configs/config.yaml).",
    )
    @click.option("--endpoint", default=None, help="A running router's URL: measure it instead of --config.")
    @click.option("--api-key", default=None, help="Bearer token for --endpoint.")
    @click.option("--split", default=None, help="Only the cases whose `split` is this (e.g. heldout).")
    @click.option("--concurrency", type=click.IntRange(1, 256), default=None, help="Cases in flight.")
    @click.option(
        "--show", type=click.IntRange(0, 10_000), default=10, help="Missed / false-block cases listed."
    )
    @click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
    def guard(
        sets: tuple[Path, ...],
        config_path: Path | None,
        endpoint: str | None,
        api_key: str | None,
        split: str | None,
        concurrency: int | None,
        show: int,
        as_json: bool,
    ) -> None:
        """Catch rate and false-block rate of the guards on labeled JSONL SETS."""
        try:
            cases = load_cases(sets, split)
        except GuardSetError as exc:
            fail(str(exc), EXIT_INVALID)
        if not cases:
            fail("no cases to run (empty sets, or none in --split)", EXIT_INVALID)

        def progress(done: int, total: int) -> None:
            console.print(f"\r{done}/{total}", end="")

        if endpoint is not None:
            if config_path is not None:
                raise click.UsageError("give --config or --endpoint, not both")
            outcomes = asyncio.run(
                run_endpoint(
                    endpoint, cases, concurrency=concurrency or 8, api_key=api_key, progress=progress
                )
            )
        else:
            config, _ = config_file(config_path or DEFAULT_CONFIG, None)
            outcomes = asyncio.run(
                run_offline(config, cases, concurrency=concurrency or 32, progress=progress)
            )
        console.print()
        report = summarize(outcomes)
        if as_json:
            click.echo(json.dumps(report.model_dump(), indent=2))
            return
        print_report(report, show)
