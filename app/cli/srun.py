"""`svc-srun`: the model-runtime worker command (docs/model-runtime.md, "The worker").

    svc-srun run MODEL... [--models FILE] [--uds PATH | --host H --port P] [...]
    svc-srun train sequence-classification|token-classification --data FILE --out DIR
    svc-srun models     built-in models with pinned revisions (JSON)
    svc-srun plugins    families, engines, profiles and devices this build knows (JSON)
    svc-srun devices    execution devices this process can use (JSON)

`run` hosts the same engine the Ray deployments use (app/srun/worker.py) over HTTP with
uvicorn, on 127.0.0.1:8100 by default or a Unix socket. Nothing is ever downloaded, with or
without --offline: models come from installed packages, committed artifacts and local copies
(--base-path, the hub cache). --offline adds the hub libraries' offline switches and a check
at start that every model can be served from local files (app/srun/admission.py).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

if TYPE_CHECKING:
    from app.srun.schemas import ModelEntry
    from app.srun.worker import WorkerSettings

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
@click.option(
    "--family",
    default=None,
    help="force the family plugin instead of detection (`svc-srun plugins` lists them); "
    "a model of another family fails to load; an unknown family is a usage error",
)
@click.option(
    "--memory-budget",
    "memory_budget_gib",
    type=click.FloatRange(0, min_open=True),
    default=None,
    metavar="GIB",
    help="refuse, before loading, a model whose files (weights, heads, tokenizer) on its engine "
    "exceed GIB; it is reported failed, the others load (per model; the models file's "
    "memory_budget_gib wins)",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="hub cache where model files are looked up (HF_HUB_CACHE for this process): the base "
    "model's pinned snapshot when its package is not installed; nothing is fetched  "
    "[default: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub]",
)
@click.option(
    "--offline",
    is_flag=True,
    help="local files only: sets HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE and HF_DATASETS_OFFLINE, and "
    "exits at start, naming what is missing, when a model cannot be served from installed packages "
    "and local files. Without it nothing is fetched either; such a model is reported failed",
)
@click.option(
    "--base-path",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="local copy of the base model (all-MiniLM-L6-v2) every built-in adapts: model.safetensors "
    "+ config.json (native) and/or model.onnx (onnxruntime), each checked against its pinned "
    "sha256; a mismatch refuses to start",
)
@click.option(
    "--accept-licence",
    "accepted_licences",
    multiple=True,
    metavar="ID",
    help="accept a model licence (SPDX id; repeatable): a model whose card requires acceptance "
    "loads only when its id is given; /v1/models lists the accepted ids",
)
@click.option(
    "--autotune-cache",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="SVC_SRUN_AUTOTUNE_CACHE",
    show_envvar=True,
    default=None,
    metavar="DIR",
    help="kernel cache: where the engine keeps the int8 encoder build tuned for this machine's "
    "onnxruntime (sets SVC_SR_MODEL_CACHE)  [default: SVC_SR_MODEL_CACHE, else ~/.cache/svc-sr/models]",
)
@click.option(
    "--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"])
)
def run(model: tuple[str, ...], **options: Any) -> None:
    """Serve MODEL... (built-in names, model directories, ORG/NAME@COMMIT from the hub cache;
    MODEL@REVISION pins) over HTTP."""
    opts = RunOptions(**options)
    entries = _model_entries(model, opts)
    settings = _prepare(entries, opts)
    _serve(settings, opts)


def _prepare(entries: list[ModelEntry], opts: RunOptions) -> WorkerSettings:
    """Check the options, set this process's environment, and the worker's settings. Usage
    errors exit 2; --offline with a model that cannot be served locally exits 1."""
    from app.runtime import base_model
    from app.srun.admission import families, offline_problems, process_environment
    from app.srun.worker import WorkerSettings, model_ref, resolve_device

    known = families()
    for family, hint in [(opts.family, "--family"), *((e.family, "--models") for e in entries)]:
        if family is not None and family not in known:
            raise click.BadParameter(
                f"unknown family {family!r}; families: {', '.join(known)}", param_hint=hint
            )
    if opts.base_path is not None:
        try:
            base_model.check_base_path(opts.base_path)
        except base_model.BaseModelMismatch as exc:
            raise click.BadParameter(str(exc), param_hint="--base-path") from None
    base_model.use_base_path(opts.base_path)
    base_model.use_cache_dir(opts.cache_dir)
    os.environ.update(
        process_environment(
            offline=opts.offline, cache_dir=opts.cache_dir, autotune_cache=opts.autotune_cache
        )
    )
    if opts.offline:
        problems = offline_problems(
            (
                model_ref(e.model.partition("@")[0], e.revision or e.model.partition("@")[2] or None),
                e.engine or opts.engine,
                resolve_device(e.device or opts.device),
            )
            for e in entries
        )
        if problems:
            raise click.ClickException(
                "--offline: cannot serve from installed packages and local files:\n  " + "\n  ".join(problems)
            )
    tuning = {name: getattr(opts, name) for name in WORKER_TUNING}
    return WorkerSettings(models=entries, accepted_licences=list(opts.accepted_licences), **tuning)


def _serve(settings: WorkerSettings, opts: RunOptions) -> None:
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
    from app.srun.worker import Worker

    app = create_app(Worker(settings))
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
    family: str | None
    memory_budget_gib: float | None
    cache_dir: Path | None
    offline: bool
    base_path: Path | None
    accepted_licences: tuple[str, ...]
    autotune_cache: Path | None
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
    "family",
    "memory_budget_gib",
)


def _model_entries(model: tuple[str, ...], opts: RunOptions) -> list[ModelEntry]:
    """The MODEL arguments plus the --models file, with --revision / --served-model-name applied."""
    from pydantic import ValidationError

    from app.srun.schemas import ModelEntry, ModelsFile

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
@click.argument("kind", type=click.Choice(["sequence-classification", "token-classification"]))
@click.option(
    "--data",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='labelled rows, JSON lines or CSV: {"text", "label"} or {"text", "spans": [{"start", "end", "label"}]}',
)
@click.option(
    "--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="new model directory"
)
@click.option("--heads-only", is_flag=True, help="train the new head only, the encoder frozen")
@click.option("--epochs", default=4, show_default=True, type=click.IntRange(1, 100))
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(1, 1024))
@click.option(
    "--learning-rate",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="[default: 1e-4, or 2e-3 with --heads-only]",
)
@click.option(
    "--max-length", default=128, show_default=True, type=click.IntRange(8, 512), help="tokens per row"
)
@click.option(
    "--eval-fraction",
    default=0.2,
    show_default=True,
    type=click.FloatRange(0.05, 0.5),
    help="rows held out for the card (per label for sequence classification)",
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--device", default="auto", show_default=True, help="auto (cuda when present), cpu, cuda[:N]")
@click.option("--no-onnx", is_flag=True, help="skip the ONNX int8 export (onnx/)")
@click.option(
    "--base",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="a local encoder directory (Hugging Face layout) to fine-tune  [default: the packaged all-MiniLM-L6-v2]",
)
def train(kind: str, **options: Any) -> None:
    """Fine-tune the packaged all-MiniLM-L6-v2 on a labelled file into a model directory
    `svc-srun run` serves, with a model card (README.md, training.json) and an ONNX int8
    export (onnx/). Prints the card's figures as JSON."""
    logging.basicConfig(level="INFO", stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    from app.srun.train import TrainOptions
    from app.srun.train import train as run_training
    from app.srun.train_data import Kind, TrainDataError

    onnx = not options.pop("no_onnx")
    try:
        out = run_training(TrainOptions(kind=cast("Kind", kind), onnx=onnx, **options))
    except (TrainDataError, FileExistsError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo((out / "training.json").read_text())


@cli.command()
def models() -> None:
    """List built-in models with pinned revisions (JSON)."""
    click.echo(json.dumps({"models": builtin_models()}, indent=2))


@cli.command()
def plugins() -> None:
    """Families, engines and profiles this build knows (JSON). Plugins are built in: a family
    is a built-in model's task, what `run --family` takes."""
    from app.srun.admission import families as family_plugins

    families = family_plugins()
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
