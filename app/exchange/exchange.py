"""The exchange: one request's way from the client's bytes to the client's answer.

Both front doors drive the same object and only translate their transport:

    reply_or_forward = await exchange.begin(raw, headers)   # parse, route (the Router decides)
      Reply    -> send it: a block, a fast response, a cache hit, bad input, no backend
      Forward  -> the front door forwards `exchange.upstream_body` to the plan's candidates
                  (the Ingress with its upstream client and fallback, Envoy to the first one)
    head  = exchange.respond(status, headers, target)        # the upstream answered
    body  = await exchange.answer_body(raw)                  # buffered answer, or, streaming:
    bytes = exchange.stream_chunk(raw) ... exchange.stream_end()
    body  = await exchange.held_stream(raw)                  # a stream held whole (head.hold)
    exchange.close()                                         # always: a client that left counts
    await exchange.finish()                                  # completion, when the door chooses

Translation (the backend's wire, the client's API), routing headers and `routing_metadata`,
the completion report (cost, metrics, cache write, replay), the response-side plugins
(app/exchange/answer_checks.py) and the API-key gate (app/keys/gate.py) are decided here, once.
The completion runs when the front door calls `finish()`: the Ingress after the answer is sent,
the bridge as soon as the exchange knows it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.accounting.cost import compute_cost
from app.common.body_limits import DEFAULT_MAX_DEPTH, JsonRejected, decode_json
from app.common.errors import SvcError, body_too_large, from_upstream_unavailable, upstream_unavailable
from app.exchange import answer_checks
from app.exchange.answer import client_headers, routing_metadata
from app.exchange.client_api import ClientApi
from app.exchange.openai_schemas import json_rejected
from app.exchange.relay import StreamRelay
from app.exchange.request_trace import RequestTrace
from app.exchange.steps import JSON, Forward, Reply, ResponseHead, RouterClient
from app.keys.gate import Admission, KeyGate
from app.pipeline.metrics import RouterMetrics
from app.pipeline.pii_mask import StreamRestorer, restore_completion
from app.pipeline.plan import Accounting, CompletionReport, RoutePlan
from app.upstream.results import UpstreamUnavailable
from app.upstream.sse import replay_as_sse
from app.upstream.targets import UpstreamTarget
from app.upstream.wire import ChatWire, UpstreamWire, json_object, wire_for

log = logging.getLogger("svc_sr.exchange")

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
EVENT_STREAM = "text/event-stream"


@dataclass
class ExchangeSettings:
    """`max_body_bytes`: requests over it answer 413 (None: the transport enforces it).
    `max_json_depth`: a body nested deeper answers 400 (app/common/body_limits.py).
    `reaches`: the candidates this front door can forward to (None: all); behind Envoy an
    in-cluster model is reached only through its HTTP backend_refs. `keys`: the API-key gate
    (app/keys/gate.py), asked before routing, settled after the completion."""

    router: RouterClient
    metrics: RouterMetrics = field(default_factory=RouterMetrics)
    max_body_bytes: int | None = None
    max_json_depth: int = DEFAULT_MAX_DEPTH
    clock: Callable[[], float] = time.perf_counter
    reaches: Callable[[UpstreamTarget], bool] | None = None
    keys: KeyGate | None = None


class Exchange:
    def __init__(self, settings: ExchangeSettings, api: ClientApi) -> None:
        self.settings = settings
        self.api = api
        self.started = settings.clock()
        self.request_id = ""
        self.requested_model: str | None = None
        self.plan: RoutePlan | None = None
        self.target: UpstreamTarget | None = None
        self.status = 0
        self.relay: StreamRelay | None = None
        self._wire: UpstreamWire | None = None
        self._upstream_body: dict[str, Any] | None = None
        self._upstream_type = JSON  # the upstream answer's content type
        self._head_at: float | None = None
        self._report: CompletionReport | None = None
        self._done = False  # the outcome is known (a report is due, or nothing is to complete)
        self.trace: RequestTrace | None = None  # the request's spans (begin() opens them)
        self.admission: Admission | None = None  # the request's API key, once its cost is reserved

    # ------------------------------------------------------------------ request
    async def begin(self, raw: bytes, headers: Mapping[str, str]) -> Reply | Forward:
        """Parse and route. Errors a client caused answer here (with their metrics); anything
        else raises, for the front door's own failure policy (and its own count of it)."""
        self.request_id = headers.get("x-request-id") or uuid.uuid4().hex
        self.trace = RequestTrace(headers, self.api.endpoint, self.request_id)
        try:
            admission = await self.settings.keys.admit(headers) if self.settings.keys else None
        except SvcError as exc:  # no key, an unknown or revoked one, its rate limit or budget
            return self._refuse(exc, "unknown")
        self.api.owner = admission.record.id if admission is not None else None
        try:
            body = await self._parse(raw)
        except SvcError as exc:
            return self._refuse(exc, "parse_error")
        model = body.get("model")
        self.requested_model = model if isinstance(model, str) else None
        try:
            keys = self.settings.keys
            grant = admission.grant if admission is not None else keys.listener_grant() if keys else None
            plan = await self.settings.router.route(
                body, self.trace.route_headers(headers), self.request_id, grant, self.api.tie
            )
        except SvcError as exc:  # unknown model, a model not granted, nothing to route to
            return self._refuse(exc, "unknown" if exc.status < 500 else "classification_failed", model)
        except BaseException:
            self.trace.end(500, "routing_failed")
            raise
        plan.endpoint = self.api.endpoint
        self.plan = plan
        self.api.routed(plan.selected_model)
        self.trace.routed(plan)
        if plan.immediate is not None:
            return self._immediate(plan)
        if self.settings.reaches is not None:
            plan.candidates = [t for t in plan.candidates if self.settings.reaches(t)]
        if not plan.candidates:
            return self._no_backend(plan)
        if admission is not None:
            try:  # held on the key's budgets until finish() settles the real cost
                self.admission = await admission.reserve(plan.pricing, plan.selected_model, plan.body)
            except SvcError as exc:
                return self._refuse(exc, "unknown", model)
        return Forward(plan, self.upstream_body)

    async def _parse(self, raw: bytes) -> dict[str, Any]:
        limit = self.settings.max_body_bytes
        if limit is not None and len(raw) > limit:
            raise body_too_large(limit)
        try:
            document = decode_json(raw, self.settings.max_json_depth)
        except JsonRejected as exc:
            raise json_rejected(exc) from None
        await self.api.prepare(document)  # a stored conversation (previous_response_id)
        return self.api.parse(document)

    @property
    def upstream_body(self) -> dict[str, Any]:
        """The plan's body; a stream asks for a final usage chunk (cost and TPOT for streams too)."""
        if self._upstream_body is None:
            plan = self._plan()
            body = dict(plan.body)
            if plan.stream:
                options = dict(body.get("stream_options") or {})
                options.setdefault("include_usage", True)
                body["stream_options"] = options
            self._upstream_body = body
        return self._upstream_body

    def _refuse(self, exc: SvcError, reason: str, model: Any = None) -> Reply:
        """An error answered before anything was routed: counted here, no completion."""
        self._done = True
        self._end_trace(exc.status)
        self._count_error(reason, exc.status, model if isinstance(model, str) else None)
        return Reply(
            exc.status, {"x-request-id": self.request_id, **exc.headers}, json.dumps(exc.body()).encode()
        )

    def _count_error(self, reason: str, status: int, model: str | None = None) -> None:
        self.settings.metrics.on_front_door_error(self.api.endpoint, reason, status, model or "unknown")

    # ------------------------------------------------------------------ answers without a backend
    def _immediate(self, plan: RoutePlan) -> Reply:
        answer = plan.immediate
        assert answer is not None
        headers = {**client_headers(plan, self.started), **answer.headers}
        if plan.selected_model:
            headers["x-selected-model"] = plan.selected_model
        content_type = JSON
        if answer.status != 200:
            body = json.dumps(answer.body).encode()
        elif plan.stream:
            content_type = EVENT_STREAM
            headers.update(SSE_HEADERS)
            client = self.api.stream()
            body = b"".join(client.feed(chunk) for chunk in replay_as_sse(answer.body)) + client.finish()
        else:
            completion = dict(answer.body)
            completion["routing_metadata"] = routing_metadata(plan, self.started)
            body = json.dumps(self.api.render(completion)).encode()
        self.status = answer.status
        self._settle(
            CompletionReport(
                status=answer.status, model=plan.selected_model, stream=plan.stream, total_s=self._elapsed()
            )
        )
        return Reply(answer.status, headers, body, content_type)

    def _no_backend(self, plan: RoutePlan) -> Reply:
        error = upstream_unavailable(message="no backend serves the selected model")
        self._done = True
        self._end_trace(error.status)
        self._count_error("unknown", error.status, plan.selected_model)
        return Reply(
            error.status,
            {**client_headers(plan, self.started), **error.headers},
            json.dumps(error.body()).encode(),
        )

    def upstream_failed(self, exc: UpstreamUnavailable) -> Reply:
        """Every attempt failed (the Ingress's client): 503, or 504 when each timed out."""
        plan = self._plan()
        error = from_upstream_unavailable(exc)
        kinds = {getattr(a, "error", None) or "" for a in exc.attempts}
        reason = "timeout" if kinds & {"timeout", "deadline"} else "upstream_5xx"
        self.status = error.status
        tried = exc.attempts[-1].model if exc.attempts else plan.selected_model  # as Envoy: the one it tried
        self._settle(
            CompletionReport(
                status=error.status,
                model=tried,
                stream=plan.stream,
                error_reason=reason,
                total_s=self._elapsed(),
            )
        )
        return Reply(
            error.status,
            {**client_headers(plan, self.started), **error.headers},
            json.dumps(error.body()).encode(),
        )

    def refused_by_wire(self, status: int, body: dict[str, Any], target: UpstreamTarget) -> Reply:
        """The backend's protocol cannot express the request (400): answered without forwarding."""
        self.target = target
        self.status = status
        self._settle(self._completion(None, finished=False, reason="parse_error"))
        headers = {**client_headers(self._plan(), self.started), "x-selected-model": target.model}
        return Reply(status, headers, json.dumps(body).encode())

    # ------------------------------------------------------------------ the upstream's answer
    def respond(
        self,
        status: int,
        headers: Mapping[str, str],
        target: UpstreamTarget,
        local: bool = False,
        first_byte_at: float | None = None,
    ) -> ResponseHead:
        """`local`: the answer was made by the upstream client itself (already chat).
        `first_byte_at`: when the upstream's first byte came (default: now)."""
        plan = self._plan()
        self.status, self.target = status, target
        self.api.routed(target.model)  # a fallback answered: the stored answer is that model's
        self._head_at = first_byte_at if first_byte_at is not None else self.settings.clock()
        self._wire = None if local else wire_for(target)
        self._upstream_type = headers.get("content-type") or JSON
        streaming = EVENT_STREAM in self._upstream_type.lower()
        out = {**client_headers(plan, self.started), "x-selected-model": target.model}
        hold = streaming and status == 200 and plan.answer_checks is not None
        if streaming:
            if self.trace is not None:
                self.trace.streaming(plan, target.model)
            out.update({"content-type": EVENT_STREAM, **SSE_HEADERS})
            asked = bool((self.upstream_body.get("stream_options") or {}).get("include_usage"))
            translator = (
                self._wire.stream_translator(target, asked)
                if self._wire is not None and status < 400
                else None
            )
            restorer = StreamRestorer(plan.pii_mask) if plan.pii_mask else None
            self.relay = StreamRelay(translator, self.api.stream(), self.settings.clock, restorer)
        elif status == 200 or (self._wire is not None and not isinstance(self._wire, ChatWire)):
            out["content-type"] = JSON  # a translated answer is chat JSON; a chat error page keeps its type
        return ResponseHead(status, out, streaming, hold)

    def stream_chunk(self, raw: bytes) -> bytes:
        return self._relay().feed(raw)

    def stream_end(self) -> bytes:
        """The upstream body ended normally."""
        relay = self._relay()
        tail = relay.end()
        finished = self.status < 400 and relay.completed
        # ended, but cut short or with an error
        reason = None if finished or self.status >= 400 else "upstream_5xx"
        self._settle(self._completion(None, finished=finished, reason=reason))
        return tail

    def stream_broken(self, kind: str) -> bytes:
        """The upstream broke after its first byte: the bytes that end the client's stream (an
        error event and [DONE]); counted as the upstream's failure, no cache write. A break
        after the whole answer went through (the body's end was lost) is a finished answer."""
        relay = self._relay()
        if relay.completed:
            return self.stream_end()
        log.warning("upstream stream for %s ended early: %s", self.request_id, kind)
        reason = "timeout" if kind in ("idle_timeout", "deadline") else "upstream_5xx"
        tail = relay.broken(f"the upstream stream broke off before the answer was complete ({kind})")
        self._settle(self._completion(None, finished=False, reason=reason))
        return tail

    def whole_body(self, raw: bytes) -> Reply:
        """A buffered answer, translated to chat and to the client's API. Its status may differ
        from the upstream's (a messages backend's success that is no message: 502). No answer
        checks: `answer_body` runs them."""
        answer = self._whole(raw)
        if isinstance(answer, Reply):
            return answer
        payload, headers = answer
        self._settle(self._completion(payload))
        return Reply(200, headers, json.dumps(self.api.render(self._restored(payload))).encode())

    async def answer_body(self, raw: bytes) -> Reply:
        """`whole_body`, with the plan's answer checks (header, annotate or block)."""
        answer = self._whole(raw)
        if isinstance(answer, Reply):
            return answer
        payload, headers = answer
        if self._plan().answer_checks is None:
            self._settle(self._completion(payload))
            return Reply(200, headers, json.dumps(self.api.render(self._restored(payload))).encode())
        return await self._checked(payload, headers, stream=False)

    async def held_stream(self, raw: bytes) -> Reply:
        """A stream read whole for its answer checks: relayed to the chat accumulator, checked,
        then sent as one event stream (the answer replayed as chunks) or blocked (403 JSON).
        A stream that broke off is relayed as it came, with its error end."""
        relay = self._relay()
        out = relay.feed(raw)
        out += relay.end()
        headers = {**client_headers(self._plan(), self.started), "x-selected-model": self._target().model}
        headers.update({"content-type": EVENT_STREAM, **SSE_HEADERS})
        if not relay.completed:
            out += relay.broken("the upstream stream broke off before the answer was complete")
            self._settle(self._completion(None, finished=False, reason="upstream_5xx"))
            return Reply(self.status, headers, out, EVENT_STREAM)
        return await self._checked(relay.accumulator.to_chat_completion(), headers, stream=True)

    async def _checked(self, payload: dict[str, Any], headers: dict[str, str], stream: bool) -> Reply:
        plan = self._plan()
        checks = plan.answer_checks
        assert checks is not None
        verdict = await answer_checks.ask(self.settings.router.check_answer, checks, plan.body, payload)
        summary = verdict.summary()
        headers.update(answer_checks.warning_headers(verdict))
        report = self._completion(payload)
        report.response_checks = {**summary, "flagged": bool(summary["flagged"])}
        if verdict.action == "block":
            error = answer_checks.blocked(verdict)
            self.status = report.status = error.status
            report.error_reason = "response_blocked"
            report.response = payload  # its usage and cost still count; never cached
            self._settle(report)
            headers["content-type"] = JSON
            for name in SSE_HEADERS:
                headers.pop(name, None)
            return Reply(error.status, {**headers, **error.headers}, json.dumps(error.body()).encode())
        self._settle(report)
        if verdict.action == "annotate":
            payload = json.loads(json.dumps(payload))  # the report keeps the answer as it came
            answer_checks.annotate(payload, verdict)
        payload = self._restored(payload)
        if not stream:
            payload.setdefault("routing_metadata", {})["response_checks"] = summary
            return Reply(200, headers, json.dumps(self.api.render(payload)).encode())
        client = self.api.stream()
        body = b"".join(client.feed(chunk) for chunk in replay_as_sse(payload)) + client.finish()
        return Reply(200, headers, body, EVENT_STREAM)

    def _whole(self, raw: bytes) -> Reply | tuple[dict[str, Any], dict[str, str]]:
        """The answer as chat JSON with routing_metadata and its headers, or the error Reply."""
        plan = self._plan()
        target = self._target()
        status, content = (
            (self.status, raw) if self._wire is None else self._wire.answer(self.status, raw, target)
        )
        headers = {**client_headers(plan, self.started), "x-selected-model": target.model}
        payload = json_object(content)
        if status != 200 or payload is None:
            self.status = status
            # A request the client refused locally never reached a backend: the client's input.
            self._settle(self._completion(None, reason="parse_error" if self._wire is None else None))
            return Reply(status, headers, content, JSON if payload is not None else self._upstream_type)
        cost = compute_cost(payload.get("usage"), plan.pricing.get(target.model))
        payload["routing_metadata"] = routing_metadata(
            plan.model_copy(update={"selected_model": target.model}), self.started, cost
        )
        return payload, headers

    def end_without_body(self) -> None:
        """The upstream's response had a head and no body."""
        self._settle(self._completion(None))

    def close(self) -> None:
        """The front door is done with this request. A streamed answer not yet settled was cut
        off by the client, unless the whole answer had gone through (the OpenAI SDK closes on
        [DONE], often before the upstream's body ends): then it is a finished answer."""
        if self._done or self.plan is None:
            return
        relay = self.relay
        if relay is not None and self.status == 200 and relay.completed:
            self._settle(self._completion(None, finished=True))
            return
        self.status = self.status or 499
        self._settle(self._completion(None, finished=False, reason="cancellation"))

    # ------------------------------------------------------------------ completion
    @property
    def completion_due(self) -> bool:
        return self._report is not None

    async def finish(self) -> Accounting | None:
        """Run the completion (cost, metrics, cache write, replay) once; never raises."""
        report, self._report = self._report, None
        if report is None or self.plan is None:
            return None
        accounting = None
        try:
            accounting = await self.settings.router.complete(self.plan, report)
        except Exception:  # accounting must never break a served answer
            log.exception("complete() failed for request %s", self.request_id)
        if self.admission is not None:  # the real cost replaces the estimate
            await self.admission.settle(accounting.cost if accounting else None)
        return accounting

    def _settle(self, report: CompletionReport) -> None:
        if self._done:
            return
        self._done, self._report = True, report
        self._end_trace(report.status, report.error_reason)

    def _end_trace(self, status: int, reason: str | None = None) -> None:
        if self.trace is not None:
            decision = self.plan.decision if self.plan else None
            self.trace.end(status, reason, decision, self.target.model if self.target else None)

    def _completion(
        self, response: dict[str, Any] | None, finished: bool = True, reason: str | None = None
    ) -> CompletionReport:
        plan = self._plan()
        status = self.status or 502
        if reason is None and status >= 400:
            reason = "upstream_4xx" if status < 500 else "upstream_5xx"
        streaming = self.relay is not None
        if streaming and status == 200:
            response = self.relay.accumulator.to_chat_completion() if self.relay is not None else response
        first = self.relay.first_chunk_at if self.relay is not None else self._head_at
        if status >= 400:
            first = None  # an error answer has no first token (an Envoy local reply has no upstream byte)
        return CompletionReport(
            status=status,
            model=self.target.model if self.target is not None else plan.selected_model,
            response=response if status == 200 else None,
            stream=streaming,
            stream_finished=finished,
            ttft_s=None if first is None else first - self.started,
            total_s=self._elapsed(),
            error_reason=reason,
        )

    # ------------------------------------------------------------------ helpers
    def _restored(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The client's copy of an answer: a masked request's originals back in (pii_mask.py)."""
        mask = self._plan().pii_mask
        return restore_completion(payload, mask) if mask else payload

    def _elapsed(self) -> float:
        return self.settings.clock() - self.started

    def _plan(self) -> RoutePlan:
        if self.plan is None:
            raise RuntimeError("the exchange has no plan yet")
        return self.plan

    def _target(self) -> UpstreamTarget:
        if self.target is None:
            raise RuntimeError("the exchange has no upstream answer yet")
        return self.target

    def _relay(self) -> StreamRelay:
        if self.relay is None:
            raise RuntimeError("the upstream answer is not a stream")
        return self.relay
