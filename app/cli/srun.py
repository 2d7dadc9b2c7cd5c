"""`svc-srun`: the model-runtime worker command (spec 2 "Worker options").

    svc-srun run MODEL... [--models FILE] [--uds PATH | --host H --port P] [...]
    svc-srun models     built-in models with pinned revisions (JSON)
    svc-srun plugins    families, engines, profiles and devices this build knows (JSON)
    svc-srun devices    execution devices this process can use (JSON)

`run` hosts the same engine the Ray deployments use (app/srun/worker.py) over HTTP with
uvicorn, on 127.0.0.1:8100 by default or a Unix socket. Nothing is ever downloaded: models
come from installed packages and committed artifacts (--offline is accepted and always true).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from app.srun.models import ModelEntry

PROFILES = ("exact", "shared_context", "batching", "max_speed")
ENGINES = ("auto", "native", "onnxruntime")


def builtin_models() -> list[dict[str, object]]:
    """Built-in models with their pinned package/artifact revisions (no hub access, ever)."""
    from app.srun.catalog import catalogue

    out = []
    for card in catalogue():
        if card.status != "unavailable":
            from app.runtime import registry
            from app.srun import catalog

            spec = registry.BUILTINS.get(card.name) or catalog.SPECS[card.name]
            card.revision, card.digest, card.artifacts = registry.pin(spec, spec.engines[0])
        out.append(card.to_wire())
    return out


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="svc-srun")
def cli() -> None:
    """svc-srun: the svc-sr model-runtime worker."""


@cli.command()
@click.argument("model", nargs=-1)
@click.option(
    "--models",
    "models_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="models file (YAML `models:` list)",
)
@click.option("--revision", default=None, help="pin for a single model (digest prefix or recorded revision)")
@click.option("--served-model-name", default=None, help="reported id, single model")
@click.option("--device", default="auto", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8100, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--uds", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Unix socket instead of TCP"
)
@click.option("--profile", default="exact", show_default=True, type=click.Choice(PROFILES))
@click.option("--engine", default="auto", show_default=True, type=click.Choice(ENGINES))
@click.option("--threads", type=click.IntRange(1, 256), default=None, help="CPU threads per engine")
@click.option("--max-queue", default=256, show_default=True, type=click.IntRange(1))
@click.option("--max-queued-tokens", default=4_194_304, show_default=True, type=click.IntRange(1))
@click.option("--batch-window-ms", default=2.0, show_default=True, type=click.FloatRange(0))
@click.option("--max-batch-tokens", default=65_536, show_default=True, type=click.IntRange(1))
@click.option("--max-request-bytes", default=8_388_608, show_default=True, type=click.IntRange(1))
@click.option("--max-bundle-tasks", default=64, show_default=True, type=click.IntRange(1))
@click.option("--load-attempts", default=5, show_default=True, type=click.IntRange(1))
@click.option("--load-retry-seconds", default=5.0, show_default=True, type=click.FloatRange(0))
@click.option("--result-cache-entries", default=16_384, show_default=True, type=click.IntRange(0))
@click.option("--offline", is_flag=True, help="cached files only (always the case: nothing is fetched)")
@click.option(
    "--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"])
)
def run(model: tuple[str, ...], **options: Any) -> None:
    """Serve MODEL... (built-in names, MODEL@REVISION pins) over HTTP."""
    opts = RunOptions(**options)
    entries = _model_entries(model, opts)
    if opts.threads:
        # Read when the encoder session is created, i.e. after this point.
        os.environ["SVC_SR_ENCODER_THREADS"] = str(opts.threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(opts.threads))
    logging.basicConfig(
        level=opts.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    import uvicorn

    from app.srun.server import create_app
    from app.srun.worker import Worker, WorkerSettings

    tuning = {name: getattr(opts, name) for name in WORKER_TUNING}
    app = create_app(Worker(WorkerSettings(models=entries, **tuning)))
    _exit_with_parent(os.environ.get("SVC_SRUN_PARENT_PID", ""))
    listen: dict[str, Any] = {"host": opts.host, "port": opts.port}
    if opts.uds is not None:
        opts.uds.parent.mkdir(parents=True, exist_ok=True)
        if opts.uds.exists():
            opts.uds.unlink()  # a stale socket of a previous run
        listen = {"uds": str(opts.uds)}
    uvicorn.Server(
        uvicorn.Config(app, log_level=opts.log_level, access_log=False, lifespan="on", **listen)
    ).run()


@dataclass(frozen=True)
class RunOptions:
    """`svc-srun run`'s options (click's names); WORKER_TUNING go to WorkerSettings as they are."""

    models_file: Path | None
    revision: str | None
    served_model_name: str | None
    device: str
    host: str
    port: int
    uds: Path | None
    profile: str
    engine: str
    threads: int | None
    max_queue: int
    max_queued_tokens: int
    batch_window_ms: float
    max_batch_tokens: int
    max_request_bytes: int
    max_bundle_tasks: int
    load_attempts: int
    load_retry_seconds: float
    result_cache_entries: int
    offline: bool
    log_level: str


WORKER_TUNING = (
    "device",
    "engine",
    "profile",
    "max_queue",
    "max_queued_tokens",
    "batch_window_ms",
    "max_batch_tokens",
    "max_request_bytes",
    "max_bundle_tasks",
    "load_attempts",
    "load_retry_seconds",
    "result_cache_entries",
)


def _model_entries(model: tuple[str, ...], opts: RunOptions) -> list[ModelEntry]:
    """The MODEL arguments plus the --models file, with --revision / --served-model-name applied."""
    from pydantic import ValidationError

    from app.srun.models import ModelEntry, ModelsFile

    entries = [ModelEntry(model=m) for m in model]
    if opts.models_file is not None:
        import yaml

        try:
            entries += ModelsFile.model_validate(yaml.safe_load(opts.models_file.read_text())).models
        except (yaml.YAMLError, ValidationError) as exc:
            raise click.BadParameter(
                str(exc).splitlines()[0] if str(exc) else "invalid", param_hint="--models"
            ) from exc
    if not entries:
        raise click.UsageError("name at least one MODEL or a --models file")
    if (opts.revision or opts.served_model_name) and len(entries) != 1:
        raise click.UsageError("--revision and --served-model-name apply to a single model")
    if opts.revision:
        entries[0].revision = opts.revision
    if opts.served_model_name:
        entries[0].name = opts.served_model_name
    return entries


def _exit_with_parent(parent: str) -> None:
    """A router-managed worker (SVC_SRUN_PARENT_PID set by app/srun/supervisor.py) stops itself,
    gracefully, once that router process is gone, e.g. after a SIGKILL that left no time to stop it."""
    if not parent.isdigit():
        return
    import signal
    import threading
    import time

    from app.cli.serve import process_alive

    def watch() -> None:
        while process_alive(int(parent)):
            time.sleep(1.0)
        logging.getLogger("svc_srun").warning("router process %s is gone; stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


@cli.command()
def models() -> None:
    """List built-in models with pinned revisions (JSON)."""
    click.echo(json.dumps({"models": builtin_models()}, indent=2))


@cli.command()
def plugins() -> None:
    """Families, engines and profiles this build knows (JSON). Plugins are built in."""
    from app.srun.catalog import catalogue

    families = sorted({c.task for c in catalogue()})
    click.echo(
        json.dumps(
            {
                "families": families,
                "engines": list(ENGINES[1:]),
                "profiles": list(PROFILES),
                "devices": ["cpu", "cuda[:N]"],
                "external_plugins": [],
            },
            indent=2,
        )
    )


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
