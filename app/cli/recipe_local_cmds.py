"""`svc-sr recipe builtin list|export|init` and `svc-sr recipe pack`: local recipe files,
no server needed.

Built-ins (app/config/builtin_recipes.py) name their models by placeholders (`slots`);
`init --model` sets them. `pack DIR -o FILE` bundles a directory's recipe files (*.yaml,
*.yml, *.json, sorted by file name) into one `{recipes: [...]}` file: exactly a document's
`recipes:` section. Each file is checked against the recipe model (app/config/recipes.py
Recipe: name slug, routing structure); model references are checked by the router when the
section is applied, since they depend on its providers. A file without `name` takes its stem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import ValidationError

from app.cli.remote import EXIT_INVALID, EXIT_NOT_FOUND, echo_json, fail, read_document
from app.config.builtin_recipes import BUILTINS, BuiltinRecipe, assign_models, initialized
from app.config.recipes import DEFAULT_RECIPE, Recipe

FILE_KEYS = ("name", "description", "routing")
RECIPE_SUFFIXES = (".yaml", ".yml", ".json")


def dump(document: Any, path: Path | None) -> str:
    """JSON for a `.json` output path, YAML otherwise."""
    if path is not None and path.suffix == ".json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)


def write_out(document: Any, output: Path | None) -> None:
    text = dump(document, output)
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    click.echo(f"wrote {output}", err=True)


def find_builtin(name: str) -> BuiltinRecipe:
    found = BUILTINS.get(name)
    if found is None:
        fail(f"no built-in recipe {name!r} (built-ins: {', '.join(BUILTINS)})", EXIT_NOT_FOUND)
    return found


_output = click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File (.json: JSON).",
)


@click.group("builtin")
def builtin() -> None:
    """Recipes shipped with svc-sr: list them, export one, or init one with your models."""


@builtin.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def builtin_list(as_json: bool) -> None:
    """The built-in recipes: name, model slots and description."""
    rows = [{"name": r.name, "description": r.description, "slots": r.slots} for r in BUILTINS.values()]
    if as_json:
        echo_json({"recipes": rows})
        return
    click.echo(f"{'NAME':<14} {'MODEL SLOTS':<28} DESCRIPTION")
    for row in rows:
        click.echo(f"{row['name']:<14} {','.join(row['slots']):<28} {row['description']}")


@builtin.command("export")
@click.argument("name")
@_output
def builtin_export(name: str, output: Path | None) -> None:
    """Print built-in NAME as a recipe file (its model slots as model names)."""
    write_out(find_builtin(name).recipe_file(), output)


@builtin.command("init")
@click.argument("name")
@click.option(
    "--model",
    "models",
    multiple=True,
    required=True,
    help="MODEL for every slot, or SLOT=MODEL (repeat), or models in slot order.",
)
@click.option("--name", "new_name", default=None, help="Name of the new recipe (default: the built-in's).")
@_output
def builtin_init(name: str, models: tuple[str, ...], new_name: str | None, output: Path | None) -> None:
    """Built-in NAME as a recipe file with its model slots set to your models."""
    recipe = find_builtin(name)
    try:
        mapping = assign_models(recipe, list(models))
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    document = initialized(recipe, mapping, new_name)
    _check(document, f"--name {new_name}")
    write_out(document, output)


def _check(document: dict[str, Any], where: str) -> Recipe:
    try:
        return Recipe.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        fail(f"{where}: {path}: {first['msg']}", EXIT_INVALID)


def _pack_entry(path: Path) -> dict[str, Any]:
    document = read_document(path)
    unknown = sorted(set(document) - set(FILE_KEYS))
    if unknown:
        fail(f"{path}: unknown keys {unknown} (a recipe file has {', '.join(FILE_KEYS)})", EXIT_INVALID)
    entry = {"name": document.get("name") or path.stem, **{k: v for k, v in document.items() if k != "name"}}
    if entry["name"] == DEFAULT_RECIPE:
        fail(f"{path}: `default` is the top-level routing, not a named recipe", EXIT_INVALID)
    _check(entry, str(path))
    return {k: entry[k] for k in FILE_KEYS if k in entry}


@click.command("pack")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path))
def recipe_pack(directory: Path, output: Path) -> None:
    """Bundle DIR's recipe files into one `{recipes: [...]}` file (a document's `recipes:`
    section); exit 2 when a file is invalid or two share a name."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in RECIPE_SUFFIXES)
    if not files:
        fail(f"{directory}: no recipe files ({', '.join(RECIPE_SUFFIXES)})", EXIT_INVALID)
    entries: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    for path in files:
        entry = _pack_entry(path)
        if entry["name"] in seen:
            fail(f"{path}: recipe {entry['name']!r} is also in {seen[entry['name']]}", EXIT_INVALID)
        seen[entry["name"]] = path
        entries.append(entry)
    write_out({"recipes": entries}, output)
