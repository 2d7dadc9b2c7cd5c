"""`svc-sr benchmark report|compare|runs|show|export` over runs written into a store by hand
(app/cli/benchmark_report_cmds.py); the numbers are those of tests/unit/benchmark/test_benchmark_report.py.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from app.benchmark.records import QuestionResult, RunRecord
from app.cli.benchmark_report_cmds import open_store, register_report_commands
from tests.unit.benchmark.test_benchmark_report import MICRO, MINI, RUN_A, RUN_B, record

CONFIG = """\
version: v0.3
providers:
  defaults: {default_model: small}
  models:
    - {name: big, pricing: {prompt_per_1m: 10, completion_per_1m: 10}, backend_refs: [{endpoint: "127.0.0.1:9"}]}
    - {name: mid, pricing: {prompt_per_1m: 2, completion_per_1m: 2}, backend_refs: [{endpoint: "127.0.0.1:9"}]}
    - {name: small, pricing: {prompt_per_1m: 1, completion_per_1m: 1}, backend_refs: [{endpoint: "127.0.0.1:9"}]}
"""


@click.group()
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.pass_context
def benchmark(ctx: click.Context, store: Path | None) -> None:
    """Stands in for the `benchmark` group: it opens the store the report commands read."""
    open_store(ctx, store)


register_report_commands(benchmark)


def write_run(store: Path, run: RunRecord, results: list[QuestionResult]) -> None:
    run_dir = store / "runs" / run.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(run.model_dump_json())
    (run_dir / "results.jsonl").write_text("".join(row.model_dump_json() + "\n" for row in results))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    config = tmp_path / "mini.yaml"
    config.write_text(CONFIG)
    where = {"dataset": str(MINI.resolve()), "config": str(config)}
    store = tmp_path / "store"
    write_run(store, record("20261125-a1", RUN_A, created_at="2026-11-25T01:00:00Z", **where), RUN_A)
    write_run(store, record("20261125-b2", RUN_B, created_at="2026-11-25T02:00:00Z", **where), RUN_B)
    return store


def invoke(store: Path, *args: str) -> Result:
    return CliRunner(env={"COLUMNS": "200"}).invoke(benchmark, ["--store", str(store), *args])


def test_report_json_has_the_run_and_its_baselines(store: Path) -> None:
    outcome = invoke(store, "report", "20261125-b", "--json")  # a unique prefix names the run
    assert outcome.exit_code == 0, outcome.output
    report = json.loads(outcome.stdout)
    assert report["run_id"] == "20261125-b2"
    assert report["accuracy"] == pytest.approx(5 / 6)
    assert report["cost"] == pytest.approx(0.005348)
    baselines = report["baselines"]
    # from the dataset files and the config's prices, as test_benchmark_report computes by hand
    assert [(m["name"], m["correct"]) for m in baselines["models"]] == [("big", 5), ("mid", 4), ("small", 3)]
    assert baselines["models"][0]["cost"] == pytest.approx(1348 * 10 * MICRO)
    assert baselines["category_best"]["accuracy"] == 1.0
    assert baselines["oracle"]["cost"] == pytest.approx(3691 * MICRO)


def test_report_table(store: Path) -> None:
    outcome = invoke(store, "report", "20261125-b2")
    assert outcome.exit_code == 0, outcome.output
    assert "accuracy 0.833 (5/6, 5 scored)" in outcome.stdout
    assert "per 1,000 queries $0.8913" in outcome.stdout
    assert "oracle" in outcome.stdout
    assert "(default) 2, law 2, math 2" in outcome.stdout


@pytest.mark.slow
def test_report_plot_writes_a_png(store: Path, tmp_path: Path) -> None:
    plot = tmp_path / "plots" / "b.png"
    outcome = invoke(store, "report", "20261125-b2", "--plot", str(plot))
    assert outcome.exit_code == 0, outcome.output
    data = plot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000  # a drawn figure, not an empty canvas
    assert [p.name for p in plot.parent.iterdir()] == ["b.png"]  # no temp file left behind


def test_report_without_its_dataset_still_reports_but_cannot_plot(store: Path, tmp_path: Path) -> None:
    gone = record("20261125-c3", RUN_A, dataset=str(tmp_path / "gone"), config=str(tmp_path / "mini.yaml"))
    write_run(store, gone, RUN_A)
    outcome = invoke(store, "report", "20261125-c3", "--json")
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.stdout)["baselines"] is None
    assert "baselines left out" in outcome.stderr
    plot = tmp_path / "c.png"
    outcome = invoke(store, "report", "20261125-c3", "--plot", str(plot))
    assert outcome.exit_code == 2
    assert not plot.exists()


def test_report_of_a_config_without_dataset_models_has_no_baselines(store: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(CONFIG.replace("{name: ", "{name: x-").replace(": small}", ": x-small}"))
    write_run(store, record("20261125-d4", RUN_A, dataset=str(MINI.resolve()), config=str(other)), RUN_A)
    outcome = invoke(store, "report", "20261125-d4", "--json")
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.stdout)["baselines"] is None
    assert "no model of" in outcome.stderr


def test_compare_json(store: Path) -> None:
    outcome = invoke(store, "compare", "20261125-a1", "20261125-b2", "--json")
    assert outcome.exit_code == 0, outcome.output
    comparison = json.loads(outcome.stdout)
    assert comparison["accuracy_delta"] == pytest.approx(2 / 6)
    assert (comparison["right_only_in_a"], comparison["right_only_in_b"], comparison["same_model"]) == (
        1,
        3,
        1,
    )


def test_compare_table(store: Path) -> None:
    outcome = invoke(store, "compare", "20261125-a1", "20261125-b2")
    assert outcome.exit_code == 0, outcome.output
    assert "right only in A 1, only in B 3" in outcome.stdout


def test_runs_lists_newest_first_and_pages(store: Path) -> None:
    outcome = invoke(store, "runs")
    assert outcome.exit_code == 0, outcome.output
    assert outcome.stdout.index("20261125-b2") < outcome.stdout.index("20261125-a1")
    outcome = invoke(store, "runs", "--limit", "1")
    assert "20261125-b2" in outcome.stdout
    assert "20261125-a1" not in outcome.stdout
    assert "1 of 2 runs shown" in outcome.stderr


@pytest.mark.parametrize(
    ("command", "limit"), [("runs", "0"), ("runs", "51"), ("show", "0"), ("show", "501")]
)
def test_limits_out_of_range_are_usage_errors(store: Path, command: str, limit: str) -> None:
    args = [command, "20261125-a1"] if command == "show" else [command]
    outcome = invoke(store, *args, "--limit", limit)
    assert outcome.exit_code == 2
    assert "--limit" in outcome.stderr


def test_show_pages_the_questions(store: Path) -> None:
    outcome = invoke(store, "show", "20261125-b2", "--limit", "2")
    assert outcome.exit_code == 0, outcome.output
    shown = [line for line in outcome.stdout.splitlines() if "│ math" in line or "│ law" in line]
    assert len(shown) == 2  # q1 and q2, both math
    assert "2 of 6 questions shown" in outcome.stderr
    everything = invoke(store, "show", "20261125-b2", "--limit", "500")
    assert "model not in dataset" in everything.stdout
    assert "questions shown" not in everything.stderr


def test_export_json_round_trips(store: Path, tmp_path: Path) -> None:
    output = tmp_path / "b.json"
    outcome = invoke(store, "export", "20261125-b2", "--format", "json", "--output", str(output))
    assert outcome.exit_code == 0, outcome.output
    exported = json.loads(output.read_text())
    assert RunRecord.model_validate(exported["run"]).run_id == "20261125-b2"
    assert [QuestionResult.model_validate(row) for row in exported["results"]] == RUN_B


def test_export_csv_round_trips_on_stdout(store: Path) -> None:
    outcome = invoke(store, "export", "20261125-a1", "--format", "csv")
    assert outcome.exit_code == 0, outcome.output
    rows = csv.DictReader(io.StringIO(outcome.stdout))
    assert [QuestionResult.model_validate({k: v for k, v in row.items() if v}) for row in rows] == RUN_A


@pytest.mark.parametrize("command", ["report", "show", "export"])
def test_an_unknown_run_is_a_clear_error(store: Path, command: str) -> None:
    extra = ["--format", "json"] if command == "export" else []
    outcome = invoke(store, command, "nope", *extra)
    assert outcome.exit_code == 2
    assert "no run 'nope'" in outcome.stderr
    assert "Traceback" not in outcome.output


def test_an_ambiguous_prefix_names_the_candidates(store: Path) -> None:
    outcome = invoke(store, "show", "20261125")
    assert outcome.exit_code == 2
    assert "ambiguous" in outcome.stderr
    assert "20261125-a1" in outcome.stderr and "20261125-b2" in outcome.stderr


def test_a_damaged_results_file_is_a_clear_error(store: Path) -> None:
    results = store / "runs" / "20261125-a1" / "results.jsonl"
    results.write_text(results.read_text() + '{"question_id": "x"}\n')
    outcome = invoke(store, "show", "20261125-a1")
    assert outcome.exit_code == 2
    assert "results.jsonl: unreadable results" in outcome.stderr


def test_runs_in_an_empty_store(tmp_path: Path) -> None:
    outcome = invoke(tmp_path / "empty", "runs")
    assert outcome.exit_code == 0
    assert "no benchmark runs" in outcome.stderr
