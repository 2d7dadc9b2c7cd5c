"""`svc-sr benchmark` report commands: report, compare, runs, show, export.

They read stored runs (`<store>/runs/<run_id>/run.json` + `results.jsonl`, app/benchmark/
records.py) and never change them. A run is named by its id or a unique prefix of it. Bad
input (an unknown or ambiguous run, a damaged run file, a limit out of range) is one message
and exit code 2; files are written through a temp file, so none is ever half written.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from app.benchmark.baselines import Baselines, compute_baselines
from app.benchmark.export import export_csv, export_json
from app.benchmark.frontier import Frontier
from app.benchmark.records import QuestionResult, RunRecord
from app.benchmark.registry import MARKER
from app.benchmark.report import (
    Comparison,
    Report,
    build_report,
    compare_runs,
    run_point,
    run_questions,
)
from app.benchmark.store import RunStore, StoreError, default_store_dir
from app.cli.remote import EXIT_INVALID, echo_json, fail
from app.common.persist import atomic_write_bytes

stdout = Console(highlight=False, markup=False)  # names from datasets may hold [brackets]
stderr = Console(stderr=True, highlight=False, markup=False)

Run = tuple[RunRecord, list[QuestionResult]]


NO_AUTOSTART = "svc_sr.benchmark.no_autostart"


def open_store(ctx: click.Context, store: Path | None, autostart: bool = True) -> None:
    """The `benchmark` group's one --store resolution: the directory given, else the default
    store directory. Every benchmark command finds the store with current_store()."""
    ctx.obj = RunStore(store or default_store_dir())
    ctx.meta[NO_AUTOSTART] = not autostart


def current_store(set_up: bool = True) -> RunStore:
    """The store the `benchmark` group opened (open_store); the default one for a command run
    outside the group. Under --no-autostart, a store `setup` has not made is bad input
    (`set_up=False`: setup's own call, which makes it)."""
    ctx = click.get_current_context()
    found = ctx.find_object(RunStore)
    store = found if found is not None else RunStore(default_store_dir())
    if set_up and ctx.meta.get(NO_AUTOSTART) and not (store.root / MARKER).is_file():
        fail(
            f"no benchmark store at {store.root} (--no-autostart: run `svc-sr benchmark setup`)", EXIT_INVALID
        )
    return store


def _load(reference: str) -> Run:
    try:
        return current_store().load(reference)
    except StoreError as exc:
        fail(f"{exc} (see `svc-sr benchmark runs`)", EXIT_INVALID)


def _baselines(record: RunRecord, results: list[QuestionResult]) -> Baselines | None:
    """The baselines on the run's questions, from its dataset and its config's pricing; None
    (with a note on stderr) when either is gone or unreadable: the report itself needs neither."""
    from app.benchmark.dataset import Dataset, DatasetError
    from app.benchmark.runner import dataset_models  # imports the pipeline: only when reporting
    from app.config.errors import ConfigError
    from app.config.loader import load_config

    try:
        dataset = Dataset.load(Path(record.dataset))
        config = load_config(record.config).config
    except (DatasetError, ConfigError) as exc:
        stderr.print(f"baselines left out: {exc}")
        return None
    scored_as = dataset_models(config, dataset)
    pricing = {scored_as[m.name]: m.pricing for m in config.providers.models if m.name in scored_as}
    if not pricing:
        stderr.print(f"baselines left out: no model of {record.config} has answers in {dataset.path}")
        return None
    return compute_baselines(run_questions(results), dataset.answers, pricing)


def _money(value: float | None) -> str:
    """Dollars to four significant digits: a question's cost is a fraction of a cent."""
    if value is None:
        return "-"
    return f"${value:,.2f}" if abs(value) >= 100 else f"${value:.4g}"


def _signed_money(value: float) -> str:
    return ("-" if value < 0 else "+") + _money(abs(value))


def _print_report(report: Report) -> None:
    stdout.print(f"run {report.run_id} ({report.kind}, {report.created_at})")
    stdout.print(f"dataset {report.dataset}\nconfig  {report.config}")
    stdout.print(
        f"accuracy {report.accuracy:.3f} ({report.correct}/{report.questions}, {report.scored} scored)  "
        f"cost {_money(report.cost)}  per 1,000 queries {_money(report.cost_per_1k)}  "
        f"per correct answer {_money(report.cost_per_correct)}"
    )
    table = Table("category", "questions", "accuracy", "cost", "models chosen", title="per category")
    for row in report.categories:
        chosen = ", ".join(f"{model} {count}" for model, count in row.models.items())
        table.add_row(row.category, str(row.questions), f"{row.accuracy:.3f}", _money(row.cost), chosen)
    stdout.print(table)
    for title, mix in (
        ("decisions", report.decision_mix),
        ("models", report.model_mix),
        ("errors", report.errors),
    ):
        if mix:
            stdout.print(f"{title}: " + ", ".join(f"{name} {count}" for name, count in mix.items()))
    if report.baselines is not None:
        _print_baselines(report.baselines, report)
    if report.frontier is not None:
        _print_frontier(report.frontier, report.cross_validation)


def _print_frontier(frontier: Frontier, cross_validation: str | None) -> None:
    hull = " -> ".join(f"{p.name} ({p.accuracy:.3f}, {_money(p.cost_per_1k)})" for p in frontier.hull)
    stdout.print(f"hull of fixed mixes (per 1,000 queries): {hull}")
    if len(frontier.curve) > 1 or frontier.curve[0].knob != "run":
        curve = Table("knob", "accuracy", "cost", "per 1,000 queries", title="the router's curve")
        for c in frontier.curve:
            curve.add_row(
                c.knob, f"{c.point.accuracy:.4f}", _money(c.point.cost), _money(c.point.cost_per_1k)
            )
        stdout.print(curve)
    how = {None: "not cross-validated", "category": "cross-validated by held-out category"}
    stdout.print(
        f"APGR {'-' if frontier.apgr is None else f'{frontier.apgr:.3f}'} "
        f"(weak {frontier.weak}, strong {frontier.strong}; {how.get(cross_validation, f'{cross_validation}-fold cross-validated')})"
    )
    table = Table(
        "budget per 1,000",
        "of strong's cost",
        "router",
        "best mix of two",
        "margin",
        title="at fixed budgets",
    )
    for m in frontier.margins:
        table.add_row(
            _money(m.cost_per_1k),
            f"{m.share_of_strong:.0%}",
            f"{m.router:.4f}",
            f"{m.hull:.4f}",
            f"{m.margin * 100:+.1f} pts",
        )
    stdout.print(table)


def _print_baselines(baselines: Baselines, report: Report) -> None:
    table = Table(
        "",
        "accuracy",
        "cost",
        "per 1,000 queries",
        title=f"baselines on the run's {baselines.questions} questions",
    )
    table.add_row(
        f"run {report.run_id}",
        f"{report.accuracy:.3f}",
        _money(report.cost),
        _money(report.cost_per_1k),
    )
    for point in [*baselines.models, baselines.category_best, baselines.oracle]:
        table.add_row(point.name, f"{point.accuracy:.3f}", _money(point.cost), _money(point.cost_per_1k))
    stdout.print(table)


def _write(path: Path, data: bytes) -> None:
    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or type(exc).__name__}", EXIT_INVALID)
    stderr.print(f"wrote {path}")


