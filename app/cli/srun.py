"""`svc-srun`: the model-runtime worker command (spec 2).

This release ships the informational commands; the HTTP worker (`run`) arrives with
the model-runtime issue and hosts the same engine the Ray deployments use.
"""

from __future__ import annotations

import json
import os
import platform

import click


def builtin_models() -> list[dict[str, object]]:
    """Built-in models with their pinned package/artifact revisions (no hub access, ever)."""
    from app.runtime.registry import list_builtin_models

    return [card.model_dump(mode="json", exclude_none=True) for card in list_builtin_models()]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="svc-srun")
def cli() -> None:
    """svc-srun: the svc-sr model-runtime worker."""


@cli.command()
def models() -> None:
    """List built-in models with pinned revisions (JSON)."""
    click.echo(json.dumps({"models": builtin_models()}, indent=2))


@cli.command()
def devices() -> None:
    """List execution devices this process can use (JSON)."""
    import onnxruntime

    providers = onnxruntime.get_available_providers()
    found = [{"name": "cpu", "kind": "cpu", "threads": os.cpu_count(), "arch": platform.machine()}]
    if "CUDAExecutionProvider" in providers:
        found.append({"name": "cuda:0", "kind": "cuda"})
    click.echo(json.dumps({"devices": found, "onnxruntime_providers": providers}, indent=2))


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
