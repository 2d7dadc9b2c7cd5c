"""`svc-sr benchmark dataset combine | exclusions | preparations`, `catalog` and `setup`.

- `dataset combine NAME SOURCE...`: several datasets (directories or prepared names) as one,
  written under the store and prepared as NAME (app/benchmark/combine.py).
- `dataset exclusions NAME [--add IDS] [--remove IDS] [--clear]`: the questions runs of a
  prepared dataset leave out (a broken question, a leaked one); shown after any change.
- `dataset preparations`: each prepared dataset and whether its files changed since.
- `catalog [--root DIR]...`: the dataset directories on this machine and their prepared names.
- `setup [--root DIR]... [--no-prepare]`: the store's folders and marker, and every catalog
  directory not prepared yet prepared; offline, and safe to run again.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import click
from rich.table import Table

from app.benchmark.combine import catalog, combine, data_roots, preparation
from app.benchmark.dataset import Dataset, DatasetError
from app.benchmark.registry import Registry
from app.benchmark.store import RunStore, StoreError, default_store_dir, index_dataset
from app.cli.benchmark_exec import load_dataset
from app.cli.benchmark_report_cmds import current_store, stderr, stdout
from app.cli.remote import EXIT_INVALID, echo_json, fail


def _invalid(exc: Exception) -> NoReturn:
    fail(str(exc), EXIT_INVALID)


def _ids(value: str | None, option: str) -> list[int]:
    if value is None:
        return []
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give question ids as 1,2,3", param_hint=option) from None


@click.command("combine")
@click.argument("name")
@click.argument("sources", nargs=-1, required=True)
@click.option("--renumber", is_flag=True, help="Give a later source's clashing questions new ids.")
@click.option("--json", "as_json", is_flag=True, help="Print the new index as JSON.")
def dataset_combine(name: str, sources: tuple[str, ...], renumber: bool, as_json: bool) -> None:
    """Combine SOURCES (directories or prepared names, two or more) into dataset NAME."""
    if len(sources) < 2:
        raise click.UsageError("combine takes two sources or more")
    loaded = [load_dataset(ref)[0] for ref in sources]
    store = current_store()
    try:
        directory = combine(loaded, store, name, renumber=renumber)
        index = index_dataset(Dataset.load(directory), name)
        store.save_dataset(index)
    except (DatasetError, StoreError) as exc:
        _invalid(exc)
    stderr.print(
        f"dataset {name}: {index.questions} questions, {index.results} results from {len(sources)} "
        f"sources, written to {directory} and prepared"
    )
    if as_json:
        echo_json(index.model_dump())


@click.command("exclusions")
@click.argument("name")
@click.option("--add", "add", default=None, help="Exclude these question ids (1,2,3).")
@click.option("--remove", "remove", default=None, help="Include these again.")
@click.option("--clear", is_flag=True, help="Exclude nothing.")
@click.option("--json", "as_json", is_flag=True)
def dataset_exclusions(name: str, add: str | None, remove: str | None, clear: bool, as_json: bool) -> None:
    """The questions runs of prepared dataset NAME leave out; --add/--remove/--clear change them."""
    store = current_store()
    registry = Registry(store)
    try:
        index = store.load_dataset(name)
        exclusions = registry.exclusions(name)
        added, removed = _ids(add, "--add"), _ids(remove, "--remove")
        if added or removed or clear:
            if added:
                Dataset.load(Path(index.path)).subset(added)  # an unknown id is bad input
            kept = set() if clear else set(exclusions.question_ids)
            exclusions.question_ids = sorted((kept | set(added)) - set(removed))
            registry.save_exclusions(exclusions)
    except (DatasetError, StoreError) as exc:
        _invalid(exc)
    if as_json:
        echo_json({**exclusions.model_dump(), "questions": index.questions})
        return
    ids = exclusions.question_ids
    shown = ", ".join(map(str, ids[:50])) + (f" (+{len(ids) - 50} more)" if len(ids) > 50 else "")
    stdout.print(
        f"{name}: {len(ids)} of {index.questions} questions excluded" + (f": {shown}" if ids else "")
    )


@click.command("preparations")
@click.option("--json", "as_json", is_flag=True)
def dataset_preparations(as_json: bool) -> None:
    """Each prepared dataset: when, and whether its files changed since (prepare it again)."""
    rows = [preparation(index) for index in current_store().list_datasets()]
    if as_json:
        echo_json({"preparations": [r.model_dump() for r in rows]})
        return
    if not rows:
        stderr.print("no prepared datasets (see `svc-sr benchmark dataset prepare` or `setup`)")
        return
    table = Table("dataset", "prepared", "questions", "status", "path")
    for row in rows:
        table.add_row(row.name, row.prepared_at, str(row.questions), row.status, row.path)
    stdout.print(table)


root_option = click.option(
    "--root",
    "roots",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to look for dataset directories (repeatable; default $SVC_SR_BENCHMARK_DATA, "
    "else ../shared/data and data).",
)


@click.command("catalog")
@root_option
@click.option("--json", "as_json", is_flag=True)
def catalog_command(roots: tuple[Path, ...], as_json: bool) -> None:
    """The dataset directories on this machine, prepared or not, with their prepared names."""
    for root in roots:
        if not root.is_dir():
            fail(f"{root}: not a directory", EXIT_INVALID)
    entries = catalog(data_roots(list(roots)), current_store().list_datasets())
    if as_json:
        echo_json({"datasets": [e.model_dump() for e in entries]})
        return
    if not entries:
        stderr.print("no dataset directories found (give --root DIR)")
        return
    table = Table("path", "prepared as", "size")
    for e in entries:
        table.add_row(e.path, ", ".join(e.prepared_as) or "-", f"{e.size_bytes / 1e6:.1f} MB")
    stdout.print(table)


@click.command("setup")
@root_option
@click.option("--no-prepare", is_flag=True, help="Only make the store; prepare nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def setup_command(ctx: click.Context, roots: tuple[Path, ...], no_prepare: bool, as_json: bool) -> None:
    """Make the store (folders and marker) and prepare the catalog's unprepared datasets, offline."""
    found = ctx.find_object(RunStore)
    store = found if found is not None else RunStore(default_store_dir())
    try:
        marker, created = Registry(store).set_up()
    except OSError as exc:
        fail(f"cannot make the store at {store.root}: {exc}", EXIT_INVALID)
    prepared: list[str] = []
    failed: dict[str, str] = {}
    if not no_prepare:
        known = {index.path for index in store.list_datasets()}
        names = {index.name for index in store.list_datasets()}
        for entry in catalog(data_roots(list(roots)), []):
            if entry.path in known:
                continue
            try:
                index = index_dataset(
                    Dataset.load(Path(entry.path)), _free_name(Path(entry.path).name, names)
                )
                store.save_dataset(index)
            except (DatasetError, StoreError) as exc:
                failed[entry.path] = str(exc)
                continue
            names.add(index.name)
            prepared.append(index.name)
    summary = {"store": str(store.root), "created": created, "prepared": prepared, "failed": failed}
    if as_json:
        echo_json({**summary, "created_at": marker.created_at})
        return
    stderr.print(
        f"store {store.root} {'made' if created else 'ready'}; prepared {len(prepared)} dataset(s)"
        + (f": {', '.join(prepared)}" if prepared else "")
    )
    for path, message in failed.items():
        stderr.print(f"not prepared: {path}: {message}")
    if failed:
        ctx.exit(EXIT_INVALID)


def _free_name(name: str, taken: set[str]) -> str:
    """The directory's name, or name-2, name-3... when a prepared dataset holds it."""
    if name not in taken:
        return name
    n = 2
    while f"{name}-{n}" in taken:
        n += 1
    return f"{name}-{n}"


def register_dataset_commands(group: click.Group, dataset_group: click.Group) -> None:
    for command in (dataset_combine, dataset_exclusions, dataset_preparations):
        dataset_group.add_command(command)
    group.add_command(catalog_command)
    group.add_command(setup_command)
