"""`svc-sr`: run and operate the router.

Exit codes scripts can rely on: 0 ok, 1 runtime failure, 2 bad usage or invalid
configuration, 3 not running.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console

from app.cli.lazy_group import LazyGroup
from app.cli.serve import ServeState, process_alive, serve_forever
from app.common.process_exit import exit_now

if TYPE_CHECKING:
    import httpx

console = Console(stderr=True)
DEFAULT_CONFIG = "configs/config.yaml"


OPS = "app.cli.ops_cmds:register"
CONFIG = "app.cli.config_cmds:register"


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    lazy={
        "benchmark": "app.cli.benchmark_cmds:benchmark",
        "manifest": "app.cli.kuberay:kuberay_command",
        "route": OPS,
        "request": OPS,
        "completion": OPS,
        "logs": "app.cli.local_ops:logs",
        "dashboard": "app.cli.local_ops:dashboard",
        "optimize": "app.cli.optimize_cmds:optimize",
        "recipe": "app.cli.recipe_cmds:recipe",
        "storage": "app.cli.storage_cmds:storage",
        "keys": "app.cli.keys_cmds:keys",
    },
)
@click.version_option("0.1.0", prog_name="svc-sr")
def cli() -> None:
    """svc-sr: a semantic router for LLM inference on Ray Serve."""


@cli.command()
@click.option(
    "--config",
    "config_path",
    default=DEFAULT_CONFIG,
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=int)
@click.option(
    "--dashboard/--no-dashboard",
    default=True,
    show_default=True,
    help="Start the Ray dashboard on 127.0.0.1:8265.",
)
@click.option(
    "--serve-config",
    type=click.Path(dir_okay=False, path_type=Path),
    default="cluster/serve-config.yaml",
    show_default=True,
    help="Serve config whose per-deployment options (replicas, num_cpus, autoscaling) apply.",
)
@click.option(
    "--envoy/--no-envoy",
    default=True,
    show_default=True,
    help="Also run Envoy (listener from the config, 8801) and the ext_proc sidecar (50051); "
    "--no-envoy keeps the standalone data plane on --port only.",
)
@click.argument("model", required=False)
@click.option(
    "--engine", "-e", is_flag=True, help="Native serving: MODEL served by vLLM in the graph (port 8899)."
)
@click.option(
    "--platform", type=click.Choice(["auto", "cpu", "cuda", "rocm"]), default="auto", show_default=True
)
@click.option("--data-parallel-size", "-dp", type=int, default=1, show_default=True, help="Engine replicas.")
@click.option("--device-ids", default="", help="GPUs the engine replicas may use, e.g. 0,1.")
@click.option("--max-model-len", type=int, default=None, help="vLLM's max_model_len (default: the model's).")
@click.option(
    "--enforce-eager",
    is_flag=True,
    help="vLLM without graph compilation: a faster start (about 40 s less on a 2-core CPU), slower tokens.",
)
@click.pass_context
def serve(  # noqa: PLR0913 - one flag per option of the spec's CLI
    ctx: click.Context,
    config_path: Path,
    host: str,
    port: int,
    dashboard: bool,
    serve_config: Path,
    envoy: bool,
    model: str | None,
    engine: bool,
    platform: str,
    data_parallel_size: int,
    device_ids: str,
    max_model_len: int | None,
    enforce_eager: bool,
) -> None:
    """Start a local Ray instance and serve the router graph (Ctrl-C stops it).

    With MODEL --engine: native serving, MODEL served by vLLM inside the graph behind the
    router on port 8899 (no chat backends; app/cli/engine_serving.py)."""
    if model is not None or engine:
        if not (model and engine):
            console.print("[red]MODEL and --engine go together[/red] (router mode takes --config)")
            sys.exit(2)
        explicit_port = ctx.get_parameter_source("port") is click.core.ParameterSource.COMMANDLINE
        config_path = _engine_config(
            model,
            platform,
            data_parallel_size,
            device_ids,
            max_model_len,
            enforce_eager,
            port if explicit_port else None,
        )
        from app.cli.engine_serving import NATIVE_PORT

        port, envoy = (port if explicit_port else NATIVE_PORT), False
    state = ServeState.read()
    if state and process_alive(state.pid):
        console.print(f"svc-sr is already running (pid {state.pid}, {state.http}, {state.phase})")
        sys.exit(1)
    if not config_path.exists():
        console.print(f"[red]config file not found:[/red] {config_path}")
        sys.exit(2)
    overrides = serve_config if serve_config.exists() else None
    code = serve_forever(config_path, host, port, dashboard, console, overrides, envoy)
    exit_now(code)  # Serve, Envoy and Ray were stopped: skip the interpreter's slow teardown


def _engine_config(  # noqa: PLR0913 - the native-serving options, one each
    model: str,
    platform: str,
    dp: int,
    device_ids: str,
    max_model_len: int | None,
    enforce_eager: bool,
    port: int | None,
) -> Path:
    """The generated configuration of native serving, written under the state directory;
    the visible GPUs exported for Ray. Exits 2 on a bad combination of options."""
    import yaml
    from pydantic import ValidationError

    from app.cli.engine_serving import EngineServing
    from app.cli.serve import STATE_DIR

    try:
        serving = EngineServing(
            model=model,
            platform=platform,
            data_parallel_size=dp,
            device_ids=device_ids,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            **({"port": port} if port is not None else {}),
        )
    except ValidationError as exc:
        console.print(f"[red]invalid options:[/red] {exc.errors()[0]['msg']}")
        sys.exit(2)
    os.environ.update(serving.environment())
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    path = STATE_DIR / "engine-config.yaml"
    path.write_text(yaml.safe_dump(serving.config_document(), sort_keys=False))
    console.print(
        f"native serving: {serving.served_name} on {serving.resolved_platform()}, "
        f"{serving.data_parallel_size} engine replica(s); configuration {path}"
    )
    return path


@cli.command()
@click.option(
    "--endpoint",
    envvar="SVC_MGMT_ENDPOINT",
    default=None,
    help="Management API to ask (env SVC_MGMT_ENDPOINT; default: the local `svc-sr serve`).",
)
@click.option(
    "--token-env",
    default="SVC_MGMT_TOKEN",
    show_default=True,
    help="Environment variable holding the management bearer token.",
)
def status(endpoint: str | None, token_env: str) -> None:
    """Show whether svc-sr is running, ready and on which configuration (JSON).

    Exit 0 when the management API answers, 3 when nothing runs or answers."""
    state = ServeState.read()
    local = state is not None and process_alive(state.pid)
    if endpoint is None and not local:
        click.echo(json.dumps({"running": False}))
        sys.exit(3)
    report: dict[str, object] = {"running": True}
    if local and state is not None:
        report.update(
            {
                "pid": state.pid,
                "phase": state.phase,
                "endpoint": state.http,
                "config": state.config_path,
                "uptime_s": round(time.time() - state.started_at),
            }
        )
    url = (endpoint or (state.http if state else "")).rstrip("/")
    report["endpoint"] = url
    remote = _remote_status(url, os.environ.get(token_env, ""))
    report.update(remote)
    click.echo(json.dumps(report, indent=2))
    backends = remote.get("backends")
    if isinstance(backends, dict) and backends.get("reachable") == "False":
        click.echo(f"warning: {backends.get('message')}", err=True)
    health = remote.get("health")
    if isinstance(health, dict) and health.get("status") == "unreachable":
        sys.exit(3)


def _remote_status(url: str, token: str) -> dict[str, object]:
    """Liveness, startup readiness and the serving configuration from the management API."""
    import httpx

    headers = {"authorization": f"Bearer {token}"} if token else {}
    out: dict[str, object] = {}
    with httpx.Client(base_url=url, timeout=5, headers=headers) as client:
        try:
            out["health"] = client.get("/health").json()
        except (httpx.HTTPError, ValueError) as exc:
            return {"health": {"status": "unreachable", "error": type(exc).__name__}}
        for key, path, fields in (
            (
                "ready",
                "/ready",
                ("phase", "ready", "ready_models", "total_models", "pending_models", "reason"),
            ),
            (
                "active_config",
                "/api/v1/config/hash",
                ("config_version", "activation_status", "source_config_hash", "active_version"),
            ),
        ):
            try:
                response = client.get(path)
                body = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                out[key] = {"error": type(exc).__name__}
                continue
            if response.status_code in (200, 503) and isinstance(body, dict) and "error" not in body:
                out[key] = {k: body.get(k) for k in fields}
            else:
                out[key] = {"error": f"HTTP {response.status_code}"}
        out["backends"] = _backends(client)
    return out


def _backends(client: httpx.Client) -> dict[str, object]:
    """The BackendsReachable condition of /api/v1/status: which configured backends are down."""
    import httpx

    try:
        response = client.get("/api/v1/status")
        found = [c for c in response.json().get("conditions", []) if c.get("type") == "BackendsReachable"]
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return {"error": type(exc).__name__}
    if response.status_code != 200 or not found:
        return {"error": f"HTTP {response.status_code}"}
    condition = found[0]
    return {
        "reachable": condition.get("status"),
        "reason": condition.get("reason"),
        "message": condition.get("message"),
    }


@cli.command()
@click.option("--timeout", default=60, show_default=True, type=int, help="Seconds to wait for a clean stop.")
def stop(timeout: int) -> None:
    """Stop a running `svc-sr serve`."""
    state = ServeState.read()
    if state is None or not process_alive(state.pid):
        console.print("svc-sr is not running")
        ServeState.clear()
        sys.exit(3)
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while process_alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_alive(state.pid):
        console.print(f"[red]svc-sr (pid {state.pid}) did not stop within {timeout}s[/red]")
        sys.exit(1)
    console.print("svc-sr stopped")


@cli.group(
    cls=LazyGroup,
    lazy={
        **{
            name: CONFIG
            for name in (
                "init",
                "validate",
                "schema",
                "get",
                "plan",
                "apply",
                "versions",
                "rollback",
                "import",
            )
        },
        "router": "app.cli.config_render:config_router",
        "envoy": "app.cli.config_render:config_envoy",
    },
)
def config() -> None:
    """Validate, migrate and describe configuration documents."""


@config.command("migrate")
@click.argument("path", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
def config_migrate(path: Path, output: Path | None) -> None:
    """Convert an older flat config to the canonical v0.3 layout."""
    from app.config.loader import ConfigError, load_config, to_yaml

    try:
        loaded = load_config(path)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    text = to_yaml(loaded.config)
    for warning in loaded.warnings:
        click.echo(f"warning: {warning}", err=True)
    if output is None:
        click.echo(text)
        return
    tmp = output.with_suffix(output.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, output)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
