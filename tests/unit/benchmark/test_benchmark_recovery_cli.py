"""`svc-sr benchmark cancel | recover-plan | recover`: a run checkpoints each batch into
`<store>/active/<run_id>/`; cancelled mid-run, it keeps what it scored, and `recover`
finishes it with the figures an uninterrupted run has."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.benchmark.active import ActiveRuns
from app.benchmark.store import RunStore
from app.cli.remote import EXIT_FAILURE, EXIT_INVALID
from tests.unit.benchmark.test_benchmark_cli import KEYWORD_ACCURACY, KEYWORD_COST, invoke
from tests.unit.benchmark.test_benchmark_runner import MATH_TO_BIG, MINI, document


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "keyword.yaml"
    path.write_text(yaml.safe_dump(document(default="small", routing=MATH_TO_BIG)))
    return path


def cancelled_run(
    store: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch, dataset: Path = MINI
) -> str:
    """A run asked to stop after its second batch, as `benchmark cancel` from elsewhere does."""
    original = ActiveRuns.checkpoint
    calls: list[int] = []

    def checkpoint(self: ActiveRuns, run_id: str, results: list) -> None:
        calls.append(len(results))
        if len(calls) == 2:
            state = self.load(run_id)
            state.status = "cancel-requested"
            self.write_state(state)
        original(self, run_id, results)

    monkeypatch.setattr(ActiveRuns, "checkpoint", checkpoint)
    result = invoke(
        store, "run", "--dataset", str(dataset), "--config", str(config_file), "--batch-size", "2"
    )
    monkeypatch.setattr(ActiveRuns, "checkpoint", original)
    assert result.exit_code == EXIT_FAILURE, result.stderr
    assert "cancelled: 3 of 6 questions scored and kept" in result.stderr  # the probe, then a batch of 2
    assert RunStore(store).run_ids() == []
    [run_id] = ActiveRuns(RunStore(store)).ids()
    return run_id


def test_a_cancelled_run_is_recovered_to_the_uninterrupted_figures(
    tmp_path: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch
):
    store = tmp_path / "store"
    run_id = cancelled_run(store, config_file, monkeypatch)
    plan = json.loads(invoke(store, "recover-plan", run_id[:15], "--json").stdout)
    assert (plan["status"], plan["done"], plan["left"], plan["left_ids"]) == ("cancelled", 3, 3, [4, 5, 6])
    assert plan["recoverable"] is True and plan["dataset_matches"] is True
    listed = json.loads(invoke(store, "recover-plan", "--json").stdout)["runs"]
    assert [p["run_id"] for p in listed] == [run_id]
    again = invoke(store, "cancel", run_id)
    assert again.exit_code == EXIT_INVALID and "cancelled already" in again.stderr
    recovered = invoke(store, "recover", run_id, "--json")
    assert recovered.exit_code == 0, recovered.stderr
    last = json.loads(recovered.stdout.splitlines()[-1])
    assert last["accuracy"] == pytest.approx(KEYWORD_ACCURACY) and last["cost"] == pytest.approx(KEYWORD_COST)
    record, results = RunStore(store).load(run_id)
    assert [r.question_id for r in results] == [1, 2, 3, 4, 5, 6] and record.question_ids is None
    assert record.model_mix == {"small": 4, "big": 2}
    assert ActiveRuns(RunStore(store)).ids() == []
    gone = invoke(store, "recover", run_id)
    assert gone.exit_code == EXIT_INVALID and "no run in progress" in gone.stderr


def dead_pid() -> int:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    return int(child.stdout)


def test_cancel_marks_a_live_run_and_an_interrupted_one(
    tmp_path: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch
):
    store = tmp_path / "store"
    run_id = cancelled_run(store, config_file, monkeypatch)
    active = ActiveRuns(RunStore(store))
    state = active.load(run_id)
    state.status, state.pid = "running", os.getpid()  # as if this process still ran it
    active.write_state(state)
    busy = invoke(store, "recover", run_id)
    assert busy.exit_code == EXIT_INVALID and "cancel it first" in busy.stderr
    asked = invoke(store, "cancel", run_id)
    assert asked.exit_code == 0 and active.load(run_id).status == "cancel-requested"
    waited = invoke(store, "cancel", run_id, "--wait", "--timeout", "0.3")
    assert waited.exit_code == EXIT_FAILURE and "has not stopped" in waited.stderr
    state.status, state.pid = "running", dead_pid()  # the process died
    active.write_state(state)
    assert active.load(run_id).status == "interrupted"
    marked = invoke(store, "cancel", run_id)
    assert marked.exit_code == 0 and "interrupted; marked cancelled" in marked.stderr
    assert active.load(run_id).status == "cancelled"
    assert invoke(store, "cancel", "nope").exit_code == EXIT_INVALID


def test_recover_refuses_a_changed_dataset(
    tmp_path: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch
):
    store = tmp_path / "store"
    dataset = tmp_path / "mini"
    shutil.copytree(MINI, dataset)
    run_id = cancelled_run(store, config_file, monkeypatch, dataset)
    with (dataset / "model_results.csv").open("a") as out:
        out.write("1,tiny,A,0,10\n")
    plan = json.loads(invoke(store, "recover-plan", run_id, "--json").stdout)
    assert plan["dataset_matches"] is False and plan["recoverable"] is False
    refused = invoke(store, "recover", run_id)
    assert refused.exit_code == EXIT_INVALID and "changed since" in refused.stderr