@click.command("report")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--plot", type=click.Path(dir_okay=False, path_type=Path), help="Write the accuracy-vs-cost plot (PNG)."
)
@click.option("--weak", default=None, help="APGR's weak model (default: the hull vertex before the strong).")
@click.option("--strong", default=None, help="APGR's strong model (default: the most accurate).")
def report_command(run: str, as_json: bool, plot: Path | None, weak: str | None, strong: str | None) -> None:
    """Accuracy, cost, per-category table, decision mix, baselines and, against fixed mixes of
    models, the hull, APGR and the margin at fixed budgets of RUN (its curve when swept)."""
    record, results = _load(run)
    try:
        report = build_report(record, results, _baselines(record, results), weak, strong)
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    if plot is not None:
        if report.baselines is None:
            fail("--plot needs the run's dataset and config (see the note above)", EXIT_INVALID)
        from app.benchmark.plot import render_accuracy_vs_cost

        _write(plot, render_accuracy_vs_cost(report.baselines, [run_point(report)], report.frontier))
    if as_json:
        echo_json(report.model_dump(mode="json"))
    else:
        _print_report(report)


def _print_comparison(comparison: Comparison) -> None:
    stdout.print(
        f"A {comparison.run_a}  vs  B {comparison.run_b} on {comparison.questions} shared questions"
        f" (only in A {comparison.only_in_a}, only in B {comparison.only_in_b})"
    )
    table = Table("", "A", "B", "B - A")
    table.add_row(
        "accuracy",
        f"{comparison.accuracy_a:.3f}",
        f"{comparison.accuracy_b:.3f}",
        f"{comparison.accuracy_delta:+.3f}",
    )
    table.add_row(
        "cost", _money(comparison.cost_a), _money(comparison.cost_b), _signed_money(comparison.cost_delta)
    )
    table.add_row("per 1,000 queries", _money(comparison.cost_per_1k_a), _money(comparison.cost_per_1k_b), "")
    stdout.print(table)
    stdout.print(
        f"same model {comparison.same_model}; right only in A {comparison.right_only_in_a}, "
        f"only in B {comparison.right_only_in_b}; both right {comparison.both_right}, both wrong {comparison.both_wrong}"
    )
    categories = Table(
        "category", "questions", "accuracy A", "accuracy B", "B - A", "cost B - A", title="per category"
    )
    for row in comparison.categories:
        categories.add_row(
            row.category,
            str(row.questions),
            f"{row.accuracy_a:.3f}",
            f"{row.accuracy_b:.3f}",
            f"{row.accuracy_delta:+.3f}",
            _signed_money(row.cost_delta),
        )
    stdout.print(categories)


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def compare_command(run_a: str, run_b: str, as_json: bool) -> None:
    """Compare RUN_B with RUN_A on their shared questions (deltas are B minus A)."""
    comparison = compare_runs(_load(run_a), _load(run_b))
    if as_json:
        echo_json(comparison.model_dump(mode="json"))
    else:
        _print_comparison(comparison)


