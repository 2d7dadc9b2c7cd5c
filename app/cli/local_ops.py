"""`svc-sr logs [service] [-f]` and `svc-sr dashboard`: the local stack's logs and consoles.

The logs are the Ray session's of the running `svc-sr serve` (its state names the session
directory; else Ray's `session_latest`). Services: `service` (the front door: the Ingress
replicas, which answer the OpenAI and management APIs), `router` (the Router replicas),
`dashboard` (Ray's dashboard process), `serve` (every Serve log) and `ray` (Ray's own); and
the gateway's, under the serve state's logs/: `envoy` and `sidecar` (the ext_proc bridge).
`-f` keeps printing what the newest files of the set append, and files that appear (a
replaced replica), until Ctrl-C.
"""

from __future__ import annotations

import json
import sys
import time
import webbrowser
from collections.abc import Callable
from pathlib import Path

import click
import httpx

from app.cli import serve as serve_module
from app.cli.serve import ServeState, process_alive

LOG_SETS = {
    "service": "serve/replica_*Ingress*.log",
    "router": "serve/replica_*Router*.log",
    "dashboard": "dashboard.log",
    "serve": "serve/*.log",
    "ray": "*.log",
    "envoy": "envoy.log",  # these two under the serve state's logs/ (app/cli/gateway.py)
    "sidecar": "extproc.log",
}
GATEWAY_SETS = frozenset({"envoy", "sidecar"})
SHOWN_FILES = 3  # the newest files of a set: a service's replicas, a replica and its replacement
FOLLOW_POLL_S = 0.5
RAY_DASHBOARD = "http://127.0.0.1:8265"


def session_logs() -> Path:
    """The log folder of the running `svc-sr serve`'s Ray session, else Ray's latest."""
    state = ServeState.read()
    if state is not None and state.ray_session_dir and Path(state.ray_session_dir, "logs").is_dir():
        return Path(state.ray_session_dir, "logs")
    return Path("/tmp/ray/session_latest/logs")


def log_root(service: str) -> Path:
    return serve_module.STATE_DIR / "logs" if service in GATEWAY_SETS else session_logs()


def newest(root: Path, pattern: str) -> list[Path]:
    return sorted(root.glob(pattern), key=lambda p: p.stat().st_mtime)[-SHOWN_FILES:]


def follow(
    root: Path, pattern: str, offsets: dict[Path, int], echo: Callable[[str], None], stop: Callable[[], bool]
) -> None:
    """Print what the set's files append (and new files from their start) until `stop()`."""
    while not stop():
        for path in newest(root, pattern):
            try:
                size = path.stat().st_size
            except OSError:  # rotated away between the glob and the stat
                continue
            start = offsets.get(path, 0)
            if size < start:  # truncated: read it again from the start
                start = 0
            if size > start:
                with path.open("rb") as handle:
                    handle.seek(start)
                    chunk = handle.read(size - start)
                if path not in offsets:
                    echo(f"==> {path} <==")
                echo(chunk.decode("utf-8", errors="replace").rstrip("\n"))
            # a new file seen still empty stays new: its header comes with its first lines
            if size or path in offsets:
                offsets[path] = size
        time.sleep(FOLLOW_POLL_S)


@click.command()
@click.option("-n", "--lines", default=50, show_default=True, type=int)
@click.option("-f", "--follow", "following", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.argument("service", default="router", type=click.Choice(list(LOG_SETS)))
def logs(lines: int, following: bool, service: str) -> None:
    """Print the last lines of the local stack's logs: SERVICE is service (the front door),
    router, dashboard, serve (every Serve log), ray, envoy or sidecar (the ext_proc bridge)."""
    root, pattern = log_root(service), LOG_SETS[service]
    files = newest(root, pattern)
    if not files and not following:
        click.echo(f"no logs under {root} matching {pattern}", err=True)
        sys.exit(3)
    offsets: dict[Path, int] = {}
    for path in files:
        click.echo(f"==> {path} <==")
        click.echo("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        offsets[path] = path.stat().st_size
    if following:
        try:
            follow(root, pattern, offsets, click.echo, lambda: False)
        except KeyboardInterrupt:
            return


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=3).status_code < 500
    except httpx.HTTPError:
        return False


def console_urls(state: ServeState) -> dict[str, dict[str, object]]:
    """The running stack's consoles, each with whether it answers now."""
    from app.config.errors import ConfigError
    from app.config.loader import load_config

    urls = {
        "ray_dashboard": RAY_DASHBOARD,
        "serve_applications": f"{RAY_DASHBOARD}/#/serve",
        "api": f"{state.http}/v1",
        "management": f"{state.http}/api/v1",
    }
    try:
        metrics = load_config(state.config_path).config.global_.services.observability.metrics
        if metrics.enabled:
            urls["metrics"] = f"http://{metrics.bind_address}:{metrics.port}/metrics"
    except ConfigError:  # the file changed since the start; the other consoles still answer
        pass
    probes = {
        "ray_dashboard": f"{RAY_DASHBOARD}/api/version",
        "serve_applications": f"{RAY_DASHBOARD}/api/version",
        "api": f"{state.http}/health",
        "management": f"{state.http}/health",
    }
    return {name: {"url": url, "up": _answers(probes.get(name, url))} for name, url in urls.items()}


@click.command()
@click.option("--no-open", is_flag=True, help="Print the addresses only; open no browser.")
@click.option("--json", "as_json", is_flag=True, help="Print the addresses as JSON.")
def dashboard(no_open: bool, as_json: bool) -> None:
    """Open the Ray dashboard (Serve applications, replicas, logs) and the metrics page of the
    running `svc-sr serve`, and print every console's address (exit 3 when none runs)."""
    state = ServeState.read()
    if state is None or not process_alive(state.pid):
        click.echo("svc-sr is not running (start it with `svc-sr serve`)", err=True)
        sys.exit(3)
    consoles = console_urls(state)
    if as_json:
        click.echo(json.dumps(consoles, indent=2))
    else:
        for name, entry in consoles.items():
            click.echo(f"{name:20} {entry['url']}{'' if entry['up'] else '  (not answering)'}")
    if not no_open:
        for name in ("serve_applications", "metrics"):
            shown = consoles.get(name)
            if shown is not None and shown["up"]:
                webbrowser.open(str(shown["url"]))
