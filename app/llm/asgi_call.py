"""One HTTP exchange with an ASGI application, in process: the request goes in as bytes, the
response comes out as its status and headers, then its body chunk by chunk as the app sends
them (an SSE stream stays a stream). vLLM's own OpenAI server app answers the in-cluster
model's requests this way, with no socket between the replica's handle call and the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


@dataclass
class ResponseHead:
    status: int
    headers: dict[str, str] = field(default_factory=dict)


def _scope(method: str, path: str, headers: Mapping[str, str], body_len: int) -> Scope:
    raw_path, _, query = path.partition("?")
    encoded = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    if not any(k == b"content-length" for k, _ in encoded):
        encoded.append((b"content-length", str(body_len).encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": encoded,
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 80),
        "state": {},
    }


async def asgi_exchange(
    app: ASGIApp, method: str, path: str, headers: Mapping[str, str], body: bytes
) -> AsyncIterator[ResponseHead | bytes]:
    """Yield the ResponseHead first, then the body's chunks. Closing the iterator early (the
    client went away) tells the app the client disconnected and cancels it."""
    outbox: asyncio.Queue[Message | None] = asyncio.Queue()
    disconnected = asyncio.Event()
    sent_body = False

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await outbox.put(message)

    async def run() -> None:
        try:
            await app(_scope(method, path, headers, len(body)), receive, send)
        finally:
            await outbox.put(None)

    task = asyncio.create_task(run())
    head_sent = False
    try:
        while (message := await outbox.get()) is not None:
            if message["type"] == "http.response.start":
                raw = message.get("headers", [])
                head_sent = True
                yield ResponseHead(
                    int(message["status"]), {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}
                )
            elif message["type"] == "http.response.body":
                if chunk := message.get("body", b""):
                    yield bytes(chunk)
                if not message.get("more_body", False):
                    break
        if not head_sent:
            await task  # the app failed before answering: its exception is the caller's
        else:
            # Starlette re-raises after sending its 500 page: the answer is already out.
            with contextlib.suppress(Exception):
                await task
    finally:
        disconnected.set()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
