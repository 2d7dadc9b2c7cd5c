"""`svc-sr benchmark regrade | reconcile-usage | comparison-options | replay-options`.

- `regrade RUN [--dry-run]`: grade RUN's recorded answers again against the answer keys
  (app/benchmark/audit.py); the changed grades, and the regraded run stored as a new run of
  kind `regrade` (RUN itself is never changed).
- `reconcile-usage RUN [--json]`: RUN's tokens and costs against the recorded usage at the
  config's pricing, and its stored total against its rows; exit 1 when they disagree.
- `comparison-options [RUN]`: the stored runs `compare` can pair with RUN (same dataset,
  shared questions), or, without RUN, the runs grouped by dataset.
- `replay-options [--url URL | --target NAME]`: the registered router targets; with a router,
  its config versions and the one replay can take (the active one).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NoReturn

import click
from pydantic import BaseModel
from rich.table import Table

from app.benchmark.audit import reconcile, regrade
from app.benchmark.dataset import Dataset, DatasetError
from app.benchmark.records import RunRecord
from app.benchmark.registry import Registry
from app.benchmark.store import StoreError, new_run_id, utc_now
from app.cli.benchmark_report_cmds import _money, current_store, stderr, stdout
from app.cli.benchmark_sources import config_versions, router_client, router_options
from app.cli.remote import EXIT_FAILURE, EXIT_INVALID, check, echo_json, fail


def _invalid(exc: Exception) -> NoReturn:
    fail(str(exc), EXIT_INVALID)


def _record(ref: str) -> RunRecord:
    try:
        return current_store().load_record(ref)
    except StoreError as exc:
        _invalid(exc)


def _dataset(record: RunRecord) -> Dataset:
    try:
        return Dataset.load(Path(record.dataset))
    except DatasetError as exc:
        _invalid(exc)


@click.command("regrade")
@click.argument("run")
@click.option("--dry-run", is_flag=True, help="Show the changed grades; store nothing.")
@click.option("--json", "as_json", is_flag=True)
def regrade_command(run: str, dry_run: bool, as_json: bool) -> None:
    """Grade RUN's recorded answers again against the answer keys; store the result as a new run."""
    from app.benchmark.report import summarize

    store = current_store()
    record = _record(run)
    try:
        results = store.load_results(record.run_id)
    except StoreError as exc:
        _invalid(exc)
    dataset = _dataset(record)
    started = time.perf_counter()
    regraded, changes = regrade(results, dataset)
    summary = summarize(regraded)
    new_id = None
    if not dry_run:
        created = utc_now()
        copy = record.model_copy(
            update={
                "run_id": new_run_id(created),
                "created_at": created.isoformat(timespec="seconds"),
                "kind": "regrade",
                "source_run": record.run_id,
                "dataset_fingerprint": dataset.fingerprint,
                "summary": summary,
                "duration_s": round(time.perf_counter() - started, 3),
            }
        )
        try:
            store.save(copy, regraded)
        except (OSError, StoreError) as exc:
            fail(f"cannot store the regraded run: {exc}", EXIT_FAILURE)
        new_id = copy.run_id
    if as_json:
        echo_json(
            {
                "run": record.run_id,
                "regraded_run": new_id,
                "accuracy_before": record.summary.accuracy,
                "accuracy_after": summary.accuracy,
                "changes": [c.model_dump() for c in changes],
            }
        )
        return
    stdout.print(
        f"run {record.run_id}: {len(changes)} grade(s) changed; accuracy {record.summary.accuracy:.4f} -> "
        f"{summary.accuracy:.4f}"
    )
    for c in changes[:20]:
        stdout.print(
            f"  question {c.question_id} ({c.model}): pred {c.pred!r}, key {c.answer!r}: {c.was} -> {c.now}"
        )
    stderr.print(f"stored as run {new_id}" if new_id else "not stored (--dry-run)")


@click.command("reconcile-usage")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True)
def reconcile_command(run: str, as_json: bool) -> None:
    """Check RUN's tokens and costs against the recorded usage at the config's pricing (exit 1 on a mismatch)."""
    from app.config.errors import ConfigError
    from app.config.loader import load_config

    store = current_store()
    record = _record(run)
    try:
        results = store.load_results(record.run_id)
    except StoreError as exc:
        _invalid(exc)
    dataset = _dataset(record)
    pricing: dict[str, Any] | None = None
    try:
        config = load_config(record.config).config
        pricing = {m.name: m.pricing for m in config.providers.models}
    except ConfigError as exc:
        stderr.print(f"costs not repriced: {exc}")
    result = reconcile(record, results, dataset, pricing)
    if as_json:
        echo_json({**result.model_dump(), "reconciled": result.reconciled})
    else:
        stdout.print(
            f"run {record.run_id}: {result.checked} of {result.rows} rows checked; tokens "
            f"{result.prompt_tokens:,} + {result.completion_tokens:,}; cost of the rows {_money(result.cost_rows)}, "
            f"stored {_money(result.cost_stored)}"
            + (
                f", at the config's pricing {_money(result.cost_expected)}"
                if result.cost_expected is not None
                else ""
            )
        )
        for m in result.mismatches[:20]:
            stdout.print(
                f"  question {m.question_id} ({m.model}) {m.field}: stored {m.stored:.6g}, expected {m.expected:.6g}"
            )
        stdout.print(
            "reconciled" if result.reconciled else f"not reconciled: {len(result.mismatches)} mismatch(es)"
        )
    if not result.reconciled:
        click.get_current_context().exit(EXIT_FAILURE)


