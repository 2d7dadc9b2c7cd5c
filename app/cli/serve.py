"""`svc-sr serve`: the embedded default. A local Ray instance running the graph.

Kept apart from the click commands so the lifecycle (start, wait for readiness with
progress, run until a signal, stop cleanly) reads top to bottom.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from app.cli.gateway import Gateway
    from app.config.document import RouterConfig

APP_NAME = "svc-sr"
STATE_DIR = Path(os.environ.get("SVC_SR_STATE_DIR", ".cache/run"))
STATE_FILE = STATE_DIR / "serve.json"


@dataclass
class ServeState:
    pid: int
    config_path: str
    http: str
    started_at: float
    ray_session_dir: str | None = None
    # "starting" from the moment Ray runs, so `svc-sr stop` can stop a start in progress and a
    # second `svc-sr serve` does not start another Ray instance beside it; then "ready".
    phase: str = "ready"

    def write(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = STATE_FILE.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, STATE_FILE)  # atomic: `status` never reads half a file

    @staticmethod
    def read() -> ServeState | None:
        try:
            return ServeState(**json.loads(STATE_FILE.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    @staticmethod
    def clear() -> None:
        STATE_FILE.unlink(missing_ok=True)


# What a start serves (app/management/stores.py start_document), as `svc-sr serve` says it.
START_KINDS = {
    "first": "the configuration file (first start: it becomes version 1)",
    "unchanged": "the configuration file (it is the stored active version)",
    "resumed": "the stored active version (the file did not change since it was loaded; "
    "changes made through the management API are kept)",
    "file": "the configuration file (it changed since it was last loaded: it becomes a new version)",
}


def deployment_overrides(serve_config: Path | None, app_name: str = APP_NAME) -> dict[str, dict[str, Any]]:
    """Per-deployment Serve options (replicas, resources, autoscaling) from a `serve deploy`
    config, so the laptop and the cluster read resources from one kind of file."""
    if serve_config is None:
        return {}
    import yaml

    document = yaml.safe_load(serve_config.read_text()) or {}
    for application in document.get("applications", []):
        if application.get("name") == app_name:
            return {
                d["name"]: {k: v for k, v in d.items() if k != "name"}
                for d in application.get("deployments", [])
            }
    return {}


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """An exited process its parent has not reaped yet (a script or supervisor that started
    `svc-sr serve`): it has stopped, though signal 0 still finds it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _deployment_states() -> dict[str, str]:
    from ray import serve

    status = serve.status()
    app = status.applications.get(APP_NAME)
    if app is None:
        return {}
    return {
        name: str(dep.status.value if hasattr(dep.status, "value") else dep.status)
        for name, dep in app.deployments.items()
    }


