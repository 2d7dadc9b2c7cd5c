"""`GET /metrics` on its own port (9190; docs/envoy.md "Metrics"), served from a daemon thread.

A thread, not the host's event loop: Ray Serve replicas run user code off the main
thread, where servers that install signal handlers (uvicorn) cannot start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsHTTPServer:
    def __init__(self, render: Callable[[], str], host: str = "127.0.0.1", port: int = 9190) -> None:
        self._render = render
        handler = _handler(render)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsHTTPServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(render: Callable[[], str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path.split("?", 1)[0] != "/metrics":
                self._send(404, b"not found: try /metrics\n", "text/plain; charset=utf-8")
                return
            try:
                body = render().encode()
            except Exception as exc:  # a rendering bug must not kill the server thread
                self._send(500, f"metrics unavailable: {type(exc).__name__}\n".encode(), "text/plain")
                return
            self._send(200, body, CONTENT_TYPE)

        def do_POST(self) -> None:  # noqa: N802
            self._send(405, b"method not allowed\n", "text/plain; charset=utf-8", allow="GET")

        do_PUT = do_DELETE = do_PATCH = do_POST  # noqa: N815

        def _send(self, status: int, body: bytes, content_type: str, allow: str | None = None) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            if allow:
                self.send_header("allow", allow)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # scrapes every few seconds: stay quiet
            return

    return Handler