@click.command("runs")
@click.option("--limit", type=click.IntRange(1, 50), default=20, show_default=True, help="Newest runs shown.")
def runs_command(limit: int) -> None:
    """The stored runs, newest first."""
    store = current_store()
    records = store.list_runs()  # newest first; a damaged run is left out
    if not records:
        stderr.print(f"no benchmark runs in {store.runs_dir}")
        return
    table = Table("run", "created", "kind", "questions", "accuracy", "cost", "config")
    for record in records[:limit]:
        summary = record.summary
        table.add_row(
            record.run_id,
            record.created_at,
            record.kind,
            str(summary.questions),
            f"{summary.accuracy:.3f}",
            _money(summary.cost),
            Path(record.config).name,
        )
    stdout.print(table)
    if len(records) > limit:
        stderr.print(f"{limit} of {len(records)} runs shown (--limit)")


@click.command("show")
@click.argument("run")
@click.option("--limit", type=click.IntRange(1, 500), default=100, show_default=True, help="Questions shown.")
def show_command(run: str, limit: int) -> None:
    """RUN's per-question results, in dataset order."""
    record, results = _load(run)
    table = Table(
        "question",
        "category",
        "decision",
        "model",
        "correct",
        "tokens",
        "cost",
        "error",
        title=f"run {record.run_id}",
    )
    for result in results[:limit]:
        table.add_row(
            str(result.question_id),
            result.category,
            result.decision or "(default)",
            result.model or "-",
            "yes" if result.correct else "no",
            f"{result.prompt_tokens}+{result.completion_tokens}",
            _money(result.cost),
            result.error or "",
        )
    stdout.print(table)
    if len(results) > limit:
        stderr.print(f"{limit} of {len(results)} questions shown (--limit, at most 500; `export` has all)")


@click.command("export")
@click.argument("run")
@click.option("--format", "form", type=click.Choice(["json", "csv"]), required=True)
@click.option(
    "--output", type=click.Path(dir_okay=False, path_type=Path), help="File to write (default: stdout)."
)
def export_command(run: str, form: str, output: Path | None) -> None:
    """RUN's record and every per-question result, as JSON or CSV."""
    record, results = _load(run)
    data = export_json(record, results) if form == "json" else export_csv(results)
    if output is None:
        click.echo(data.decode("utf-8"), nl=False)
    else:
        _write(output, data)


def register_report_commands(group: click.Group) -> None:
    """Add the report commands to the `benchmark` group."""
    for command in (report_command, compare_command, runs_command, show_command, export_command):
        group.add_command(command)
