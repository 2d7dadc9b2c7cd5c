"""The exchange on its own (no HTTP, no Envoy): what it answers and what it completes.

The same object serves both front doors, so these cases hold for both; the contract test
(tests/contract) sends every scenario through the two real doors."""

from __future__ import annotations

import json
from typing import Any

from app.exchange.client_api import ChatApi, ResponsesApi
from app.exchange.exchange import Exchange, ExchangeSettings, Forward, Reply
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.metrics import RouterMetrics
from app.pipeline.plan import ImmediateResponse, RoutePlan
from tests.fakes.pipeline_router import PipelineRouter
from tests.unit.replays.test_replay_recording import body, config


class RecordingRouter(PipelineRouter):
    """Routes with the in-process pipeline (or answers `immediate`), records completions."""

    def __init__(self, immediate: ImmediateResponse | None = None, no_candidates: bool = False) -> None:
        super().__init__(RouterPipeline(config(None), PipelineServices()))
        self.immediate = immediate
        self.no_candidates = no_candidates

    def edit(self, plan: RoutePlan) -> RoutePlan:
        if self.immediate is not None:
            plan.immediate = self.immediate
        if self.no_candidates:
            plan.candidates = []
        return plan


def chunk(content: str, finish: str | None = None) -> bytes:
    delta = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "small",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
    }
    return f"data: {json.dumps(delta)}\n\n".encode()


def raw(text: str, **extra: Any) -> bytes:
    return json.dumps({**body(text), **extra}).encode()


BLOCK = ImmediateResponse(
    kind="block",
    status=403,
    headers={"x-vsr-pii-violation": "true"},
    body={"error": {"message": "blocked", "type": "security_violation", "code": "pii_detected"}},
)


async def streaming_exchange(router: RecordingRouter) -> Exchange:
    exchange = Exchange(ExchangeSettings(router), ChatApi())
    step = await exchange.begin(raw("urgent: stream it", stream=True), {})
    assert isinstance(step, Forward)
    assert step.body["stream_options"] == {"include_usage": True}  # usage -> cost for streams too
    target = step.plan.candidates[0]
    head = exchange.respond(200, {"content-type": "text/event-stream"}, target)
    assert head.streaming and head.headers["x-selected-model"] == "small"
    return exchange


async def test_a_client_leaving_after_done_leaves_a_finished_answer() -> None:
    # The OpenAI SDK closes the connection once it reads [DONE], often before the upstream's
    # body ends: the answer was whole, so its cost and cache write count.
    router = RecordingRouter()
    exchange = await streaming_exchange(router)
    for part in (chunk("all "), chunk("done", "stop"), b"data: [DONE]\n\n"):
        assert exchange.stream_chunk(part) == part  # a chat stream passes through unchanged
    exchange.close()
    await exchange.finish()
    [report] = router.reports
    assert report.stream and report.stream_finished and report.error_reason is None and report.status == 200
    assert report.response is not None and report.response["choices"][0]["message"]["content"] == "all done"


async def test_a_client_leaving_mid_answer_is_a_cancellation() -> None:
    router = RecordingRouter()
    exchange = await streaming_exchange(router)
    exchange.stream_chunk(chunk("half an ans"))
    exchange.close()
    await exchange.finish()
    [report] = router.reports
    assert not report.stream_finished and report.error_reason == "cancellation"


async def test_a_stream_that_ends_without_its_finish_is_counted_as_an_upstream_failure() -> None:
    router = RecordingRouter()
    exchange = await streaming_exchange(router)
    exchange.stream_chunk(chunk("cut"))
    exchange.stream_end()
    exchange.close()  # settled already: closing changes nothing
    await exchange.finish()
    await exchange.finish()  # the completion runs once
    [report] = router.reports
    assert not report.stream_finished and report.error_reason == "upstream_5xx"


async def test_an_upstream_breaking_mid_stream_ends_the_clients_stream_with_an_error_event() -> None:
    router = RecordingRouter()
    exchange = await streaming_exchange(router)
    exchange.stream_chunk(chunk("half an ans"))
    tail = exchange.stream_broken("reset")
    events = [e.removeprefix(b"data: ") for e in tail.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]"
    error = json.loads(events[0])["error"]
    assert error["type"] == "upstream_error" and "broke off" in error["message"]
    assert exchange.stream_chunk(chunk("late")) == b""  # nothing after the error event
    exchange.close()
    await exchange.finish()
    [report] = router.reports
    assert not report.stream_finished and report.error_reason == "upstream_5xx"


