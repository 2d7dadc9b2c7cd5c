"""`svc-sr benchmark cancel | recover-plan | recover`: runs in progress (app/benchmark/active.py).

- `cancel RUN`: a running run is asked to stop (it stops at its next batch boundary and keeps
  what it scored, `cancelled`); an interrupted one is marked `cancelled` at once. `--wait`
  waits (at most --timeout seconds) until the run has stopped.
- `recover-plan [RUN]`: without RUN, every run in progress, cancelled or interrupted; with RUN,
  what `recover` would do: the questions scored and kept, those left, whether the dataset
  still matches.
- `recover RUN`: route the questions left with the run's exact config and store the run as an
  uninterrupted one would be (a weighted selection's draws restart from the seed, so those
  choices may differ from an uninterrupted run's).

A run that still runs cannot be recovered (exit 2: cancel it first); an unknown run is exit 2.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.table import Table

from app.benchmark.active import ActiveRuns, ActiveState
from app.benchmark.combine import fingerprint
from app.benchmark.dataset import Dataset, DatasetError
from app.benchmark.store import StoreError
from app.cli.benchmark_exec import route_and_store
from app.cli.benchmark_report_cmds import current_store, stderr, stdout
from app.cli.remote import EXIT_FAILURE, EXIT_INVALID, echo_json, fail

RECOVERABLE = ("cancelled", "interrupted", "failed")


def _invalid(exc: Exception) -> NoReturn:
    fail(str(exc), EXIT_INVALID)


def _active() -> ActiveRuns:
    return ActiveRuns(current_store())


def _state(ref: str) -> ActiveState:
    try:
        return _active().load(ref)
    except StoreError as exc:
        _invalid(exc)


@click.command("cancel")
@click.argument("run")
@click.option("--wait", is_flag=True, help="Wait until the run has stopped.")
@click.option(
    "--timeout", type=click.FloatRange(0, 3600), default=60.0, show_default=True, help="Seconds --wait waits."
)
def cancel_command(run: str, wait: bool, timeout: float) -> None:
    """Stop a run in progress; what it scored is kept for `recover`."""
    active = _active()
    state = _state(run)
    if state.status in ("cancelled", "failed"):
        fail(
            f"run {state.run_id} is {state.status} already (`svc-sr benchmark recover {state.run_id}` finishes it)",
            EXIT_INVALID,
        )
    if state.status == "interrupted":
        state.status = "cancelled"
        active.write_state(state)
        stderr.print(f"run {state.run_id} was interrupted; marked cancelled")
        return
    state.status = "cancel-requested"
    active.write_state(state)
    stderr.print(f"run {state.run_id}: cancel requested; it stops at its next batch boundary")
    if not wait:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = active.load(state.run_id).status
        except StoreError:  # stored and removed: it finished before it saw the request
            fail(f"run {state.run_id} finished before it stopped", EXIT_FAILURE)
        if status in RECOVERABLE:
            stderr.print(f"run {state.run_id} {status}")
            return
        time.sleep(0.2)
    fail(f"run {state.run_id} has not stopped after {timeout:g} s", EXIT_FAILURE)


def _plan(state: ActiveState) -> dict[str, Any]:
    done = {r.question_id for r in _active().results(state.run_id)}
    left = [i for i in state.planned if i not in done]
    current = fingerprint(Path(state.dataset))
    return {
        **state.model_dump(),
        "done": len(done),
        "left": len(left),
        "left_ids": left,
        "dataset_matches": current == state.dataset_fingerprint,
        "recoverable": state.status in RECOVERABLE and current == state.dataset_fingerprint,
    }


@click.command("recover-plan")
@click.argument("run", required=False)
@click.option("--json", "as_json", is_flag=True)
def recover_plan_command(run: str | None, as_json: bool) -> None:
    """What `recover RUN` would do; without RUN, every run in progress or left unfinished."""
    states = [_state(run)] if run is not None else _active().states()
    plans = [_plan(s) for s in states]
    if as_json:
        echo_json({"runs": plans} if run is None else plans[0])
        return
    if not plans:
        stderr.print("no runs in progress or unfinished")
        return
    table = Table("run", "kind", "status", "done", "left", "dataset", "recover", title="unfinished runs")
    for p in plans:
        why = "yes" if p["recoverable"] else ("dataset changed" if not p["dataset_matches"] else p["status"])
        table.add_row(
            p["run_id"],
            p["kind"],
            p["status"],
            str(p["done"]),
            str(p["left"]),
            "matches" if p["dataset_matches"] else "changed",
            why,
        )
    stdout.print(table)
    if run is not None:
        p = plans[0]
        stdout.print(
            f"recover would route {p['left']} question(s) with the run's stored config ({p['config']}), "
            f"batch size {p['batch_size']}, seed {p['seed']}, then store run {p['run_id']}"
        )


@click.command("recover")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Last stdout line: the JSON summary.")
def recover_command(run: str, as_json: bool) -> None:
    """Finish an interrupted or cancelled run: route the questions left, store the run."""
    from app.config.errors import ConfigError
    from app.config.loader import parse_config

    active = _active()
    state = _state(run)
    if state.status not in RECOVERABLE:
        fail(
            f"run {state.run_id} is {state.status} (pid {state.pid} on {state.host}): cancel it first",
            EXIT_INVALID,
        )
    try:
        dataset = Dataset.load(Path(state.dataset))
        config = parse_config(active.config_document(state.run_id), source=state.config).config
    except (DatasetError, ConfigError, StoreError) as exc:
        _invalid(exc)
    if dataset.fingerprint != state.dataset_fingerprint:
        fail(
            f"{state.dataset} changed since run {state.run_id} started: its results cannot be finished",
            EXIT_INVALID,
        )
    done = active.results(state.run_id)
    stderr.print(f"run {state.run_id}: {len(done)} of {len(state.planned)} questions kept; routing the rest")
    route_and_store(config, dataset, active.adopt(state), done, as_json)


def register_recovery_commands(group: click.Group) -> None:
    for command in (cancel_command, recover_plan_command, recover_command):
        group.add_command(command)
