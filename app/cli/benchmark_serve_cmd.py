"""`svc-sr benchmark serve [--host 127.0.0.1] [--port 8090]`: the store's read-only HTTP API
(app/benchmark/http_api.py) until interrupted. A port in use is exit 2."""

from __future__ import annotations

import click

from app.benchmark.http_api import DEFAULT_HOST, DEFAULT_PORT, make_server
from app.cli.benchmark_report_cmds import current_store, stderr
from app.cli.remote import EXIT_INVALID, fail


@click.command("serve")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
def serve_command(host: str, port: int) -> None:
    """Serve runs, experiments, targets and datasets as read-only JSON (GET /api/v1/...)."""
    store = current_store()
    try:
        server = make_server(store, host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_INVALID)
    bound_host, bound_port = server.server_address[:2]
    stderr.print(f"benchmark API on http://{bound_host!s}:{bound_port} over {store.root} (Ctrl-C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