def serve_forever(
    config_path: Path,
    host: str,
    port: int,
    dashboard: bool,
    console: Console,
    serve_config: Path | None = None,
    with_envoy: bool = True,
) -> int:
    """Start Ray + the graph, show progress, block until Ctrl-C / SIGTERM, then stop cleanly."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from app.config.loader import ConfigError, load_config
    from app.srun.bound_models import check_bound_models

    try:
        config = load_config(config_path).config  # fail fast with the path-named reason, before starting Ray
        # A bound model directory that cannot load or does not fit fails here, as PATCH and
        # `config validate` refuse it, not at activation (docs/model-runtime.md).
        check_bound_models(config, str(config_path))
    except ConfigError as exc:
        console.print(f"[red]invalid configuration {config_path}:[/red]\n{exc}")
        return 2

    from deployments.serve_env import apply_fast_path_env, import_serve

    # Before Serve is imported: this process builds the graph's handles, whose transport
    # (gRPC or Ray actor calls) Serve fixes at import; Ray's processes read it at start.
    apply_fast_path_env()
    import_serve()
    import ray
    from ray import serve

    from app.cli.gateway import Gateway
    from app.cli.startup_check import verify_serving

    stop = threading.Event()
    gateway: Gateway | None = None
    ready = False
    console.print(f"[bold]svc-sr[/bold] starting a local Ray instance (config {config_path})")
    http = f"http://{host}:{port}"
    began = time.monotonic()
    session_dir = _start_ray(
        ServeState(os.getpid(), str(config_path), http, time.time(), phase="starting"), dashboard, stop
    )
    console.print(f"Ray started ({time.monotonic() - began:.0f} s)")
    try:
        serve.start(http_options={"host": host, "port": port})
        code = _deploy(config_path, serve_config, stop, console)
        if code is not None:
            return code
        if with_envoy and config.global_.services.envoy.enabled:
            gateway = Gateway(
                config_path, config, STATE_DIR, ray.get_runtime_context().gcs_address, APP_NAME, port
            )
            if not _start_gateway(gateway, console):
                return 1
        if not verify_serving(http, gateway.url if gateway is not None else None, config, console):
            console.print(
                f"[red]the router does not answer[/red]; logs: `svc-sr logs` ({STATE_DIR / 'logs'})"
            )
            return 1
        # `svc-sr logs` reads this instance's session, not whichever Ray started last.
        ServeState(os.getpid(), str(config_path), http, time.time(), session_dir).write()
        ready = True
        _print_ready(console, http, config, gateway.url if gateway is not None else None, dashboard)
        stop.wait()
        console.print("stopping svc-sr ...")
        return 0
    finally:
        _shut_down(gateway, ready, console)


def _start_ray(starting: ServeState, dashboard: bool, stop: threading.Event) -> str | None:
    """ray.init with the state file saying `starting` (cleared again if Ray does not start);
    then SIGINT/SIGTERM set `stop`. The session's directory (its logs)."""
    import ray

    from deployments.ray_compat import without_monitors
    from deployments.serve_env import LEAN_WORKER_ENV

    starting.write()
    try:
        with without_monitors():  # one machine: no autoscaler, and log_to_driver is off
            context = ray.init(
                runtime_env=LEAN_WORKER_ENV,
                include_dashboard=dashboard,
                dashboard_host="127.0.0.1",
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=True,
            )
    except BaseException:
        ServeState.clear()
        raise
    # After ray.init: Ray installs its own SIGTERM handler (a stack dump and exit); ours
    # must win so `svc-sr stop` shuts Serve and Ray down cleanly.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    info: dict[str, Any] = getattr(context, "address_info", None) or {}  # a RayContext: a local start
    session_dir = info.get("session_dir")
    return str(session_dir) if session_dir else None


def _deploy(
    config_path: Path, serve_config: Path | None, stop: threading.Event, console: Console
) -> int | None:
    """Deploy the graph with progress; the exit code when it failed or was stopped, else None."""
    from ray import serve

    from deployments.graph import GraphArgs, build_graph, start_document_of
    from deployments.serve_env import local_deployment_options

    args = GraphArgs(config_path=str(config_path), app_name=APP_NAME)
    args.deployments = local_deployment_options(
        deployment_overrides(serve_config),
        router_local_encoder=args.router_local_encoder,
        router_local_heads=args.router_local_heads,
    )
    document, kind = start_document_of(args)
    console.print(f"configuration: {START_KINDS[kind]}", soft_wrap=True)
    app = build_graph(args, document=document)
    failure: list[BaseException] = []

    def deploy() -> None:
        try:
            serve.run(app, name=APP_NAME, route_prefix="/")
        except BaseException as exc:  # surfaced in the main thread
            failure.append(exc)

    worker = threading.Thread(target=deploy, daemon=True)
    worker.start()
    _show_progress(worker, stop, console)
    if failure:
        console.print(f"[red]deployment failed:[/red] {failure[0]}")
        return 1
    return 130 if stop.is_set() else None


