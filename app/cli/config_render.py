"""`svc-sr config router` and `svc-sr config envoy`: what each service of the stack runs with,
rendered from one configuration file without starting anything.

`router` prints the effective router configuration: the canonical v0.3 document with every
default spelled out (the document the Router and Ingress deployments receive as user_config;
`config import` writes the compact form, values equal to their defaults left out). `envoy`
prints the Envoy bootstrap `svc-sr serve` writes for its gateway (listener, one route per
model, the ext_proc filter pointing at the sidecar), so a user can run Envoy themselves.
Both validate first: an invalid file exits 2 with its reasons, as `config validate` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from app.cli.remote import EXIT_INVALID, fail

if TYPE_CHECKING:
    from app.config.document import RouterConfig

console = Console(stderr=True)


# Imports inside the commands: `svc-sr --help` must not load the config models.
def _load(path: Path) -> RouterConfig:
    from app.config.errors import ConfigError
    from app.config.loader import load_config

    try:
        loaded = load_config(path)
    except (ConfigError, OSError) as exc:
        fail(f"{path}: {exc}", EXIT_INVALID)
    for warning in loaded.warnings:
        click.echo(f"warning: {warning}", err=True)
    return loaded.config


def _emit(document: dict[str, Any] | str, fmt: str, output: Path | None) -> None:
    import yaml

    from app.common.persist import atomic_write_bytes

    if isinstance(document, str):
        text = document
    elif fmt == "json":
        text = json.dumps(document, indent=2, sort_keys=False) + "\n"
    else:
        text = yaml.safe_dump(document, sort_keys=False)
    if output is None:
        click.echo(text, nl=False)
        return
    atomic_write_bytes(output, text.encode("utf-8"))
    console.print(f"wrote {output}")


def _common(func: Any) -> Any:
    func = click.option(
        "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write here."
    )(func)
    func = click.option(
        "--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True
    )(func)
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=Path("configs/config.yaml"),
        show_default=True,
        help="The configuration file to render from.",
    )(func)


@click.command("router")
@_common
def config_router(config_path: Path, fmt: str, output: Path | None) -> None:
    """Print the router's effective configuration: the file's canonical document with every
    default spelled out (what the Router deployment runs with)."""
    from app.config.loader import to_yaml

    config = _load(config_path)
    _emit(to_yaml(config, compact=False) if fmt == "yaml" else config.to_document(), fmt, output)


@click.command("envoy")
@_common
@click.option("--listener-port", type=int, default=None, help="Override the first listener's port.")
@click.option("--management-port", type=int, default=None, help="Where /v1/models is answered.")
def config_envoy(
    config_path: Path, fmt: str, output: Path | None, listener_port: int | None, management_port: int | None
) -> None:
    """Print the Envoy bootstrap for this configuration (the gateway `svc-sr serve` starts: the
    listener, a route per model, the ext_proc filter calling the sidecar)."""
    from app.envoy.config import EnvoyPorts, build_envoy_config

    config = _load(config_path)
    ports = EnvoyPorts.from_config(config, listener_port=listener_port, management_port=management_port)
    _emit(build_envoy_config(config, ports), fmt, output)
