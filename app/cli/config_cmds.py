"""`svc-sr config ...`: init, validate, schema, get, plan, apply, versions, rollback, import
(router and envoy: app/cli/config_render.py).

Local forms read files; remote forms talk to the management API (--endpoint, --timeout,
--token-env). Exit codes: app/cli/remote.py (0 ok, 1 failure, 2 invalid, 3 unreachable,
4 conflict, 5 activation failed, 6 pending, 7 auth, 8 not found).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from app.cli.remote import (
    EXIT_INVALID,
    Remote,
    check,
    echo_json,
    error_text,
    fail,
    print_reasons,
    read_document,
    remote_options,
    report_mutation,
    status_exit_code,
)

console = Console(stderr=True)
DEFAULT_FILE = "config.yaml"

STARTER = """\
# svc-sr configuration (canonical v0.3). `svc-sr config validate` checks it;
# docs/configuration.md describes every section.
version: v0.3
listeners:
  - name: http
    address: 127.0.0.1
    port: 8801
providers:
  defaults:
    default_model: general
  models:
    - name: general
      provider_model_id: {model_id}
      backend_refs:
        - endpoint: {endpoint}
routing:
  signals:
    keywords:
      - name: code_keywords
        keywords: [python, javascript, stack trace, compile]
  decisions:
    - name: code
      priority: 10
      rules: {{type: keyword, name: code_keywords}}
      modelRefs:
        - model: general
"""


# ---------------------------------------------------------------------- init
@click.command("init")
@click.argument("path", default=DEFAULT_FILE, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--endpoint",
    "backend",
    default="127.0.0.1:8000",
    show_default=True,
    help="host:port of the OpenAI-compatible backend the starter model points at.",
)
@click.option("--model-id", default="my-model", show_default=True, help="Model name the backend serves.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def config_init(path: Path, backend: str, model_id: str, force: bool) -> None:
    """Write a starter v0.3 configuration (validated before it is written)."""
    from app.common.persist import atomic_write_bytes
    from app.config.errors import ConfigError
    from app.config.loader import parse_config

    if path.exists() and not force:
        fail(f"{path} exists; use --force to overwrite", EXIT_INVALID)
    text = STARTER.format(endpoint=backend, model_id=model_id)
    try:
        parse_config(text)
    except ConfigError as exc:
        fail(str(exc), EXIT_INVALID)
    atomic_write_bytes(path, text.encode("utf-8"))
    console.print(f"wrote {path}")


# ---------------------------------------------------------------------- validate, schema
@click.command("validate")
@click.argument("path", default="configs/config.yaml", type=click.Path(dir_okay=False, path_type=Path))
@remote_options
def config_validate(path: Path, remote: Remote) -> None:
    """Validate a config file (locally, or by the router with --endpoint); exit 2 when invalid."""
    if remote.endpoint is None:
        from app.config.loader import ConfigError, load_config
        from app.srun.bound_models import check_bound_models

        try:
            loaded = load_config(path)
            # the user's own models the bindings name, read from their directories
            check_bound_models(loaded.config, str(path))
        except ConfigError as exc:
            fail(str(exc), EXIT_INVALID)
        for warning in loaded.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(json.dumps({"valid": True, "legacy": loaded.legacy, "hash": loaded.source_hash}))
        return
    document = read_document(path)
    with remote.client() as client:
        response = client.request("POST", "/api/v1/config/validate", json=document)
    check(response)
    body = response.json()
    for warning in body.get("warnings", []):
        click.echo(f"warning: {warning}", err=True)
    if not body["valid"]:
        click.echo(f"invalid configuration {path}:", err=True)
        print_reasons(body.get("reasons", []))
        sys.exit(EXIT_INVALID)
    click.echo(
        json.dumps(
            {
                "valid": True,
                "hash": body["source_config_hash"],
                "restart_required": body.get("restart_required", False),
            }
        )
    )


@click.command("schema")
@click.option("--mode", type=click.Choice(["full", "progressive"]), default="full", show_default=True)
@remote_options
def config_schema(mode: str, remote: Remote) -> None:
    """Print the JSON Schema of the canonical configuration (the router's with --endpoint)."""
    if remote.endpoint is None:
        from app.config.schema import config_json_schema

        echo_json(config_json_schema())
        return
    with remote.client() as client:
        response = client.request("GET", "/api/v1/config/schema", params={"mode": mode})
    check(response)
    echo_json(response.json())


# ---------------------------------------------------------------------- get
@click.command("get")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
@remote_options
def config_get(fmt: str, output: Path | None, remote: Remote) -> None:
    """Print the router's persisted configuration (secrets redacted without secret_view)."""
    with remote.client() as client:
        response = client.request("GET", "/api/v1/config", params={"format": fmt})
    check(response)
    console.print(
        f"etag {response.headers.get('etag')}  serving config_version "
        f"{response.headers.get('x-svc-config-version')}",
        highlight=False,
    )
    text = (
        response.text if fmt == "yaml" else json.dumps(response.json(), indent=2, ensure_ascii=False) + "\n"
    )
    if output is None:
        click.echo(text, nl=False)
        return
    from app.common.persist import atomic_write_bytes

    atomic_write_bytes(output, text.encode("utf-8"))
    console.print(f"wrote {output}")


# ---------------------------------------------------------------------- plan, apply
def _mode_option(func: Any) -> Any:
    return click.option(
        "--mode",
        type=click.Choice(["replace", "merge"]),
        default="replace",
        show_default=True,
        help="replace: the file is the whole document; merge: a JSON merge patch.",
    )(func)


def _config_option(func: Any) -> Any:
    return click.option(
        "--config",
        "config_path",
        default=DEFAULT_FILE,
        show_default=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="Document (or merge patch) to send; - reads stdin.",
    )(func)


@click.command("plan")
@_config_option
@_mode_option
@remote_options
def config_plan(config_path: Path, mode: str, remote: Remote) -> None:
    """Show what `apply` would change (no write); exit 2 when the result is invalid."""
    document = read_document(config_path)
    with remote.client() as client:
        response = client.request("POST", "/api/v1/config/plan", json={"mode": mode, "document": document})
    check(response)
    body = response.json()
    if not body["valid"]:
        click.echo("the planned configuration is invalid:", err=True)
        print_reasons(body.get("reasons", []))
        sys.exit(EXIT_INVALID)
    echo_json(body)


@click.command("apply")
@_config_option
@_mode_option
@click.option("--if-match", default=None, help="ETag the change was prepared against (default: fetched now).")
@remote_options
def config_apply(config_path: Path, mode: str, if_match: str | None, remote: Remote) -> None:
    """Persist and hot-reload a configuration on the router (PUT, or PATCH with --mode merge).

    Exit 0 once active; 5 when activation failed (persisted, the previous generation serves);
    6 when still pending; 4 on a conflict (stale ETag, restart required); 2 when invalid."""
    document = read_document(config_path)
    with remote.client() as client:
        tag = if_match or client.etag()
        method = "PUT" if mode == "replace" else "PATCH"
        with console.status(f"{method} {client.endpoint}/api/v1/config: validating and activating..."):
            response = client.request(method, "/api/v1/config", json=document, headers={"If-Match": tag})
    report_mutation(response)


# ---------------------------------------------------------------------- versions, rollback
@click.command("versions")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 100))
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON answer.")
@remote_options
def config_versions(limit: int, as_json: bool, remote: Remote) -> None:
    """List persisted configuration versions, newest first."""
    with remote.client() as client:
        response = client.request("GET", "/api/v1/config/versions", params={"limit": limit})
    check(response)
    body = response.json()
    if as_json:
        echo_json(body)
        return
    click.echo(f"{'VERSION':<29} {'CFG':>4} {'RESULT':<10} {'SOURCE':<10} {'HASH':<12} ACTIVE")
    for entry in body["versions"]:
        cfg = "" if entry["config_version"] is None else str(entry["config_version"])
        click.echo(
            f"{entry['version']:<29} {cfg:>4} {entry['result']:<10} {entry['source']:<10} "
            f"{entry['hash'][:12]:<12} {'*' if entry['active'] else ''}"
        )


