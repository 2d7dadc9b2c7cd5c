"""One HTTP request as it passes through Envoy: its ext_proc messages, each translated to a
call on the request's Exchange (app/exchange/exchange.py), and the Exchange's answers back
to ext_proc responses. The servicer that hosts these streams is app/extproc/bridge.py."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from app.common.errors import SvcError, upstream_unavailable
from app.exchange.client_api import client_api
from app.exchange.exchange import Exchange, Reply
from app.extproc import envoy_messages as em
from app.extproc.upstream_request import envoy_request

if TYPE_CHECKING:
    from app.extproc.bridge import ExtProcBridge


class ExtProcStream:
    """One HTTP request as it passes through Envoy."""

    def __init__(self, bridge: ExtProcBridge) -> None:
        self.bridge = bridge
        self.exchange: Exchange | None = None
        self.headers: dict[str, str] = {}
        self.streaming = False
        self.hold = False  # a stream held whole for its answer checks

    @property
    def request_id(self) -> str:
        return self.exchange.request_id if self.exchange is not None else self.headers.get("x-request-id", "")

    async def handle(self, kind: str, request: pb.ProcessingRequest) -> pb.ProcessingResponse:
        if kind == "request_headers":
            response = await self.on_request_headers(request.request_headers)
            if self.exchange is not None and request.request_headers.end_of_stream:
                # No body follows (Envoy sends no body message): the exchange answers it as the
                # empty body it is (a 400; an empty body is no JSON), not forwarded unrouted.
                step = await self.exchange.begin(b"", self.headers)
                assert isinstance(step, Reply), "an empty body is never routed"
                return _immediate(step)
            return response
        if self.exchange is None:  # not an API the router handles, or a fail-open passthrough
            return em.passthrough(kind)
        if kind == "request_body":
            return await self.on_request_body(self.exchange, request.request_body)
        if kind == "response_headers":
            return self.on_response_headers(self.exchange, request.response_headers)
        if kind == "response_body":
            return await self.on_response_body(self.exchange, request.response_body)
        return em.passthrough(kind)

    def on_failure(self, kind: str) -> pb.ProcessingResponse:
        exchange, self.exchange = self.exchange, None  # counted here; nothing more to complete
        plan = exchange.plan if exchange is not None else None
        endpoint = exchange.api.endpoint if exchange is not None else "unknown"
        self.bridge.metrics.on_front_door_error(
            endpoint, "classification_failed", 503, (plan.selected_model if plan else None) or "unknown"
        )
        if self.bridge.settings.failure_mode == "open" or kind == "response_body":
            return em.passthrough(kind)  # mid-stream, an immediate answer would only cut the body short
        error = upstream_unavailable(message="the router failed to process this request")
        return em.immediate(
            503, json.dumps(error.body()).encode(), {"x-request-id": self.request_id, **error.headers}
        )

    async def on_request_headers(self, headers: pb.HttpHeaders) -> pb.ProcessingResponse:
        self.headers = em.read_headers(headers)
        api = client_api(self.headers.get(":path", ""), self.bridge.images)
        if self.headers.get(":method", "POST").upper() != "POST" or api is None:
            # Forwarded as it came, once the key gate let it: a listener that requires keys
            # lets nothing through without one (docs/security.md "Keys and budgets").
            keys = self.bridge.exchange_settings.keys
            try:
                if keys is not None:
                    await keys.authenticate(self.headers)
            except SvcError as exc:
                headers = {"x-request-id": self.request_id, **exc.headers}
                return em.immediate(exc.status, json.dumps(exc.body()).encode(), headers)
            return em.continue_request_headers(skip_bodies=True)
        self.exchange = Exchange(self.bridge.exchange_settings, api)
        self.headers.setdefault("x-request-id", uuid.uuid4().hex)
        # Bodies must reach us uncompressed to be read and rewritten.
        return em.continue_request_headers(
            {"accept-encoding": "identity", "x-request-id": self.headers["x-request-id"]}
        )

    async def on_request_body(self, exchange: Exchange, body: pb.HttpBody) -> pb.ProcessingResponse:
        step = await exchange.begin(bytes(body.body), self.headers)
        if isinstance(step, Reply):
            return _immediate(step)
        request = envoy_request(exchange, self.headers.get(":path"))
        if isinstance(request, Reply):
            return _immediate(request)
        return em.request_body_response(
            request.body,
            request.set_headers,
            request.remove,
            clear_route_cache=self.bridge.settings.clear_route_cache,
        )

    def on_response_headers(self, exchange: Exchange, headers: pb.HttpHeaders) -> pb.ProcessingResponse:
        response = em.read_headers(headers)
        plan = exchange.plan
        assert plan is not None and plan.candidates
        head = exchange.respond(int(response.get(":status", "0") or 0), response, plan.candidates[0])
        # A stream with answer checks stays buffered (Envoy's default body mode): checked whole.
        self.streaming, self.hold = head.streaming and not head.hold, head.hold
        if headers.end_of_stream:
            exchange.end_without_body()
        # The body will be rewritten (translation, routing_metadata): its length changes.
        return em.response_headers_response(head.headers, ["content-length"], stream_body=self.streaming)

    async def on_response_body(self, exchange: Exchange, body: pb.HttpBody) -> pb.ProcessingResponse:
        raw = bytes(body.body)
        if self.streaming:
            out = exchange.stream_chunk(raw)
            if body.end_of_stream:
                out += exchange.stream_end()
            return em.response_body_response(out if out != raw else None)
        upstream_status = exchange.status
        reply = await (exchange.held_stream(raw) if self.hold else exchange.answer_body(raw))
        if reply.status != upstream_status:  # the answer became an error: Envoy sends ours instead
            return _immediate(reply)
        late = {k: v for k, v in reply.headers.items() if k.startswith("x-vsr-response-")}  # answer checks
        return em.response_body_response(
            reply.body,
            {
                "content-length": str(len(reply.body)),
                "x-processing-time": reply.headers["x-processing-time"],
                **late,
            },
        )

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
