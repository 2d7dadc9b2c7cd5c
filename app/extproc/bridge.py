"""The Envoy ext_proc bridge: one gRPC `Process` stream per HTTP request.

    request headers  -> remember them; APIs other than chat/responses pass untouched
    request body     -> Router.route(): immediate answer (cache hit, block, fast
                        response, bad input), or the rewritten body + routing headers
                        + `:path` for the selected backend, and clear_route_cache so
                        Envoy re-picks the route by `x-selected-model`
    response headers -> STREAMED mode for text/event-stream; routing headers
    response body    -> buffered JSON: translated (messages-style upstream, Responses
                        API) and `routing_metadata` added; SSE: each chunk translated as
                        it passes. At the end complete() runs in the background.

Messages-style upstreams (`api_format` anthropic/messages, `wire.MessagesWire`): a chat
request the backend cannot express is answered 400 at once (nothing is forwarded); an
answer that is no message is answered 502 (immediate response: a buffered body has not
reached the client yet); a stream that cannot be translated ends with an error chunk
and [DONE]. The target's own credentials (`x-api-key` + `anthropic-version`, or
`Authorization`) replace the client's `authorization`; they are never logged.

The Router is reached through the same `route`/`complete` methods the Ingress uses.
An error inside one stream never stops the server: `failure_mode` "open" lets the
request continue unmodified, "closed" answers 503 (the Envoy filter's own
`failure_mode_allow` covers the bridge being unreachable).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pbg
from pydantic import BaseModel, Field

from app.accounting.cost import compute_cost
from app.api.dataplane import RouterClient
from app.api.errors import SvcError, bad_request, body_too_large, upstream_unavailable
from app.api.openai_models import parse_chat_request
from app.common.background import BackgroundTasks
from app.extproc import envoy_messages as em
from app.extproc.wire import ChatWire, UpstreamWire, wire_for
from app.observability.router_metrics import RouterMetrics
from app.pipeline.answer import client_headers, routing_metadata
from app.pipeline.plan import CompletionReport, RoutePlan
from app.upstream.messages_api import MessagesTranslationError
from app.upstream.responses_api import (
    ChatToResponsesStream,
    ResponsesInputError,
    ResponsesRequest,
    chat_to_response,
    responses_to_chat,
)
from app.upstream.sse import SSEParser, StreamAccumulator, replay_as_sse

log = logging.getLogger("svc_sr.extproc")

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
ENDPOINTS = {CHAT_PATH: "chat_completions", RESPONSES_PATH: "responses"}


class BridgeSettings(BaseModel):
    failure_mode: Literal["open", "closed"] = "closed"
    clear_route_cache: bool = True
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)


class ExtProcBridge(pbg.ExternalProcessorServicer):
    def __init__(self, router: RouterClient, settings: BridgeSettings | None = None,
                 metrics: RouterMetrics | None = None) -> None:
        self.router = router
        self.settings = settings or BridgeSettings()
        self.metrics = metrics or RouterMetrics()
        self._background = BackgroundTasks()
        self._open_exchanges = 0
        self._no_open_exchange = asyncio.Event()
        self._no_open_exchange.set()

    async def Process(  # noqa: N802 (the gRPC method name)
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: Any
    ) -> AsyncIterator[pb.ProcessingResponse]:
        exchange = _Exchange(self)
        self._open_exchanges += 1
        self._no_open_exchange.clear()
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("request")
                try:
                    response = await exchange.handle(kind, request)
                except Exception:
                    log.exception("ext_proc %s failed (request %s)", kind, exchange.request_id)
                    response = exchange.on_failure(kind)
                yield response
        finally:
            exchange.finish_abandoned()
            self._open_exchanges -= 1
            if not self._open_exchanges:
                self._no_open_exchange.set()

    def spawn(self, coro: Any) -> None:
        self._background.spawn(coro)

    async def complete_quietly(self, plan: RoutePlan, report: CompletionReport) -> None:
        try:
            await self.router.complete(plan, report)
        except Exception:  # accounting must never break a served answer
            log.exception("complete() failed for request %s", plan.request_id)

    async def drain(self) -> None:
        """Wait until no exchange is open and every complete() it started has run (shutdown,
        tests). Open exchanges count: a client can read a stream's [DONE] (sent on the
        upstream's last event) before Envoy hands the bridge the end of the body, and only
        then does the exchange complete."""
        await self._no_open_exchange.wait()
        await self._background.drain()


class _Exchange:
    """The state of one HTTP request as it passes through Envoy."""

    def __init__(self, bridge: ExtProcBridge) -> None:
        self.bridge = bridge
        self.started = time.perf_counter()
        self.request_id = ""
        self.headers: dict[str, str] = {}
        self.endpoint = ""
        self.plan: RoutePlan | None = None
        self.wire: UpstreamWire = ChatWire()
        self.responses_request: ResponsesRequest | None = None
        self.status = 0
        self.streaming = False
        self.parser = SSEParser()
        self.accumulator = StreamAccumulator()
        self.to_responses: ChatToResponsesStream | None = None
        self.responses_parser = SSEParser()  # re-parses translated chat SSE for the Responses API
        self.headers_at: float | None = None
        self.first_chunk_at: float | None = None
        self.stream_failed = False  # the answer's stream could not be translated: the rest is dropped
        self.completed = False

    # ------------------------------------------------------------------ dispatch
    async def handle(self, kind: str, request: pb.ProcessingRequest) -> pb.ProcessingResponse:
        if kind == "request_headers":
            return self.on_request_headers(request.request_headers)
        if kind == "request_body":
            return await self.on_request_body(request.request_body)
        if kind == "response_headers":
            return self.on_response_headers(request.response_headers)
        if kind == "response_body":
            return self.on_response_body(request.response_body)
        return em.passthrough(kind)

    def on_failure(self, kind: str) -> pb.ProcessingResponse:
        model = self.plan.selected_model if self.plan else None
        self.bridge.metrics.on_front_door_error(self.endpoint or "unknown", "classification_failed", 503,
                                                model or "unknown")
        self.completed = True  # counted here; no complete() for this exchange
        if self.bridge.settings.failure_mode == "open" or kind == "response_body":
            return em.passthrough(kind)  # mid-stream, an immediate answer would only cut the body short
        error = upstream_unavailable(message="the router failed to process this request")
        return em.immediate(503, json.dumps(error.body()).encode(),
                            {"x-request-id": self.request_id, **error.headers})

    # ------------------------------------------------------------------ request
    def on_request_headers(self, headers: pb.HttpHeaders) -> pb.ProcessingResponse:
        self.headers = em.read_headers(headers)
        self.request_id = self.headers.get("x-request-id") or uuid.uuid4().hex
        path = self.headers.get(":path", "").split("?", 1)[0]
        if self.headers.get(":method", "POST").upper() != "POST" or path not in ENDPOINTS:
            self.completed = True
            return em.continue_request_headers(skip_bodies=True)
        self.endpoint = ENDPOINTS[path]
        # Bodies must reach us uncompressed to be read and rewritten.
        return em.continue_request_headers({"accept-encoding": "identity", "x-request-id": self.request_id})

    async def on_request_body(self, body: pb.HttpBody) -> pb.ProcessingResponse:
        raw = bytes(body.body)
        try:
            if len(raw) > self.bridge.settings.max_body_bytes:
                raise body_too_large(self.bridge.settings.max_body_bytes)
            chat_body = self._chat_body(raw)
        except SvcError as exc:
            return self._error(exc, "parse_error")
        try:
            plan = await self.bridge.router.route(chat_body, self.headers, self.request_id)
        except SvcError as exc:  # unknown model, nothing to route to
            return self._error(exc, "unknown" if exc.status < 500 else "classification_failed",
                               chat_body.get("model"))
        plan.endpoint = self.endpoint
        self.plan = plan
        if plan.immediate is not None:
            return self._immediate(plan)
        if not plan.candidates:
            return self._error(upstream_unavailable(message="no backend serves the selected model"),
                               "unknown", plan.selected_model)
        target = plan.candidates[0]
        self.wire = wire_for(target)
        upstream_body = dict(plan.body)
        upstream_body["model"] = target.upstream_model
        if plan.stream:
            options = dict(upstream_body.get("stream_options") or {})
            options.setdefault("include_usage", True)  # usage -> cost and TPOT for streams too
            upstream_body["stream_options"] = options
        try:
            encoded = json.dumps(self.wire.request_body(upstream_body, target)).encode()
        except MessagesTranslationError as exc:  # the backend's protocol cannot express this request
            return self._untranslatable(exc, "parse_error")
        # As the standalone client: the plan's headers, then the protocol's credentials,
        # then the backend's extra_headers (which may override either).
        set_headers = _lower(plan.upstream_headers, self.wire.auth_headers(target), target.extra_headers)
        set_headers.update({
            "x-selected-model": target.model,
            "content-type": "application/json",
            "content-length": str(len(encoded)),  # Envoy answers 500 without it after a rewrite
        })
        remove = list(plan.upstream_headers_remove)
        if "x-api-key" in set_headers and "authorization" not in set_headers:
            remove.append("authorization")  # the backend's key replaces the client's credentials
        path = self.wire.path(target)
        if path != self.headers.get(":path"):
            set_headers[":path"] = path
        return em.request_body_response(encoded, set_headers, remove,
                                        clear_route_cache=self.bridge.settings.clear_route_cache)

    def _untranslatable(self, exc: MessagesTranslationError, reason: str) -> pb.ProcessingResponse:
        """400 for a request, 502 for an answer, in the standalone client's error body."""
        plan = self.plan
        assert plan is not None
        log.warning("request %s: %s (status %d)", self.request_id, exc, exc.status)
        model = plan.candidates[0].model if plan.candidates else plan.selected_model
        self.status = exc.status
        report = self._report(None, stream_finished=False)
        report.error_reason = reason
        self._complete(report)
        headers = client_headers(plan, self.started)
        if model:
            headers["x-selected-model"] = model
        return em.immediate(exc.status, json.dumps(exc.body()).encode(), headers)

    def _chat_body(self, raw: bytes) -> dict[str, Any]:
        if self.endpoint == "responses":
            try:
                self.responses_request = ResponsesRequest.model_validate_json(raw)
                raw = json.dumps(responses_to_chat(self.responses_request)).encode()
            except (ValueError, ResponsesInputError) as exc:
                raise bad_request(f"invalid Responses request: {exc}") from exc
        request = parse_chat_request(raw)
        body = json.loads(raw)  # the client's own fields pass through untouched
        body["model"] = request.model
        return body

    def _error(self, exc: SvcError, reason: str, model: str | None = None) -> pb.ProcessingResponse:
        self.completed = True
        self.bridge.metrics.on_front_door_error(self.endpoint, reason, exc.status, model or "unknown")
        return em.immediate(exc.status, json.dumps(exc.body()).encode(),
                            {"x-request-id": self.request_id, **exc.headers})

    def _immediate(self, plan: RoutePlan) -> pb.ProcessingResponse:
        answer = plan.immediate
        assert answer is not None
        headers = {**client_headers(plan, self.started), **answer.headers}
        if plan.selected_model:
            headers["x-selected-model"] = plan.selected_model
        content_type = "application/json"
        if answer.status != 200:
            body = json.dumps(answer.body).encode()
        elif plan.stream:
            content_type = "text/event-stream"
            chunks = replay_as_sse(answer.body)
            if self.responses_request is not None:
                chunks = _to_responses_events(chunks, self.responses_request)
            body = b"".join(chunks)
        else:
            completion = dict(answer.body)
            completion["routing_metadata"] = routing_metadata(plan, self.started)
            out = completion
            if self.responses_request is not None:
                out = chat_to_response(completion, self.responses_request)
                out["routing_metadata"] = completion["routing_metadata"]
            body = json.dumps(out).encode()
        self._complete(CompletionReport(status=answer.status, model=plan.selected_model, stream=plan.stream,
                                        total_s=time.perf_counter() - self.started))
        return em.immediate(answer.status, body, headers, content_type)

    # ------------------------------------------------------------------ response
    def on_response_headers(self, headers: pb.HttpHeaders) -> pb.ProcessingResponse:
        if self.plan is None:  # fail-open passthrough
            return em.passthrough("response_headers")
        response = em.read_headers(headers)
        self.headers_at = time.perf_counter()
        self.status = int(response.get(":status", "0") or 0)
        self.streaming = response.get("content-type", "").startswith("text/event-stream")
        set_headers = client_headers(self.plan, self.started)
        if self.plan.candidates:
            set_headers["x-selected-model"] = self.plan.candidates[0].model
        if self.streaming and self.responses_request is not None:
            self.to_responses = ChatToResponsesStream(self.responses_request)
        # The body will be rewritten (translation, routing_metadata): its length changes.
        remove = ["content-length"]
        if self.streaming:
            set_headers["content-type"] = "text/event-stream"
        elif self.wire.translates_responses or self.status == 200:
            set_headers["content-type"] = "application/json"
        if headers.end_of_stream:
            self._complete(self._report(None))
        return em.response_headers_response(set_headers, remove, stream_body=self.streaming)

    def on_response_body(self, body: pb.HttpBody) -> pb.ProcessingResponse:
        if self.plan is None or self.completed:
            return em.passthrough("response_body")
        if self.streaming:
            return self._stream_chunk(bytes(body.body), body.end_of_stream)
        return self._whole_body(bytes(body.body))

    def _stream_chunk(self, raw: bytes, end: bool) -> pb.ProcessingResponse:
        if self.first_chunk_at is None and raw:
            self.first_chunk_at = time.perf_counter()
        chat = raw
        if self.stream_failed:
            chat = b""  # the client's stream already ended with an error chunk and [DONE]
        elif self.status < 400:
            try:
                chat = self.wire.stream_chunk(raw)
                if end:
                    chat += self.wire.stream_end()
            except Exception:  # never relay untranslated bytes, never leave the client waiting
                log.exception("stream translation failed (request %s)", self.request_id)
                self.stream_failed = True
                chat = self.wire.stream_fail("the upstream stream could not be translated")
        for event in self.parser.feed(chat):
            self.accumulator.add(event)
        out = chat
        if self.to_responses is not None:
            out = b"".join(_feed_responses(self.to_responses, self.responses_parser, chat))
            if end:
                out += b"".join(self.to_responses.finish())
        if end:
            finished = self.status < 400 and not self.stream_failed and self.wire.stream_completed(self.accumulator)
            report = self._report(None, stream_finished=finished)
            if not finished and self.status < 400:
                report.error_reason = "upstream_5xx"  # ended, but with an error or cut short
            self._complete(report)
        return em.response_body_response(out if (out != raw) else None)

    def _whole_body(self, raw: bytes) -> pb.ProcessingResponse:
        plan = self.plan
        assert plan is not None
        try:
            completion = self.wire.response_body(raw, self.status, plan.candidates[0].model)
        except MessagesTranslationError as exc:  # an answer that is no message: 502
            return self._untranslatable(exc, "upstream_5xx")
        if completion is None or self.status != 200:
            self._complete(self._report(None))
            translated = None if completion is None else json.dumps(completion).encode()
            return em.response_body_response(translated, {"content-length": str(len(translated or raw))})
        served = plan.candidates[0].model
        cost = compute_cost(completion.get("usage"), plan.pricing.get(served))
        completion["routing_metadata"] = routing_metadata(plan.model_copy(update={"selected_model": served}),
                                                          self.started, cost)
        self._complete(self._report(completion))
        out = completion
        if self.responses_request is not None:
            out = chat_to_response(completion, self.responses_request)
            out["routing_metadata"] = completion["routing_metadata"]
        encoded = json.dumps(out).encode()
        return em.response_body_response(encoded, {
            "content-length": str(len(encoded)),
            "x-processing-time": f"{(time.perf_counter() - self.started) * 1000:.2f}",
        })

    # ------------------------------------------------------------------ accounting
    def _report(self, completion: dict[str, Any] | None, stream_finished: bool = True) -> CompletionReport:
        plan = self.plan
        assert plan is not None
        now = time.perf_counter()
        if self.streaming and self.status == 200:
            completion = self.accumulator.to_chat_completion()
        reason = None
        if self.status >= 400:
            reason = "upstream_4xx" if self.status < 500 else "upstream_5xx"
        elif self.streaming and not stream_finished:
            reason = "cancellation"
        first = self.first_chunk_at if self.streaming else self.headers_at
        ttft = None if first is None else first - self.started
        return CompletionReport(
            status=self.status or 502, model=plan.candidates[0].model if plan.candidates else plan.selected_model,
            response=completion if self.status == 200 else None, stream=self.streaming,
            stream_finished=stream_finished, ttft_s=ttft,
            total_s=now - self.started, error_reason=reason,
        )

    def _complete(self, report: CompletionReport) -> None:
        if self.completed or self.plan is None:
            return
        self.completed = True
        self.bridge.spawn(self.bridge.complete_quietly(self.plan, report))

    def finish_abandoned(self) -> None:
        """The stream closed before the body's end reached the bridge: client gone, upstream
        reset, or a client that closed as soon as it read [DONE] (the OpenAI SDK does), so
        Envoy never forwarded the body's last, empty frame. In that last case the whole
        answer went through and counts as finished (its cost, its cache write)."""
        if self.completed or self.plan is None:
            return
        if (self.streaming and self.status == 200 and not self.stream_failed
                and self.wire.stream_completed(self.accumulator)):
            self._complete(self._report(None, stream_finished=True))
            return
        self.status = self.status or 499
        report = self._report(None, stream_finished=False)
        report.error_reason = "cancellation"
        self._complete(report)


def _lower(*maps: dict[str, str]) -> dict[str, str]:
    """Merged header maps, names lower-cased (later maps win, whatever their spelling)."""
    out: dict[str, str] = {}
    for headers in maps:
        for name, value in headers.items():
            out[name.lower()] = value
    return out


def _feed_responses(translator: ChatToResponsesStream, parser: SSEParser, chat: bytes) -> list[bytes]:
    out: list[bytes] = []
    for event in parser.feed(chat):
        out.extend(translator.feed(event))
    return out


def _to_responses_events(chunks: list[bytes], request: ResponsesRequest) -> list[bytes]:
    translator = ChatToResponsesStream(request)
    parser = SSEParser()
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(_feed_responses(translator, parser, chunk))
    out.extend(translator.finish())
    return out