@click.command("comparison-options")
@click.argument("run", required=False)
@click.option(
    "--limit", type=click.IntRange(1, 25), default=10, show_default=True, help="Runs listed, 1 to 25."
)
@click.option("--json", "as_json", is_flag=True)
def comparison_options_command(run: str | None, limit: int, as_json: bool) -> None:
    """The runs `compare` can pair with RUN (same dataset, shared questions); without RUN, runs by dataset."""
    records = current_store().list_runs()
    if run is None:
        groups: dict[str, list[RunRecord]] = {}
        for r in records:
            groups.setdefault(r.dataset_fingerprint, []).append(r)
        listed = [
            RunGroup(
                dataset=rs[0].dataset,
                dataset_fingerprint=fp,
                runs=[r.run_id for r in rs[:limit]],
                total=len(rs),
            )
            for fp, rs in groups.items()
            if len(rs) > 1
        ]
        if as_json:
            echo_json({"groups": [g.model_dump() for g in listed]})
            return
        if not listed:
            stderr.print("no two stored runs share a dataset")
        for g in listed:
            stdout.print(f"{g.dataset}: {g.total} runs: {', '.join(g.runs)}")
        return
    base = _record(run)
    options = [
        ComparisonOption(
            run_id=r.run_id,
            kind=r.kind,
            created_at=r.created_at,
            config=r.config,
            shared_questions=shared,
            accuracy=r.summary.accuracy,
        )
        for r in records
        if r.run_id != base.run_id
        and r.dataset_fingerprint == base.dataset_fingerprint
        and (shared := _shared(base, r))
    ]
    if as_json:
        echo_json(
            {"run": base.run_id, "options": [o.model_dump() for o in options[:limit]], "total": len(options)}
        )
        return
    table = Table(
        "run", "kind", "shared questions", "accuracy", "config", title=f"compare {base.run_id} with"
    )
    for o in options[:limit]:
        table.add_row(o.run_id, o.kind, str(o.shared_questions), f"{o.accuracy:.3f}", o.config)
    stdout.print(table)


class RunGroup(BaseModel):
    dataset: str
    dataset_fingerprint: str
    runs: list[str]
    total: int


class ComparisonOption(BaseModel):
    run_id: str
    kind: str
    created_at: str
    config: str
    shared_questions: int
    accuracy: float


def _shared(a: RunRecord, b: RunRecord) -> int:
    """Questions both runs routed (None: every question of the dataset)."""
    if a.question_ids is None and b.question_ids is None:
        return b.summary.questions
    if a.question_ids is None or b.question_ids is None:
        return len(a.question_ids or b.question_ids or [])
    return len(set(a.question_ids).intersection(b.question_ids))


@click.command("replay-options")
@click.option("--url", default=None, help="A router's management API: its config versions.")
@click.option("--target", "target_name", default=None, help="A registered router target.")
@router_options[0]
@router_options[1]
@click.option("--json", "as_json", is_flag=True)
def replay_options_command(
    url: str | None, target_name: str | None, timeout: float, token_env: str, as_json: bool
) -> None:
    """What `replay` can take: the router targets; with --url/--target, that router's config versions."""
    targets = [t.model_dump() for t in Registry(current_store()).targets() if t.kind == "router"]
    router: dict[str, Any] | None = None
    if url is not None or target_name is not None:
        client = router_client(url, target_name, timeout, token_env)
        with client:
            response = client.request("GET", "/api/v1/config", params={"format": "json"})
            check(response)
            active = response.headers.get("x-svc-config-version")
            versions = config_versions(client)
        router = {
            "url": client.endpoint,
            "active_version": active,
            "versions": [{**v, "replayable": str(v.get("config_version")) == active} for v in versions],
        }
    if as_json:
        echo_json({"targets": targets, "router": router})
        return
    for t in targets:
        stdout.print(f"target {t['name']}: {t['url']}")
    if not targets:
        stderr.print("no router targets (see `svc-sr benchmark target register --url`)")
    if router is not None:
        stdout.print(
            f"{router['url']}: active version {router['active_version']} (replay takes the active one)"
        )
        for v in router["versions"]:
            stdout.print(f"  version {v.get('config_version')}{'  (active)' if v['replayable'] else ''}")


def register_audit_commands(group: click.Group) -> None:
    for command in (regrade_command, reconcile_command, comparison_options_command, replay_options_command):
        group.add_command(command)