def _start_gateway(gateway: Gateway, console: Console) -> bool:
    from app.cli.gateway import GatewayError

    console.print("starting the ext_proc sidecar and Envoy (seconds) ...")
    began = time.monotonic()
    try:
        gateway.start()
    except GatewayError as exc:
        # Envoy's log lines carry [brackets] that rich would read as markup
        console.print(
            f"[red]Envoy / ext_proc failed to start:[/red] {escape(str(exc))} (logs in {STATE_DIR / 'logs'})"
        )
        return False
    console.print(f"Envoy and the ext_proc sidecar ready ({time.monotonic() - began:.0f} s)")
    return True


def _print_ready(
    console: Console, http: str, config: RouterConfig, envoy_url: str | None, dashboard: bool
) -> None:
    console.print(f"[green]ready[/green]  OpenAI-compatible endpoint: {http}/v1  (model: MoM)")
    console.print(f"  decisions (svc-srun API): {http}/v1/decisions")
    console.print(f"  management API: {http}/api/v1  (svc-sr status | config get|apply|versions|rollback)")
    if envoy_url is not None:
        console.print(f"  through Envoy + ext_proc: {envoy_url}/v1")
    metrics = config.global_.services.observability.metrics
    if metrics.enabled:
        console.print(f"  metrics: http://{metrics.bind_address}:{metrics.port}/metrics")
    console.print(
        f"  try: curl {http}/v1/chat/completions -H 'content-type: application/json' "
        '-d \'{"model":"MoM","messages":[{"role":"user","content":"hello"}]}\''
    )
    if dashboard:
        console.print("  Ray dashboard: http://127.0.0.1:8265")
    console.print("  stop with Ctrl-C or `svc-sr stop`")


def _shut_down(gateway: Gateway | None, ready: bool, console: Console | None = None) -> None:
    """Envoy and the sidecar stop while the graph drains; Ray stops last.

    Every replica still shuts down the way Serve stops it (its in-flight requests answered, its
    destructor run: stores closed, the Ingress's post-answer work done), in dependency order, but
    without waiting for the controller's ticks (deployments/shutdown.py). The sidecar's own drain
    runs meanwhile: its requests in flight at the Router are requests the Router's level waits for."""
    from ray import serve

    from deployments.ray_compat import shutdown_local_ray
    from deployments.shutdown import drain_app

    began = time.monotonic()
    stopping = threading.Thread(target=gateway.stop, name="stop-gateway") if gateway else None
    if stopping is not None:
        stopping.start()
    try:
        # Stopped mid-start there is nothing to drain, and ray.shutdown() stops the replicas
        # still starting.
        if ready:
            try:
                drain_app(APP_NAME)
            except Exception:  # the controller is unreachable: Serve's own, slower stop
                serve.shutdown()
    finally:
        if stopping is not None:
            stopping.join()
        shutdown_local_ray()
        ServeState.clear()
        if console is not None:
            console.print(f"stopped ({time.monotonic() - began:.1f} s)")


def _show_progress(worker: threading.Thread, stop: threading.Event, console: Console) -> None:
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    console.print(
        "deploying the graph: each deployment loads its models (about 1-2 minutes on 2 cores; "
        "the first start on a machine also builds the int8 encoder)"
    )
    began = time.monotonic()
    announced: set[str] = set()
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("loading models and deployments", total=None)
        while worker.is_alive() and not stop.is_set():
            states = _safe_states()
            for name in sorted(n for n, s in states.items() if s == "HEALTHY" and n not in announced):
                announced.add(name)  # a line that stays, unlike the transient bar
                progress.console.print(f"  {name} ready ({time.monotonic() - began:.0f} s)")
            if states:
                ready = sum(1 for s in states.values() if s == "HEALTHY")
                pending = ", ".join(sorted(n for n, s in states.items() if s != "HEALTHY"))
                progress.update(
                    task,
                    total=len(states),
                    completed=ready,
                    description=f"waiting for: {pending}" if pending else "deployments ready",
                )
            worker.join(timeout=0.5)


def _safe_states() -> dict[str, Any]:
    try:
        return _deployment_states()
    except Exception:  # the controller may not be up yet
        return {}
