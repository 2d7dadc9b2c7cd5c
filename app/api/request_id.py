"""One `x-request-id` on responses behind a server that echoes the request's own.

Ray Serve wraps every HTTP app in its RequestIdMiddleware: it sets the request's
`x-request-id` when the client sent none and appends that id to every response. The
answer path adopts the same request header as the routing request id, so its own
response header would make a second copy of the same value ("id, id"). Behind such a
server the app drops its own; alone (tests, the ext_proc bridge) it keeps it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.common.errors import REQUEST_ID_HEADER

_HEADER = REQUEST_ID_HEADER.encode()


class ServerEchoesRequestId:
    """Pure ASGI: removes the app's `x-request-id` response header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_without_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [(k, v) for k, v in message.get("headers", []) if k.lower() != _HEADER]
            await send(message)

        await self.app(scope, receive, send_without_id)
