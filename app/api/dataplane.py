"""The Ingress front door: /v1/chat/completions, /v1/responses, /v1/models over HTTP.

An adapter of the exchange (app/exchange/exchange.py): it only turns an `Exchange`'s
replies into Starlette responses and forwards routed requests with the upstream client
(retries, fallback), so a stream is relayed chunk by chunk by the process that holds the
client connection. The completion runs once the answer has been sent: on 2 cores,
accounting that runs while the proxy relays the answer slows the answer down.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel
from starlette.background import BackgroundTask

from app.api.key_access import Caller
from app.common.api_docs import BODY_TOO_LARGE, Responses, errors, json_body, model_schema
from app.common.background import BackgroundTasks
from app.common.errors import ErrorBody
from app.config.document import RouterConfig
from app.config.recipes import entrypoint_models
from app.exchange.client_api import ChatApi, ClientApi, ResponsesApi
from app.exchange.exchange import Exchange, ExchangeSettings, Reply, RouterClient
from app.exchange.openai_schemas import ChatCompletion, ChatCompletionRequest, ModelList, ResponseObject
from app.exchange.responses.images import ResolveImageFile
from app.exchange.responses.request import ResponsesRequest
from app.exchange.responses.stored import ConversationStore
from app.keys.gate import KeyGate
from app.keys.records import KeyRecord
from app.pipeline.metrics import RouterMetrics
from app.upstream.client import UpstreamClient
from app.upstream.results import UpstreamStreamError, UpstreamUnavailable
from app.upstream.transport import UpstreamStream


class ConfigView(Protocol):
    def current(self) -> RouterConfig: ...


class ResponsesStore(Protocol):
    def for_request(self) -> ConversationStore | None: ...


class DataPlane:
    """`responses`: the Responses API store (app/api/responses_store.py; None: none, as
    behind Envoy: previous_response_id answers 400 and nothing is kept). `images`: the files
    store's images for Responses input_image file ids (None: such a part answers 400)."""

    def __init__(
        self,
        router: RouterClient,
        upstream: UpstreamClient,
        config: ConfigView,
        metrics: RouterMetrics | None = None,
        responses: ResponsesStore | None = None,
        images: ResolveImageFile | None = None,
    ) -> None:
        self.router = router
        self.upstream = upstream
        self.config = config
        self.metrics = metrics or RouterMetrics()
        self.responses = responses
        self.images = images
        self.background = BackgroundTasks()  # completions of streams, after their last byte
        self.keys: KeyGate | None = None  # issued API keys, grants and budgets (app/keys/gate.py)

    def responses_api(self) -> ResponsesApi:
        store = self.responses.for_request() if self.responses is not None else None
        return ResponsesApi(store, self.images)

    async def handle(self, api: ClientApi, raw: bytes, headers: dict[str, str]) -> Response:
        limits = self.config.current().global_.services.data_plane
        exchange = Exchange(
            ExchangeSettings(self.router, self.metrics, max_json_depth=limits.max_json_depth, keys=self.keys),
            api,
        )
        try:
            step = await exchange.begin(raw, headers)
        except Exception:  # the router failed: counted here, answered 500 by the error handler
            self.metrics.on_front_door_error(
                api.endpoint, "classification_failed", 500, exchange.requested_model or "unknown"
            )
            raise
        if isinstance(step, Reply):
            await api.persist()  # a cache hit or a fast response continues like any answer
            return _response(step, exchange)
        if step.plan.stream:
            return await self._stream(exchange)
        return await self._whole(exchange)

    async def _whole(self, exchange: Exchange) -> Response:
        plan = exchange.plan
        assert plan is not None
        called = time.perf_counter()
        try:
            result = await self.upstream.complete(
                plan.candidates,
                exchange.upstream_body,
                plan.upstream_headers,
                plan.reliability,
                plan.fallback,
            )
        except UpstreamUnavailable as exc:
            return _response(exchange.upstream_failed(exc), exchange)
        first_byte = None if result.first_byte_s is None else called + result.first_byte_s
        exchange.respond(result.status, result.headers, result.target, result.local, first_byte)
        reply = await exchange.answer_body(result.content)
        await exchange.api.persist()  # kept before the client has the id
        return _response(reply, exchange)

    async def _stream(self, exchange: Exchange) -> Response:
        plan = exchange.plan
        assert plan is not None
        try:
            stream = await self.upstream.stream(
                plan.candidates,
                exchange.upstream_body,
                plan.upstream_headers,
                plan.reliability,
                plan.fallback,
            )
        except UpstreamUnavailable as exc:
            return _response(exchange.upstream_failed(exc), exchange)
        head = exchange.respond(stream.status, stream.headers, stream.target, stream.local)
        if not head.streaming:  # an error document answers the stream request
            return _response(await exchange.answer_body(await _read_all(stream)), exchange)
        if head.hold:  # answer checks on the whole answer: read it all first
            raw = await _read_all(stream)
            reply = await exchange.held_stream(raw)
            await exchange.api.persist()
            return _response(reply, exchange)
        return StreamingResponse(
            self._relay(exchange, stream),
            status_code=head.status,
            headers=head.headers,
            media_type=head.headers["content-type"],
        )

    async def _relay(self, exchange: Exchange, stream: UpstreamStream) -> AsyncIterator[bytes]:
        try:
            async for chunk in stream.aiter_bytes():
                out = exchange.stream_chunk(chunk)
                if out:
                    yield out
            tail = exchange.stream_end()
            await exchange.api.persist()  # kept before the client sees the stream end
            if tail:
                yield tail
        except UpstreamStreamError as exc:  # the client's stream ends with an error event
            tail = exchange.stream_broken(exc.kind)
            if tail:
                yield tail
        finally:
            await stream.aclose()
            exchange.close()  # a client that went away mid-stream: a cancellation
            self.background.spawn(exchange.finish())

    def models(self, key: KeyRecord | None = None) -> dict[str, Any]:
        """The model names a caller may ask for: MoM and the other virtual names (their
        selections stay within the caller's grants), and the provider models it is granted."""
        config = self.config.current()
        created = int(time.time())
        names = [config.global_.router.auto_model_name, *entrypoint_models(config)]
        if config.global_.router.include_config_models_in_list:
            granted = self.keys.granted(key) if self.keys is not None else None
            names += [m.name for m in config.providers.models if granted is None or m.name in granted]
        listed = list(dict.fromkeys(["MoM", *names]))
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "created": created, "owned_by": "svc-sr"} for n in listed],
        }


