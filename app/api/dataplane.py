"""The standalone data plane: /v1/chat/completions, /v1/responses, /v1/models.

The front door relays: the Router decides (`route`); the upstream call happens here so
a stream is relayed chunk by chunk by the process that holds the client connection, never
buffered whole; `complete` (accounting, cache write) runs after the answer was sent, in
this process in the Ray graph (deployments/ingress.py HandleRouterClient).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from app.accounting.cost import compute_cost
from app.api.errors import SvcError, bad_request, from_upstream_unavailable
from app.api.openai_models import parse_chat_request
from app.common.background import BackgroundTasks
from app.config.models import RouterConfig
from app.observability.router_metrics import RouterMetrics
from app.pipeline.answer import client_headers, routing_metadata
from app.pipeline.plan import Accounting, CompletionReport, RoutePlan
from app.upstream.client import UpstreamClient, UpstreamStreamError, UpstreamUnavailable
from app.upstream.responses_api import (
    ChatToResponsesStream,
    ResponsesInputError,
    ResponsesRequest,
    chat_to_response,
    responses_to_chat,
)
from app.upstream.sse import SSEParser, StreamAccumulator, encode_done, replay_as_sse

log = logging.getLogger("svc_sr.dataplane")

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class RouterClient(Protocol):
    """The Router as the front door sees it (a DeploymentHandle adapter or the pipeline itself)."""

    async def route(self, body: dict[str, Any], headers: dict[str, str], request_id: str) -> RoutePlan: ...

    async def complete(self, plan: RoutePlan, report: CompletionReport) -> Accounting: ...


class ConfigView(Protocol):
    def current(self) -> RouterConfig: ...


class DataPlane:
    """Request handling shared by the chat and responses endpoints."""

    def __init__(
        self, router: RouterClient, upstream: UpstreamClient, config: ConfigView,
        metrics: RouterMetrics | None = None,
    ) -> None:
        self.router = router
        self.upstream = upstream
        self.config = config
        # Requests that never reach complete() (bad input, routing failures).
        self.metrics = metrics or RouterMetrics()
        self.background = BackgroundTasks()

    # ------------------------------------------------------------------ helpers
    def _spawn(self, coro: Any) -> None:
        """complete() runs after the client has its answer."""
        self.background.spawn(coro)

    def _after(self, plan: RoutePlan, report: CompletionReport) -> BackgroundTask:
        """complete() once the answer has been sent: on 2 cores, accounting that runs
        while the proxy relays the answer slows the answer down."""
        return BackgroundTask(self._complete_quietly, plan, report)

    async def _complete_quietly(self, plan: RoutePlan, report: CompletionReport) -> Accounting | None:
        try:
            return await self.router.complete(plan, report)
        except Exception:  # accounting must never break a served answer
            log.exception("complete() failed for request %s", plan.request_id)
            return None

    # ------------------------------------------------------------------ chat
    async def plan_for(
        self, raw: bytes, headers: dict[str, str], endpoint: str = "chat_completions"
    ) -> tuple[dict[str, Any], RoutePlan]:
        try:
            request = parse_chat_request(raw)
        except SvcError as exc:
            self.metrics.on_front_door_error(endpoint, "parse_error", exc.status)
            raise
        body = json.loads(raw)  # the client's own fields, passed through untouched
        body["model"] = request.model
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        try:
            plan = await self.router.route(body, headers, request_id)
        except SvcError as exc:  # unknown model, nothing to route to, ...
            reason = "unknown" if exc.status < 500 else "classification_failed"
            self.metrics.on_front_door_error(endpoint, reason, exc.status, request.model)
            raise
        except Exception:
            self.metrics.on_front_door_error(endpoint, "classification_failed", 500, request.model)
            raise
        plan.endpoint = endpoint
        return body, plan

    async def chat(self, raw: bytes, headers: dict[str, str]) -> Response:
        started = time.perf_counter()
        _, plan = await self.plan_for(raw, headers)
        if plan.immediate is not None:
            return self._immediate(plan, started)
        if plan.stream:
            stream = await self._open_stream(plan)
            if not stream.ok and not stream.is_event_stream:
                return await self._error_document(plan, stream, started)
            return StreamingResponse(
                self._relay_chat_stream(plan, stream, started),
                status_code=stream.status,
                media_type="text/event-stream",
                headers={**SSE_HEADERS, **client_headers(plan, started),
                         "x-selected-model": stream.target.model},
            )
        response, report = await self._call(plan, started)
        if isinstance(response, Response):
            return response
        return JSONResponse(
            response,
            headers={**client_headers(plan, started),
                     "x-selected-model": response.get("routing_metadata", {}).get("selected_model")
                     or plan.selected_model or ""},
            background=self._after(plan, report),
        )

    def _immediate(self, plan: RoutePlan, started: float) -> Response:
        immediate = plan.immediate
        assert immediate is not None
        headers = {**client_headers(plan, started), **immediate.headers}
        after = self._after(plan, CompletionReport(
            status=immediate.status, model=plan.selected_model, response=None, stream=plan.stream,
            total_s=time.perf_counter() - started))
        if immediate.status != 200:
            return JSONResponse(immediate.body, status_code=immediate.status, headers=headers, background=after)
        if plan.stream:
            chunks = replay_as_sse(immediate.body)
            return StreamingResponse(_iterate(chunks), media_type="text/event-stream",
                                     headers={**SSE_HEADERS, **headers}, background=after)
        body = dict(immediate.body)
        body["routing_metadata"] = routing_metadata(plan, started)
        return JSONResponse(body, headers=headers, background=after)

    def _upstream_headers(self, plan: RoutePlan) -> dict[str, str]:
        return dict(plan.upstream_headers)

    async def _call(self, plan: RoutePlan, started: float) -> tuple[dict[str, Any] | Response, CompletionReport]:
        try:
            result = await self.upstream.complete(
                plan.candidates, plan.body, self._upstream_headers(plan), plan.reliability, plan.fallback
            )
        except UpstreamUnavailable as exc:
            self._spawn(self._complete_quietly(plan, CompletionReport(
                status=503, stream=False, error_reason=_error_reason(exc), total_s=time.perf_counter() - started)))
            raise from_upstream_unavailable(exc) from exc
        served = result.target.model
        payload = result.json_body
        report = CompletionReport(
            status=result.status, model=served, response=payload if result.status == 200 else None,
            stream=False, ttft_s=result.first_byte_s, total_s=result.total_s,
            error_reason=None if result.status < 400 else ("upstream_4xx" if result.status < 500 else "upstream_5xx"),
        )
        if result.status != 200 or not isinstance(payload, dict):
            # A non-retriable upstream answer (4xx) is relayed as the upstream gave it.
            content = result.content if payload is None else json.dumps(payload).encode()
            media_type = "application/json" if payload is not None else (
                result.headers.get("content-type", "application/json"))
            return Response(content, status_code=result.status, media_type=media_type,
                            headers=client_headers(plan, started),
                            background=self._after(plan, report)), report
        # Accounting (metrics, cache write, replay) runs after the answer is sent (the
        # caller attaches `_after`); the cost shown to the client is computed here from
        # the plan's pricing, off the Router hop.
        cost = compute_cost(payload.get("usage"), plan.pricing.get(served))
        plan_for_meta = plan.model_copy(update={"selected_model": served})
        payload["routing_metadata"] = routing_metadata(plan_for_meta, started, cost)
        return payload, report

    async def _open_stream(self, plan: RoutePlan) -> Any:
        body = dict(plan.body)
        # Ask for a final usage chunk so cost and TPOT can be computed for streams.
        options = dict(body.get("stream_options") or {})
        options.setdefault("include_usage", True)
        body["stream_options"] = options
        try:
            return await self.upstream.stream(
                plan.candidates, body, self._upstream_headers(plan), plan.reliability, plan.fallback
            )
        except UpstreamUnavailable as exc:
            self._spawn(self._complete_quietly(plan, CompletionReport(
                status=503, stream=True, error_reason=_error_reason(exc))))
            raise from_upstream_unavailable(exc) from exc

    async def _error_document(self, plan: RoutePlan, stream: Any, started: float) -> Response:
        """A stream request answered with an error document (a relayed 4xx, or the local 400
        for a request a messages-style backend cannot express): relayed as JSON, not SSE."""
        try:
            content = await stream.read()
        except UpstreamStreamError:
            content = b""
        finally:
            await stream.aclose()
        media_type = stream.headers.get("content-type", "application/json")
        try:
            json.loads(content)
            media_type = "application/json"
        except ValueError:
            pass
        report = CompletionReport(status=stream.status, model=stream.target.model, stream=True,
                                  stream_finished=False, total_s=time.perf_counter() - started)
        return Response(content, status_code=stream.status, media_type=media_type,
                        headers={**client_headers(plan, started), "x-selected-model": stream.target.model},
                        background=self._after(plan, report))

    async def _relay_chat_stream(self, plan: RoutePlan, stream: Any, started: float) -> AsyncIterator[bytes]:
        parser = SSEParser()
        accumulator = StreamAccumulator()
        first_chunk_at: float | None = None
        finished = False
        error_reason: str | None = "cancellation"  # the client went away mid-stream
        try:
            async for chunk in stream.aiter_bytes():
                if first_chunk_at is None:
                    first_chunk_at = time.perf_counter()
                for event in parser.feed(chunk):
                    accumulator.add(event)
                yield chunk
            # A whole answer: the chat stream completed (a finish_reason or [DONE], no error
            # chunk) and, for a translated (messages-style) stream, the translator's
            # `completed` (stop_reason/message_stop seen). Only such streams are cached.
            finished = accumulator.completed and stream.finished
            if not finished:  # ended cleanly, but with an error or cut short (None: from the status)
                error_reason = None if stream.status >= 400 else "upstream_5xx"
        except UpstreamStreamError as exc:
            # The upstream broke after the first byte: the client's stream just ends there.
            error_reason = "timeout" if exc.kind in ("idle_timeout", "deadline") else "upstream_5xx"
            log.warning("upstream stream for %s ended early: %s", plan.request_id, exc.kind)
        finally:
            await stream.aclose()
            if (error_reason == "cancellation" and stream.status == 200 and accumulator.completed
                    and stream.translation_completed):
                # The client left after the answer's [DONE] (the OpenAI SDK closes on it)
                # and before the upstream's body ended: the answer was whole.
                finished = True
            ended = time.perf_counter()
            report = CompletionReport(
                status=stream.status, model=stream.target.model,
                response=accumulator.to_chat_completion() if stream.status == 200 else None,
                stream=True, stream_finished=finished,
                ttft_s=None if first_chunk_at is None else first_chunk_at - started,
                total_s=ended - started,
                error_reason=None if finished else error_reason,
            )
            self._spawn(self._complete_quietly(plan, report))

    # ------------------------------------------------------------------ responses API
    async def responses(self, raw: bytes, headers: dict[str, str]) -> Response:
        try:
            request = ResponsesRequest.model_validate_json(raw)
            chat_body = responses_to_chat(request)
        except (ValueError, ResponsesInputError) as exc:
            self.metrics.on_front_door_error("responses", "parse_error", 400)
            message = str(exc) if isinstance(exc, ResponsesInputError) else _first_error(exc)
            raise bad_request(f"invalid Responses request: {message}") from exc
        chat_raw = json.dumps(chat_body).encode()
        started = time.perf_counter()
        _, plan = await self.plan_for(chat_raw, headers, endpoint="responses")
        if plan.immediate is not None:
            if plan.immediate.status != 200:
                return JSONResponse(plan.immediate.body, status_code=plan.immediate.status,
                                    headers=client_headers(plan, started))
            self._spawn(self._complete_quietly(plan, CompletionReport(status=200, stream=plan.stream)))
            completion = plan.immediate.body
            headers_out = {**client_headers(plan, started), **plan.immediate.headers}
            if plan.stream:
                return StreamingResponse(
                    _translate_replay(replay_as_sse(completion), request),
                    media_type="text/event-stream", headers={**SSE_HEADERS, **headers_out})
            return JSONResponse(chat_to_response(completion, request), headers=headers_out)
        if plan.stream:
            stream = await self._open_stream(plan)
            if not stream.ok and not stream.is_event_stream:
                return await self._error_document(plan, stream, started)
            return StreamingResponse(
                _translate_stream(self._relay_chat_stream(plan, stream, started), request),
                media_type="text/event-stream",
                headers={**SSE_HEADERS, **client_headers(plan, started)})
        response, report = await self._call(plan, started)
        if isinstance(response, Response):
            return response
        out = chat_to_response(response, request)
        out["routing_metadata"] = response.get("routing_metadata")
        return JSONResponse(out, headers=client_headers(plan, started),
                            background=self._after(plan, report))

    # ------------------------------------------------------------------ models
    def models(self) -> dict[str, Any]:
        config = self.config.current()
        created = int(time.time())
        names = [config.global_.router.auto_model_name]
        if config.global_.router.include_config_models_in_list:
            names += [m.name for m in config.providers.models]
        seen: list[str] = []
        for name in ["MoM", *names]:
            if name not in seen:
                seen.append(name)
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "created": created, "owned_by": "svc-sr"} for n in seen],
        }


async def _iterate(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def _translate_stream(chat_chunks: AsyncIterator[bytes], request: ResponsesRequest) -> AsyncIterator[bytes]:
    translator = ChatToResponsesStream(request)
    parser = SSEParser()
    async for chunk in chat_chunks:
        for event in parser.feed(chunk):
            for out in translator.feed(event):
                yield out
    for out in translator.finish():
        yield out


async def _translate_replay(chunks: list[bytes], request: ResponsesRequest) -> AsyncIterator[bytes]:
    async for out in _translate_stream(_iterate(chunks), request):
        yield out


def _error_reason(exc: UpstreamUnavailable) -> str:
    kinds = {getattr(a, "error", None) or "" for a in getattr(exc, "attempts", [])}
    return "timeout" if kinds & {"timeout", "deadline"} else "upstream_5xx"


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        items = errors()
        if items:
            loc = ".".join(str(p) for p in items[0].get("loc", ()))
            return f"{loc}: {items[0].get('msg')}" if loc else str(items[0].get("msg"))
    return str(exc)


def dataplane_router(plane: DataPlane) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await plane.chat(await request.body(), _headers(request))

    @router.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await plane.responses(await request.body(), _headers(request))

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        return plane.models()

    return router


def _headers(request: Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


__all__ = ["DataPlane", "RouterClient", "dataplane_router", "SvcError", "encode_done"]
