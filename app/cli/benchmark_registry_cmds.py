"""`svc-sr benchmark experiment` and `target`: named groups of runs, named things to benchmark.

- `experiment create NAME [--description]`, `list`, `show NAME`, `attach NAME RUN...`,
  `delete NAME` (the experiment only: its runs stay in the store). `run`/`replay
  --experiment NAME` attach the stored run as it is stored.
- `target register NAME --url URL [--token-env]` (a router: `replay --target NAME`) or
  `--config FILE` (a config: `run --target NAME`); `target list`.

Files: app/benchmark/registry.py. Bad input (an unknown name, a run id that names no run, a
name taken) is one message and exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import click

from app.benchmark.records import RunRecord
from app.benchmark.registry import Experiment, Registry, Target, check_name, now
from app.benchmark.store import StoreError
from app.cli.benchmark_report_cmds import current_store, stderr, stdout
from app.cli.remote import EXIT_INVALID, echo_json, fail


def _registry() -> Registry:
    return Registry(current_store())


def _invalid(exc: Exception) -> NoReturn:
    fail(str(exc), EXIT_INVALID)


# ---------------------------------------------------------------------- experiment


@click.group("experiment")
def experiment_group() -> None:
    """Group runs into named experiments (a candidate config's runs, a study)."""


@experiment_group.command("create")
@click.argument("name")
@click.option("--description", default="", help="What the experiment compares.")
@click.option("--json", "as_json", is_flag=True)
def experiment_create(name: str, description: str, as_json: bool) -> None:
    """Create experiment NAME (no runs yet: `attach` them, or `run --experiment NAME`)."""
    try:
        experiment = _registry().create_experiment(name, description)
    except StoreError as exc:
        _invalid(exc)
    if as_json:
        echo_json(experiment.model_dump())
    else:
        stderr.print(f"experiment {name} created")


@experiment_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def experiment_list(as_json: bool) -> None:
    """The experiments, by name, with their run counts."""
    experiments = _registry().experiments()
    if as_json:
        echo_json({"experiments": [e.model_dump() for e in experiments]})
        return
    if not experiments:
        stderr.print("no experiments (see `svc-sr benchmark experiment create`)")
        return
    from rich.table import Table

    table = Table("experiment", "runs", "created", "description")
    for e in experiments:
        table.add_row(e.name, str(len(e.runs)), e.created_at, e.description)
    stdout.print(table)


def _runs_of(experiment: Experiment) -> list[tuple[str, RunRecord | None]]:
    store = current_store()
    out: list[tuple[str, RunRecord | None]] = []
    for run_id in experiment.runs:
        try:
            out.append((run_id, store.load_record(run_id)))
        except StoreError:
            out.append((run_id, None))  # deleted or damaged since it was attached
    return out


@experiment_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def experiment_show(name: str, as_json: bool) -> None:
    """Experiment NAME and the summary of each of its runs (best accuracy first)."""
    try:
        experiment = _registry().experiment(name)
    except StoreError as exc:
        _invalid(exc)
    runs = _runs_of(experiment)
    found = sorted((r for _, r in runs if r is not None), key=lambda r: -r.summary.accuracy)
    missing = [run_id for run_id, r in runs if r is None]
    if as_json:
        echo_json(
            {
                **experiment.model_dump(),
                "records": [r.model_dump() for r in found],
                "missing": missing,
            }
        )
        return
    from rich.table import Table

    stdout.print(f"experiment {experiment.name} ({experiment.created_at}) {experiment.description}")
    table = Table("run", "kind", "questions", "accuracy", "cost", "config")
    for r in found:
        s = r.summary
        table.add_row(r.run_id, r.kind, str(s.questions), f"{s.accuracy:.3f}", f"{s.cost:.6g}", r.config)
    stdout.print(table)
    if missing:
        stderr.print(f"not in the store any more: {', '.join(missing)}")


@experiment_group.command("attach")
@click.argument("name")
@click.argument("runs", nargs=-1, required=True)
def experiment_attach(name: str, runs: tuple[str, ...]) -> None:
    """Attach RUNS (ids or unique prefixes) to experiment NAME."""
    try:
        experiment, added = _registry().attach(name, runs)
    except StoreError as exc:
        _invalid(exc)
    kept = len(runs) - len(added)
    stderr.print(
        f"experiment {name}: {len(added)} run(s) attached"
        + (f", {kept} attached already" if kept else "")
        + f" ({len(experiment.runs)} in all)"
    )


@experiment_group.command("delete")
@click.argument("name")
def experiment_delete(name: str) -> None:
    """Delete experiment NAME; its runs stay in the store."""
    try:
        experiment = _registry().delete_experiment(name)
    except StoreError as exc:
        _invalid(exc)
    stderr.print(f"experiment {name} deleted ({len(experiment.runs)} run(s) kept in the store)")


# ---------------------------------------------------------------------- target


@click.group("target")
def target_group() -> None:
    """Named things to benchmark: a router's management API, or a config file."""


@target_group.command("register")
@click.argument("name")
@click.option("--url", default=None, help="A router's management API (a router target: `replay --target`).")
@click.option("--token-env", default=None, help="Env var with that router's management token.")
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A config file (a config target: `run --target`).",
)
@click.option("--description", default="")
@click.option("--replace", is_flag=True, help="Overwrite a target of the same name.")
@click.option("--json", "as_json", is_flag=True)
def target_register(
    name: str,
    url: str | None,
    token_env: str | None,
    config_path: Path | None,
    description: str,
    replace: bool,
    as_json: bool,
) -> None:
    """Register target NAME: --url (a router) or --config (a config file), one of them."""
    if (url is None) == (config_path is None):
        raise click.UsageError("give --url URL (a router) or --config FILE (a config), one of them")
    if url is not None and not url.startswith(("http://", "https://")):
        raise click.BadParameter(f"{url!r}: an http:// or https:// URL", param_hint="--url")
    if config_path is not None:
        _check_config(config_path)
    try:
        target = Target(
            name=check_name(name, "target"),
            kind="router" if url is not None else "config",
            url=url.rstrip("/") if url is not None else None,
            token_env=token_env,
            config=str(config_path.resolve()) if config_path is not None else None,
            description=description,
            registered_at=now(),
        )
        _registry().register_target(target, replace=replace)
    except StoreError as exc:
        _invalid(exc)
    if as_json:
        echo_json(target.model_dump())
    else:
        stderr.print(f"target {name} registered ({target.kind} {target.url or target.config})")


def _check_config(path: Path) -> None:
    """A config target must be a valid config now (a typo found at registration, not at run)."""
    from app.config.errors import ConfigError
    from app.config.loader import load_config

    try:
        load_config(path)
    except ConfigError as exc:
        _invalid(exc)


@target_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def target_list(as_json: bool) -> None:
    """The registered targets."""
    targets = _registry().targets()
    if as_json:
        echo_json({"targets": [t.model_dump() for t in targets]})
        return
    if not targets:
        stderr.print("no targets (see `svc-sr benchmark target register`)")
        return
    from rich.table import Table

    table = Table("target", "kind", "where", "token env", "description")
    for t in targets:
        table.add_row(t.name, t.kind, t.url or t.config or "", t.token_env or "", t.description)
    stdout.print(table)


def register_registry_commands(group: click.Group) -> None:
    group.add_command(experiment_group)
    group.add_command(target_group)