async def test_a_break_after_the_whole_answer_is_a_finished_answer() -> None:
    router = RecordingRouter()
    exchange = await streaming_exchange(router)
    exchange.stream_chunk(chunk("all done", "stop"))
    assert b"error" not in exchange.stream_broken("reset")
    await exchange.finish()
    [report] = router.reports
    assert report.stream_finished and report.error_reason is None


async def test_a_responses_stream_cut_by_its_upstream_ends_with_response_failed() -> None:
    router = RecordingRouter()
    exchange = Exchange(ExchangeSettings(router), ResponsesApi())
    step = await exchange.begin(
        json.dumps({"model": "MoM", "input": "urgent: stream", "stream": True}).encode(), {}
    )
    assert isinstance(step, Forward)
    exchange.respond(200, {"content-type": "text/event-stream"}, step.plan.candidates[0])
    exchange.stream_chunk(chunk("half"))
    tail = exchange.stream_broken("idle_timeout")
    assert b"event: response.failed" in tail and b"response.completed" not in tail
    await exchange.finish()
    [report] = router.reports
    assert report.error_reason == "timeout"


async def test_a_blocked_responses_request_keeps_its_headers_and_is_completed() -> None:
    router = RecordingRouter(immediate=BLOCK)
    exchange = Exchange(ExchangeSettings(router), ResponsesApi())
    reply = await exchange.begin(
        json.dumps({"model": "MoM", "input": "urgent: my card is 4111"}).encode(), {}
    )
    assert isinstance(reply, Reply) and reply.status == 403
    assert reply.headers["x-vsr-pii-violation"] == "true" and "x-request-id" in reply.headers
    assert json.loads(reply.body)["error"]["code"] == "pii_detected"
    await exchange.finish()
    [report] = router.reports
    assert report.status == 403 and report.stream is False


async def test_a_plan_without_backend_answers_503_with_retry_after() -> None:
    metrics = RouterMetrics()
    exchange = Exchange(ExchangeSettings(RecordingRouter(no_candidates=True), metrics), ChatApi())
    reply = await exchange.begin(raw("urgent: hello"), {})
    assert isinstance(reply, Reply) and reply.status == 503 and reply.headers["Retry-After"] == "1"
    assert json.loads(reply.body)["error"]["code"] == "upstream_unavailable"
    assert not exchange.completion_due


async def test_bad_input_answers_400_and_counts_a_parse_error() -> None:
    router = RecordingRouter()
    exchange = Exchange(ExchangeSettings(router), ChatApi())
    reply = await exchange.begin(b'{"model": "MoM"}', {"x-request-id": "given"})
    assert isinstance(reply, Reply) and reply.status == 400 and reply.headers["x-request-id"] == "given"
    assert json.loads(reply.body)["error"]["type"] == "invalid_request_error"
    assert not exchange.completion_due and router.reports == []


async def test_a_buffered_answer_gets_routing_metadata_with_its_cost() -> None:
    router = RecordingRouter()
    exchange = Exchange(ExchangeSettings(router), ChatApi())
    step = await exchange.begin(raw("urgent: price it"), {})
    assert isinstance(step, Forward)
    exchange.respond(200, {"content-type": "application/json"}, step.plan.candidates[0])
    answer = {
        "id": "x",
        "object": "chat.completion",
        "model": "small",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 0, "total_tokens": 1_000_000},
    }
    reply = exchange.whole_body(json.dumps(answer).encode())
    meta = json.loads(reply.body)["routing_metadata"]
    assert reply.status == 200 and meta["selected_model"] == "small" and meta["cost"] == 1.0
    await exchange.finish()
    [report] = router.reports
    assert report.status == 200 and report.response is not None and report.stream is False


async def test_a_responses_request_is_answered_as_a_response_object() -> None:
    router = RecordingRouter()
    exchange = Exchange(ExchangeSettings(router), ResponsesApi())
    step = await exchange.begin(json.dumps({"model": "MoM", "input": "urgent: hi"}).encode(), {})
    assert isinstance(step, Forward)
    exchange.respond(200, {"content-type": "application/json"}, step.plan.candidates[0])
    answer = {
        "id": "x",
        "object": "chat.completion",
        "model": "small",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
        ],
    }
    out = json.loads(exchange.whole_body(json.dumps(answer).encode()).body)
    assert out["object"] == "response" and out["routing_metadata"]["selected_model"] == "small"
