"""`svc-sr recipe ...` (docs/configuration.md "recipes"): list, get, apply, delete, validate, plan over the
management API's recipe routes (docs/management-api.md); builtin and pack work on local
files (app/cli/recipe_local_cmds.py). A recipe file is `{name, description?, routing}` (YAML
or JSON): what `recipe get` prints.

Exit codes: app/cli/remote.py (0 ok, 2 invalid, 3 unreachable, 4 conflict: stale ETag or a
recipe an entrypoint references, 5 activation failed, 6 pending, 7 auth, 8 not found).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import yaml
from rich.console import Console

from app.cli.recipe_local_cmds import FILE_KEYS, builtin, recipe_pack
from app.cli.remote import (
    EXIT_INVALID,
    Remote,
    check,
    echo_json,
    fail,
    print_reasons,
    read_document,
    remote_options,
    report_mutation,
)

console = Console(stderr=True)
RECIPES = "/api/v1/config/recipes"


def recipe_path(name: str) -> str:
    return f"{RECIPES}/{quote(name, safe='')}"


@click.group("recipe")
def recipe() -> None:
    """Routing recipes: list, read, plan, apply, delete and validate them on the router;
    built-in recipes and packing recipe files locally."""


@recipe.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON answer.")
@remote_options
def recipe_list(as_json: bool, remote: Remote) -> None:
    """The default recipe (the top-level routing) and the named ones, with their entrypoints."""
    with remote.client() as client:
        response = client.request("GET", RECIPES)
    check(response)
    body = response.json()
    if as_json:
        echo_json(body)
        return
    click.echo(f"{'NAME':<24} {'DECISIONS':>9}  {'ENTRYPOINTS':<30} DESCRIPTION")
    for view in body["recipes"]:
        name = f"{view['name']} (default)" if view["default"] else view["name"]
        entrypoints = ",".join(view["entrypoints"]) or "-"
        click.echo(
            f"{name:<24} {len(view['decisions']):>9}  {entrypoints:<30} {view.get('description') or ''}"
        )


@recipe.command("get")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
@remote_options
def recipe_get(name: str, fmt: str, output: Path | None, remote: Remote) -> None:
    """Print recipe NAME as a recipe file (`apply` takes it back); exit 8 when there is none."""
    with remote.client() as client:
        response = client.request("GET", recipe_path(name))
    check(response)
    view = response.json()
    document = {k: view[k] for k in FILE_KEYS if view.get(k) is not None}
    text = (
        yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
        if fmt == "yaml"
        else json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    )
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    console.print(f"wrote {output} (ETag {response.headers.get('etag')})")


def _recipe_file(path: Path, name: str | None) -> tuple[str, dict[str, Any]]:
    """(name, PUT body) of a recipe file; --name overrides a file without one."""
    document = read_document(path)
    unknown = sorted(set(document) - set(FILE_KEYS))
    if unknown:
        fail(f"{path}: unknown keys {unknown} (a recipe file has {', '.join(FILE_KEYS)})", EXIT_INVALID)
    chosen = name or document.get("name")
    if not isinstance(chosen, str) or not chosen:
        fail(f"{path}: no recipe name (give `name:` in the file or --name)", EXIT_INVALID)
    if name and document.get("name") not in (None, name):
        fail(f"{path} names recipe {document['name']!r}, --name {name!r}", EXIT_INVALID)
    body: dict[str, Any] = {k: document[k] for k in ("description", "routing") if k in document}
    return chosen, body


def _file_option(func: Any) -> Any:
    return click.option(
        "-f",
        "--file",
        "path",
        required=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="Recipe file {name, description?, routing} (YAML or JSON; - reads stdin).",
    )(func)


def _name_option(func: Any) -> Any:
    return click.option("--name", default=None, help="Recipe name (default: the file's `name`).")(func)


def _if_match_option(func: Any) -> Any:
    return click.option("--if-match", default=None, help="ETag to guard with (default: fetched now).")(func)


@recipe.command("apply")
@_file_option
@_name_option
@_if_match_option
@remote_options
def recipe_apply(path: Path, name: str | None, if_match: str | None, remote: Remote) -> None:
    """Create or replace a recipe (`default`: the top-level routing) as one config version;
    a packed file (`recipe pack`: `{recipes: [...]}`) creates or replaces each of its named
    recipes, all in one config version.

    Exit 0 once active; 2 invalid; 4 conflict (stale ETag); 5 activation failed; 6 pending."""
    document = read_document(path)
    if "recipes" in document:
        if name:
            fail("--name names one recipe: a packed file names its own", EXIT_INVALID)
        _apply_packed(path, document, if_match, remote)
    chosen, body = _recipe_file(path, name)
    with remote.client() as client:
        tag = if_match or client.etag()
        with console.status(f"PUT {client.endpoint}{recipe_path(chosen)}: validating and activating..."):
            response = client.request("PUT", recipe_path(chosen), json=body, headers={"If-Match": tag})
    report_mutation(response)


def _apply_packed(path: Path, document: dict[str, Any], if_match: str | None, remote: Remote) -> None:
    """PATCH the document's `recipes:` with the packed entries replacing same-named ones (a
    merge patch replaces a list whole, so the current list is read and merged here)."""
    packed = document["recipes"]
    if set(document) != {"recipes"} or not isinstance(packed, list) or not packed:
        fail(f"{path}: a packed file is `recipes: [...]` and nothing else (see `recipe pack`)", EXIT_INVALID)
    entries = [_pack_entry_of(path, index, entry) for index, entry in enumerate(packed)]
    with remote.client() as client:
        current = client.request("GET", "/api/v1/config")
        check(current)
        tag = if_match or current.headers["etag"]
        by_name = {entry["name"]: entry for entry in current.json().get("recipes") or []}
        by_name |= {entry["name"]: entry for entry in entries}
        with console.status(f"PATCH {client.endpoint}/api/v1/config: {len(entries)} recipe(s)..."):
            response = client.request(
                "PATCH", "/api/v1/config", json={"recipes": list(by_name.values())}, headers={"If-Match": tag}
            )
    report_mutation(response)


def _pack_entry_of(path: Path, index: int, entry: Any) -> dict[str, Any]:
    where = f"{path}: recipes[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        fail(f"{where}: each packed recipe is a mapping with a `name`", EXIT_INVALID)
    unknown = sorted(set(entry) - set(FILE_KEYS))
    if unknown:
        fail(f"{where}: unknown keys {unknown} (a recipe has {', '.join(FILE_KEYS)})", EXIT_INVALID)
    if entry["name"] == "default":
        fail(f"{where}: `default` is the top-level routing, not a named recipe", EXIT_INVALID)
    return dict(entry)


@recipe.command("delete")
@click.argument("name")
@_if_match_option
@remote_options
def recipe_delete(name: str, if_match: str | None, remote: Remote) -> None:
    """Delete a named recipe no entrypoint references (exit 4 while one does, 8 when unknown)."""
    with remote.client() as client:
        tag = if_match or client.etag()
        response = client.request("DELETE", recipe_path(name), headers={"If-Match": tag})
    report_mutation(response)


@recipe.command("validate")
@click.option(
    "-f", "--file", "path", type=click.Path(dir_okay=False, path_type=Path), help="Recipe file to check."
)
@_name_option
@click.option("--delete", "delete", default=None, metavar="NAME", help="Check deleting recipe NAME instead.")
@remote_options
def recipe_validate(path: Path | None, name: str | None, delete: str | None, remote: Remote) -> None:
    """Check a recipe apply (-f) or a delete (--delete NAME) against the router's current
    configuration, writing nothing; exit 2 when it would be refused."""
    if (path is None) == (delete is None):
        fail("give exactly one of -f/--file and --delete", EXIT_INVALID)
    if path is not None:
        chosen, body = _recipe_file(path, name)
        request: dict[str, Any] = {"name": chosen, "action": "put", "recipe": body}
    else:
        request = {"name": delete, "action": "delete"}
    with remote.client() as client:
        response = client.request("POST", f"{RECIPES}/validate", json=request)
    check(response)
    answer = response.json()
    echo_json(answer)
    if not answer["valid"]:
        click.echo(f"the recipe {request['action']} would be refused:", err=True)
        print_reasons(answer.get("reasons", []))
        sys.exit(EXIT_INVALID)


@recipe.command("plan")
@_file_option
@_name_option
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON only.")
@remote_options
def recipe_plan(path: Path, name: str | None, as_json: bool, remote: Remote) -> None:
    """Show what `recipe apply -f` would change (decisions and signals added, removed,
    changed), writing nothing; exit 2 when the apply would be refused."""
    from app.cli.recipe_plan import plan

    chosen, body = _recipe_file(path, name)
    request = {"name": chosen, "action": "put", "recipe": body}
    with remote.client() as client:
        response = client.request("POST", f"{RECIPES}/validate", json=request)
        check(response)
        answer = response.json()
        current = client.request("GET", recipe_path(chosen))
    if current.status_code != 404:
        check(current)
    if not answer["valid"]:
        click.echo(f"applying recipe {chosen!r} would be refused:", err=True)
        print_reasons(answer.get("reasons", []))
        sys.exit(EXIT_INVALID)
    result = plan(chosen, answer, None if current.status_code == 404 else current.json())
    if as_json:
        echo_json(result.model_dump())
        return
    verb = "create" if result.created else ("change" if result.changed else "leave unchanged")
    click.echo(f"recipe {chosen}: would {verb} (ETag {result.current_etag} -> {result.candidate_etag})")
    for kind, changes in (("decision", result.decisions), ("signal", result.signals)):
        for mark, names in (("+", changes.added), ("-", changes.removed), ("~", changes.changed)):
            for item in names:
                click.echo(f"  {mark} {kind} {item}")
    if result.description_changed:
        click.echo("  ~ description")
    if result.strategy_changed:
        click.echo("  ~ strategy")
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)


recipe.add_command(builtin)
recipe.add_command(recipe_pack)