@click.command("rollback")
@click.argument("version")
@click.option("--if-match", default=None, help="ETag to guard with (default: fetched now).")
@remote_options
def config_rollback(version: str, if_match: str | None, remote: Remote) -> None:
    """Re-activate a recorded version: VERSION is a config_version number or a version timestamp."""
    body: dict[str, Any] = {"config_version": int(version)} if version.isdigit() else {"version": version}
    with remote.client() as client:
        tag = if_match or client.etag()
        with console.status(f"rolling back to {version}..."):
            response = client.request("POST", "/api/v1/config/rollback", json=body, headers={"If-Match": tag})
    code = status_exit_code(response.status_code)
    if response.status_code in (200, 202, 503):
        answer = response.json()
        echo_json({k: answer.get(k) for k in ("status", "config_version", "rollback_of", "etag")})
        if response.status_code == 503:
            print_reasons((answer.get("activation") or {}).get("reasons", []))
        sys.exit(code)
    fail(error_text(response), code)


# ---------------------------------------------------------------------- import
@click.command("import")
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
def config_import(source: Path, output: Path | None) -> None:
    """Import a YAML/JSON document (v0.3 or the older flat layout; - reads stdin) as canonical
    v0.3 YAML, validated; prints it or writes it atomically to --output."""
    from app.common.persist import atomic_write_bytes
    from app.config.errors import ConfigError
    from app.config.loader import parse_config, to_yaml

    document = read_document(source)
    try:
        loaded = parse_config(document, source=str(source))
    except ConfigError as exc:
        fail(str(exc), EXIT_INVALID)
    for warning in loaded.warnings:
        click.echo(f"warning: {warning}", err=True)
    text = to_yaml(loaded.config)
    if output is None:
        click.echo(text, nl=False)
        return
    atomic_write_bytes(output, text.encode("utf-8"))
    console.print(f"wrote {output} (hash {loaded.source_hash[:12]})")


def register(group: click.Group) -> None:
    """Add the commands to `svc-sr config` (validate and schema gain their remote forms)."""
    for command in (
        config_init,
        config_validate,
        config_schema,
        config_get,
        config_plan,
        config_apply,
        config_versions,
        config_rollback,
        config_import,
    ):
        group.add_command(command)