def _response(reply: Reply, exchange: Exchange) -> Response:
    """The reply, with the completion after it has been sent."""
    return Response(
        reply.body,
        status_code=reply.status,
        headers=reply.headers,
        media_type=reply.content_type,
        background=BackgroundTask(exchange.finish),
    )


async def _read_all(stream: UpstreamStream) -> bytes:
    try:
        return await stream.read()
    except UpstreamStreamError:
        return b""
    finally:
        await stream.aclose()


def _answers(answer: type[BaseModel], stream_events: str) -> Responses:
    """An exchange's answers: its own (200, refusals) and the backend's, relayed as they came."""
    return {
        200: {
            "description": f"the answer; with stream: true a text/event-stream of {stream_events}",
            "content": {
                "application/json": {"schema": model_schema(answer)},
                "text/event-stream": {"schema": {"type": "string"}},
            },
        },
        **errors(
            ErrorBody,
            {
                400: "invalid request (invalid_json, invalid_request, no_route; invalid_image_file: "
                "a Responses input_image file_id that is not a purpose=vision image)",
                401: "authentication_error (missing_api_key, invalid_api_key): a listener requires "
                "API keys and the request has no known one",
                403: "blocked: security_violation (pii_detected, jailbreak_detected; model_not_granted: "
                "a model outside the API key's grants)",
                404: "model_not_found: an explicit model that is not configured; "
                "previous_response_not_found (Responses: unknown or expired); file_not_found "
                "(Responses input_image file_id)",
                429: "RATE_LIMIT_EXCEEDED (Retry-After); budget_exceeded: the API key's budget is "
                "spent (Retry-After: the end of its period)",
                503: "upstream_unavailable: no backend answered; response_store_unavailable, "
                "file_store_unavailable (Retry-After)",
                504: "upstream_timeout: every attempt timed out",
            },
        ),
        **BODY_TOO_LARGE,
        "default": {"description": "a backend's own error answer, relayed with its status and body"},
    }


def dataplane_router(plane: DataPlane, caller: Caller) -> APIRouter:
    """`caller`: the API-key gate's dependency (app/api/key_access.py), for /v1/models; the
    exchange asks the gate itself for chat and Responses."""
    router = APIRouter(tags=["inference"])

    # Handlers read the raw body (passed through to the backend untouched); the schema documents it.
    @router.post(
        "/v1/chat/completions",
        responses=_answers(ChatCompletion, "chat.completion.chunk events"),
        openapi_extra=json_body(ChatCompletionRequest),
    )
    async def chat_completions(request: Request) -> Response:
        return await plane.handle(ChatApi(), await request.body(), _headers(request))

    @router.post(
        "/v1/responses",
        responses=_answers(ResponseObject, "Responses events"),
        openapi_extra=json_body(ResponsesRequest),
    )
    async def responses(request: Request) -> Response:
        return await plane.handle(plane.responses_api(), await request.body(), _headers(request))

    @router.get(
        "/v1/models",
        response_model=ModelList,
        responses=errors(
            ErrorBody,
            {
                401: "authentication_error (missing_api_key, invalid_api_key): a listener requires "
                "API keys and the request has no known one",
                429: "RATE_LIMIT_EXCEEDED (Retry-After)",
            },
        ),
    )
    async def models(request: Request) -> dict[str, Any]:
        return plane.models(await caller(request))

    return router


def _headers(request: Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}
