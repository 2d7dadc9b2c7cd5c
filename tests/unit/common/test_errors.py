"""Error bodies, FastAPI handlers, body-size middleware and chat request validation."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from app.api.errors import BodySizeLimitMiddleware, install_error_handlers
from app.common.errors import (
    NO_ROUTE_MESSAGE,
    ErrorBody,
    SvcError,
    bad_request,
    body_too_large,
    from_upstream_unavailable,
    model_not_found,
    no_route,
    security_violation,
    upstream_unavailable,
)
from app.exchange.openai_schemas import ModelList, parse_chat_body, validate_chat_body
from app.upstream.results import AttemptRecord, UpstreamUnavailable

LIMIT = 64


class Item(BaseModel):
    name: str
    count: int


def make_app(calls: list[str]) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=LIMIT)

    @app.get("/svc/{kind}")
    async def svc(kind: str):
        calls.append(kind)
        errors = {
            "model": model_not_found("gpt-x"),
            "route": no_route(),
            "down": upstream_unavailable(2.2),
            "pii": security_violation("pii_detected", ["EMAIL_ADDRESS", "EMAIL_ADDRESS", "PHONE_NUMBER"]),
        }
        raise errors[kind]

    @app.get("/boom")
    async def boom():
        calls.append("boom")
        raise RuntimeError("secret internal detail")

    @app.get("/stream-boom")
    async def stream_boom():
        async def body():
            yield b"data: 1\n\n"
            raise RuntimeError("mid-stream failure")

        return StreamingResponse(body(), media_type="text/event-stream")

    @app.post("/items")
    async def items(item: Item):
        calls.append("items")
        return {"ok": item.name}

    @app.get("/items/{item_id}")
    async def get_item(item_id: int):
        return {"id": item_id}

    @app.delete("/items/{item_id}")
    async def delete_item(item_id: int):
        return {"deleted": item_id}

    @app.post("/raw")
    async def raw(request: Request):
        calls.append("raw")
        body = await request.body()
        return {"size": len(body)}

    return app


@pytest.fixture
def calls() -> list[str]:
    return []


@pytest.fixture
async def client(calls):
    transport = httpx.ASGITransport(app=make_app(calls), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        yield c


def error_of(response: httpx.Response) -> dict:
    ErrorBody.model_validate(response.json())
    return response.json()["error"]


# -- bodies and factories -----------------------------------------------------------------
def test_error_body_shape():
    err = bad_request("temperature must be a number", param="temperature")
    assert err.status == 400
    assert err.body() == {
        "error": {
            "message": "temperature must be a number",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "temperature",
        }
    }
    plain = SvcError(500, "x")
    assert plain.body() == {"error": {"message": "x", "type": "internal_error", "code": None}}
    assert body_too_large(10).status == 413 and body_too_large(10).code == "body_too_large"


def test_upstream_unavailable_maps_to_503_or_504():
    attempts = [AttemptRecord("m", "m@h", None, "timeout", 0.1)]
    slow = from_upstream_unavailable(UpstreamUnavailable(attempts, None, timed_out=True))
    assert slow.status == 504 and slow.code == "upstream_timeout" and slow.headers["Retry-After"] == "1"
    down = from_upstream_unavailable(UpstreamUnavailable(attempts, 4.2))
    assert down.status == 503 and down.code == "upstream_unavailable" and down.headers["Retry-After"] == "5"


async def test_factories_through_handlers(client):
    r = await client.get("/svc/model")
    assert r.status_code == 404
    assert error_of(r) == {
        "message": "The model `gpt-x` does not exist",
        "type": "invalid_request_error",
        "code": "model_not_found",
        "param": "model",
    }
    r = await client.get("/svc/route")
    assert (
        r.status_code == 400
        and error_of(r)["message"] == NO_ROUTE_MESSAGE
        and error_of(r)["code"] == "no_route"
    )
    r = await client.get("/svc/down")
    assert r.status_code == 503 and r.headers["retry-after"] == "3"
    assert error_of(r)["code"] == "upstream_unavailable"
    r = await client.get("/svc/pii")
    err = error_of(r)
    assert r.status_code == 403 and err["type"] == "security_violation" and err["code"] == "pii_detected"
    assert err["details"] == {"entities_found": ["EMAIL_ADDRESS", "PHONE_NUMBER"], "action_taken": "block"}
    assert "EMAIL_ADDRESS" in err["message"]


async def test_validation_error_is_400_with_field_path(client, calls):
    r = await client.post("/items", json={"name": "a", "count": "many"})
    err = error_of(r)
    assert r.status_code == 400 and err["code"] == "invalid_request"
    assert err["message"].startswith("count:") and err["param"] == "count"
    assert calls == []


async def test_unknown_route_and_method_use_the_error_body(client):
    r = await client.get("/nope")
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    r = await client.get("/items")
    assert r.status_code == 405 and error_of(r)["code"] == "method_not_allowed"


async def test_unexpected_exception_is_a_500_with_request_id(client, calls):
    r = await client.get("/boom", headers={"x-request-id": "req-42"})
    err = error_of(r)
    assert r.status_code == 500 and err["type"] == "internal_error"
    assert err["details"]["request_id"] == "req-42" and r.headers["x-request-id"] == "req-42"
    assert "secret internal detail" not in r.text
    r = await client.get("/boom")
    assert len(error_of(r)["details"]["request_id"]) == 32  # generated when the client sent none
    assert calls == ["boom", "boom"]
    assert (await client.get("/svc/route")).status_code == 400  # the app keeps serving


async def test_every_5xx_is_logged_at_once_with_its_request_id(client, caplog):
    """The exception's traceback for a 500; the answer's own error body for a 5xx it answered
    (docs/management-api.md, "Every 5xx is traceable")."""
    with caplog.at_level(logging.ERROR, logger="app.api.errors"):
        await client.get("/boom", headers={"x-request-id": "req-500"})
        await client.get("/svc/down", headers={"x-request-id": "req-503"})
        await client.get("/svc/model", headers={"x-request-id": "req-404"})
    crashed, down = caplog.records  # the 404 is a client's error: not logged
    assert "req-500" in crashed.getMessage() and crashed.exc_info is not None
    assert "secret internal detail" in str(crashed.exc_info[1])
    assert "req-503" in down.getMessage() and "answered 503" in down.getMessage()
    assert "upstream_unavailable" in down.getMessage()  # what failed, from the body


async def test_405_allows_every_method_of_the_path(client):
    answer = await client.request("PATCH", "/items/7")
    assert answer.status_code == 405 and error_of(answer)["code"] == "method_not_allowed"
    assert answer.headers["allow"] == "DELETE, GET"  # two routes of one path, both named


async def test_failure_after_the_stream_started_ends_it_quietly(calls):
    # Raw ASGI call: the response cannot turn into a 500 any more; it just ends, no raise.
    sent = []
    requests = [{"type": "http.request", "body": b"", "more_body": False}]
    never = asyncio.Event()

    async def receive():
        if requests:
            return requests.pop()
        await never.wait()  # the client stays connected

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "path": "/stream-boom",
        "raw_path": b"/stream-boom",
        "root_path": "",
        "scheme": "http",
        "query_string": b"",
        "headers": [],
        "client": ("t", 1),
        "server": ("t", 80),
    }
    await make_app(calls)(scope, receive, send)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert [m.get("body") for m in sent[1:]][0] == b"data: 1\n\n"
    assert not any(m.get("status") == 500 for m in sent)


# -- body size ----------------------------------------------------------------------------
async def test_content_length_over_the_limit_is_refused_unread(client, calls):
    r = await client.post("/raw", content=b"x" * (LIMIT + 1))
    assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"
    assert calls == []


async def test_body_within_the_limit_passes(client, calls):
    r = await client.post("/raw", content=b"x" * LIMIT)
    assert r.status_code == 200 and r.json() == {"size": LIMIT} and calls == ["raw"]


@pytest.mark.parametrize("path", ["/raw", "/items"])
async def test_streamed_body_over_the_limit_stops_reading(client, path):
    pulled = []

    async def upload():
        for n in range(100):
            pulled.append(n)
            yield b"y" * 16

    r = await client.post(path, content=upload())
    assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"
    assert len(pulled) < 100  # reading stopped soon after the limit


async def test_streamed_body_within_the_limit_passes(client):
    async def upload():
        for _ in range(3):
            yield b"z" * 16

    r = await client.post("/raw", content=upload())
    assert r.status_code == 200 and r.json() == {"size": 48}


async def test_bad_content_length_is_a_400():
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):  # pragma: no cover - never reached
        raise AssertionError("app must not run")

    middleware = BodySizeLimitMiddleware(app, max_bytes=10)
    await middleware({"type": "http", "headers": [(b"content-length", b"ten")]}, receive, send)
    assert sent[0]["status"] == 400
    assert json.loads(sent[1]["body"])["error"]["message"] == "invalid Content-Length header"


# -- chat request validation --------------------------------------------------------------
def chat(**fields) -> bytes:
    return json.dumps({"model": "MoM", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"{not json", "malformed JSON body"),
        (b"\xff\xfe", "malformed JSON body"),
        (b"[1, 2]", "request body must be a JSON object"),
        (json.dumps({"model": "MoM"}).encode(), "messages field is required"),
        (json.dumps({"model": "MoM", "messages": "hi"}).encode(), "messages field must be an array"),
        (
            json.dumps({"model": "MoM", "messages": []}).encode(),
            "messages field must contain at least one message",
        ),
        (
            json.dumps({"model": "MoM", "messages": [{"role": "user", "content": "a"}, "b"]}).encode(),
            "messages[1] must be an object",
        ),
        (
            json.dumps({"model": "MoM", "messages": [{"content": "a"}]}).encode(),
            "messages[0].role is required and must be a non-empty string",
        ),
        (json.dumps({"messages": [{"role": "user", "content": "a"}]}).encode(), "model field is required"),
        (chat(model="  "), "model field must be a non-empty string"),
        (chat(model=3), "model field must be a non-empty string"),
    ],
)
def test_parse_chat_body_messages(raw, message):
    with pytest.raises(SvcError) as info:
        parse_chat_body(raw)
    assert info.value.status == 400 and info.value.message == message


def test_parse_chat_body_names_the_bad_field():
    with pytest.raises(SvcError) as info:
        parse_chat_body(chat(max_tokens="lots"))
    assert info.value.message.startswith("max_tokens:") and info.value.param == "max_tokens"
    with pytest.raises(SvcError) as info:
        parse_chat_body(json.dumps({"model": "m", "messages": [{"role": "user", "content": 5}]}).encode())
    assert info.value.message.startswith("messages[0].content")


def test_parse_chat_body_keeps_what_the_client_sent():
    body = parse_chat_body(chat(stream=True, logit_bias={"1": 2}, reasoning_effort="low", model=" auto "))
    assert body["model"] == "auto" and body["stream"] is True  # the model name stripped
    assert body["logit_bias"] == {"1": 2} and body["reasoning_effort"] == "low"
    assert "max_tokens" not in body  # unset fields stay unset


def test_validate_chat_body_checks_the_dict_it_returns():
    # A translated body (the Responses API's) is validated as it is: no encode and decode.
    data = {"model": " MoM ", "messages": [{"role": "user", "content": "hi"}], "seed": 7}
    body = validate_chat_body(data)
    assert body is data and body == {
        "model": "MoM",
        "messages": [{"role": "user", "content": "hi"}],
        "seed": 7,
    }
    with pytest.raises(SvcError) as info:
        validate_chat_body({"model": "MoM", "messages": [{"role": "user", "content": 5}]})
    assert info.value.status == 400 and info.value.message.startswith("messages[0].content")


def test_model_list():
    listing = ModelList.of(["MoM", "small", "MoM"]).model_dump()
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == ["MoM", "small"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in listing["data"])
