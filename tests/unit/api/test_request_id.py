"""The Ingress's app leaves `x-request-id` on responses to the server in front (Ray Serve)."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from app.api.request_id import ServerEchoesRequestId


async def _answer(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True}, headers={"x-request-id": "from-app", "x-selected-model": "m"})


def _app() -> Starlette:
    app = Starlette(routes=[Route("/", _answer), Route("/plain", lambda r: PlainTextResponse("hi"))])
    app.add_middleware(ServerEchoesRequestId)
    return app


async def test_the_apps_own_request_id_is_dropped_and_other_headers_kept() -> None:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        answer = await client.get("/")
        plain = await client.get("/plain")
    assert answer.status_code == 200 and answer.json() == {"ok": True}
    assert "x-request-id" not in answer.headers
    assert answer.headers["x-selected-model"] == "m"
    assert plain.text == "hi"
