"""`svc-sr benchmark agent TRACES`: per-turn against session-aware routing on multi-turn agent
traces (app/benchmark/agent_traces.py; docs/routing-quality.md "Agent traffic"). Offline: the
config's pipeline in this process (`--config`, default the traces' own
tests/data/agent_traces/config.yaml). `--split heldout` keeps the conversations marked so.
`--json` prints the whole report as JSON on stdout. Exit 2 on an unreadable trace file or an
invalid config."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from rich.console import Console

from app.benchmark.agent_traces import AgentReport, ModeReport, TraceError, load_traces, run_agent_benchmark
from app.cli.benchmark_sources import config_file
from app.cli.remote import EXIT_INVALID, fail

DEFAULT_CONFIG = Path("tests/data/agent_traces/config.yaml")


def _line(report: ModeReport) -> str:
    acc, named, follows = report.accuracy, report.accuracy_named, report.follows_ask
    return (
        f"{report.mode:9} turns {report.turns:4}  switches {report.switches:4}  violations {report.violations:3}  "
        f"cost ${report.cost:.4f}  accuracy {acc.rate:6.1%} [{acc.low:.1%}, {acc.high:.1%}] (n={acc.n})  "
        f"on named asks {named.rate:6.1%} [{named.low:.1%}, {named.high:.1%}] (n={named.n})  "
        f"follows ask {follows.rate:6.1%} [{follows.low:.1%}, {follows.high:.1%}] (n={follows.n})"
    )


def print_report(report: AgentReport) -> None:
    out = Console(highlight=False)
    out.print(f"{report.traces} conversations (split {report.split or 'all'})")
    out.print(_line(report.per_turn))
    out.print(_line(report.session))
    summary = report.summary()
    out.print(f"session-aware: {summary['fewer_switches']:.1%} fewer switches")


def register_agent_command(group: click.Group) -> None:
    @group.command("agent")
    @click.argument("traces", type=click.Path(dir_okay=False, exists=True, path_type=Path))
    @click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"Config routed (default {DEFAULT_CONFIG}).",
    )
    @click.option(
        "--split", default=None, help="Only the conversations whose `split` is this (e.g. heldout)."
    )
    @click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
    def agent(traces: Path, config_path: Path | None, split: str | None, as_json: bool) -> None:
        """Per-turn against session-aware routing on multi-turn agent TRACES (JSONL)."""
        try:
            loaded = load_traces(traces, split)
        except TraceError as exc:
            fail(str(exc), EXIT_INVALID)
        if not loaded:
            fail("no conversations to run (an empty file, or none in --split)", EXIT_INVALID)
        config, _ = config_file(config_path or DEFAULT_CONFIG, None)
        report = asyncio.run(run_agent_benchmark(config, loaded, split))
        if as_json:
            click.echo(json.dumps({**report.model_dump(), "summary": report.summary()}, indent=2))
            return
        print_report(report)
