"""The Envoy ext_proc front door: one gRPC `Process` stream per HTTP request.

An adapter of the exchange (app/exchange/exchange.py), which decides every answer; this
module only translates Envoy's messages:

    request headers  -> APIs other than chat/responses pass untouched
    request body     -> Exchange.begin: a Reply becomes an immediate response; a routed request
                        becomes the rewritten body, headers and `:path` for the plan's first
                        candidate, with clear_route_cache so Envoy re-picks the route by
                        `x-selected-model` (Envoy forwards to that one backend)
    response headers -> Exchange.respond (STREAMED mode for an event stream)
    response body    -> Exchange.whole_body (buffered) or stream_chunk/stream_end (SSE)
    stream closed    -> Exchange.close; the completion runs in the background

An error inside one stream never stops the server: `failure_mode` "open" lets the request
continue unmodified, "closed" answers 503 (the Envoy filter's own `failure_mode_allow`
covers the bridge being unreachable).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pbg
from pydantic import BaseModel, Field

from app.common.background import BackgroundTasks
from app.common.errors import upstream_unavailable
from app.exchange.client_api import client_api
from app.exchange.exchange import Exchange, ExchangeSettings, Reply, RouterClient
from app.extproc import envoy_messages as em
from app.extproc.upstream_request import envoy_request
from app.pipeline.metrics import RouterMetrics

log = logging.getLogger("svc_sr.extproc")


class BridgeSettings(BaseModel):
    failure_mode: Literal["open", "closed"] = "closed"
    clear_route_cache: bool = True
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)


class ExtProcBridge(pbg.ExternalProcessorServicer):
    def __init__(self, router: RouterClient, settings: BridgeSettings | None = None,
                 metrics: RouterMetrics | None = None) -> None:
        self.settings = settings or BridgeSettings()
        self.exchange_settings = ExchangeSettings(router, metrics or RouterMetrics(), self.settings.max_body_bytes)
        self._background = BackgroundTasks()
        self._open_exchanges = 0
        self._no_open_exchange = asyncio.Event()
        self._no_open_exchange.set()

    @property
    def metrics(self) -> RouterMetrics:
        return self.exchange_settings.metrics

    async def Process(  # noqa: N802 (the gRPC method name)
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: Any
    ) -> AsyncIterator[pb.ProcessingResponse]:
        stream = _Stream(self)
        self._open_exchanges += 1
        self._no_open_exchange.clear()
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("request")
                try:
                    response = await stream.handle(kind, request)
                except Exception:
                    log.exception("ext_proc %s failed (request %s)", kind, stream.request_id)
                    response = stream.on_failure(kind)
                stream.complete_if_due()
                yield response
        finally:
            stream.close()
            self._open_exchanges -= 1
            if not self._open_exchanges:
                self._no_open_exchange.set()

    def spawn(self, coro: Any) -> None:
        self._background.spawn(coro)

    async def drain(self) -> None:
        """Wait until no exchange is open and every completion it started has run (shutdown,
        tests). Open exchanges count: a client can read a stream's [DONE] (sent on the
        upstream's last event) before Envoy hands the bridge the end of the body, and only
        then does the exchange complete."""
        await self._no_open_exchange.wait()
        await self._background.drain()


class _Stream:
    """One HTTP request as it passes through Envoy."""

    def __init__(self, bridge: ExtProcBridge) -> None:
        self.bridge = bridge
        self.exchange: Exchange | None = None
        self.headers: dict[str, str] = {}
        self.streaming = False

    @property
    def request_id(self) -> str:
        return self.exchange.request_id if self.exchange is not None else self.headers.get("x-request-id", "")

    async def handle(self, kind: str, request: pb.ProcessingRequest) -> pb.ProcessingResponse:
        if kind == "request_headers":
            return self.on_request_headers(request.request_headers)
        if self.exchange is None:  # not an API the router handles, or a fail-open passthrough
            return em.passthrough(kind)
        if kind == "request_body":
            return await self.on_request_body(self.exchange, request.request_body)
        if kind == "response_headers":
            return self.on_response_headers(self.exchange, request.response_headers)
        if kind == "response_body":
            return self.on_response_body(self.exchange, request.response_body)
        return em.passthrough(kind)

    def on_failure(self, kind: str) -> pb.ProcessingResponse:
        exchange, self.exchange = self.exchange, None  # counted here; nothing more to complete
        plan = exchange.plan if exchange is not None else None
        endpoint = exchange.api.endpoint if exchange is not None else "unknown"
        self.bridge.metrics.on_front_door_error(endpoint, "classification_failed", 503,
                                                (plan.selected_model if plan else None) or "unknown")
        if self.bridge.settings.failure_mode == "open" or kind == "response_body":
            return em.passthrough(kind)  # mid-stream, an immediate answer would only cut the body short
        error = upstream_unavailable(message="the router failed to process this request")
        return em.immediate(503, json.dumps(error.body()).encode(), {"x-request-id": self.request_id, **error.headers})

    def on_request_headers(self, headers: pb.HttpHeaders) -> pb.ProcessingResponse:
        self.headers = em.read_headers(headers)
        api = client_api(self.headers.get(":path", ""))
        if self.headers.get(":method", "POST").upper() != "POST" or api is None:
            return em.continue_request_headers(skip_bodies=True)
        self.exchange = Exchange(self.bridge.exchange_settings, api)
        self.headers.setdefault("x-request-id", uuid.uuid4().hex)
        # Bodies must reach us uncompressed to be read and rewritten.
        return em.continue_request_headers({"accept-encoding": "identity", "x-request-id": self.headers["x-request-id"]})

    async def on_request_body(self, exchange: Exchange, body: pb.HttpBody) -> pb.ProcessingResponse:
        step = await exchange.begin(bytes(body.body), self.headers)
        if isinstance(step, Reply):
            return _immediate(step)
        request = envoy_request(exchange, self.headers.get(":path"))
        if isinstance(request, Reply):
            return _immediate(request)
        return em.request_body_response(request.body, request.set_headers, request.remove,
                                        clear_route_cache=self.bridge.settings.clear_route_cache)

    def on_response_headers(self, exchange: Exchange, headers: pb.HttpHeaders) -> pb.ProcessingResponse:
        response = em.read_headers(headers)
        plan = exchange.plan
        assert plan is not None and plan.candidates
        head = exchange.respond(int(response.get(":status", "0") or 0), response, plan.candidates[0])
        self.streaming = head.streaming
        if headers.end_of_stream:
            exchange.end_without_body()
        # The body will be rewritten (translation, routing_metadata): its length changes.
        return em.response_headers_response(head.headers, ["content-length"], stream_body=head.streaming)

    def on_response_body(self, exchange: Exchange, body: pb.HttpBody) -> pb.ProcessingResponse:
        raw = bytes(body.body)
        if self.streaming:
            out = exchange.stream_chunk(raw)
            if body.end_of_stream:
                out += exchange.stream_end()
            return em.response_body_response(out if out != raw else None)
        upstream_status = exchange.status
        reply = exchange.whole_body(raw)
        if reply.status != upstream_status:  # the answer became an error: Envoy sends ours instead
            return _immediate(reply)
        return em.response_body_response(reply.body, {"content-length": str(len(reply.body)),
                                                      "x-processing-time": reply.headers["x-processing-time"]})

    def complete_if_due(self) -> None:
        if self.exchange is not None and self.exchange.completion_due:
            self.bridge.spawn(self.exchange.finish())

    def close(self) -> None:
        """The stream closed: a request whose answer did not end here was cut off (client gone,
        upstream reset), or its client closed on [DONE] before Envoy forwarded the body's end."""
        if self.exchange is not None:
            self.exchange.close()
            self.complete_if_due()


def _immediate(reply: Reply) -> pb.ProcessingResponse:
    return em.immediate(reply.status, reply.body, reply.headers, reply.content_type)
