"""Another Ray instance's Serve fallback proxy on this machine, for tests: a real HTTP server on
127.0.0.1 that answers every request as Serve's proxy answers a path it has no route for (404),
and counts them.

Serve starts its head node's fallback proxy (where HAProxy sends a request while an application
has no running Ingress replica) at a fixed port, 8500 by default, bound with SO_REUSEPORT. So a
second Ray instance on the machine (another test session, a `svc-sr serve`, a benchmark) binds
the same port and the kernel splits the connections to it between both instances. This server
joins that port the same way, standing in for the other instance.

    with ForeignServeProxy() as other:
        ...                     # requests during an activation
        other.request_count     # requests that reached the other instance
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse

from tests.fakes.served import ServedApp

SERVE_FALLBACK_PROXY_PORT = 8500  # Serve's default RAY_SERVE_FALLBACK_PROXY_HTTP_PORT


@dataclass
class Behavior:
    pass


class ForeignServeProxy(ServedApp):
    reuse_port = True

    def __init__(self, port: int = SERVE_FALLBACK_PROXY_PORT) -> None:
        super().__init__("foreign-serve-proxy", "", port, Behavior())

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            request = Request(scope, receive)
            self.requests.append(request.url.path)
            text = f"Path '{request.url.path}' not found. Ping http://.../-/routes for available routes."
            await PlainTextResponse(text, status_code=404)(scope, receive, send)

        self.app = app
