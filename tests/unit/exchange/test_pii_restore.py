"""A masked request through the exchange (no HTTP): the client's answer has the originals
back, whole and streamed, for a chat and a messages-style backend, while what the door hands
to complete() (the cache write, the replay record) holds only placeholders."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.exchange.client_api import ChatApi, ResponsesApi
from app.exchange.exchange import Exchange, ExchangeSettings, Forward
from app.pipeline.plan import CompletionReport
from tests.fakes.pipeline_router import PipelineRouter
from tests.unit.pipeline.test_pii_actions import Stores, pipeline

ASK = "mail ana@example.org and bo@example.net the notes"


async def begin(router: PipelineRouter, api: Any = None, stream: bool = False) -> tuple[Exchange, Forward]:
    exchange = Exchange(ExchangeSettings(router), api or ChatApi())
    body = {"model": "MoM", "messages": [{"role": "user", "content": ASK}], "stream": stream}
    if isinstance(api, ResponsesApi):
        body = {"model": "MoM", "input": ASK, "stream": stream}
    step = await exchange.begin(json.dumps(body).encode(), {})
    assert isinstance(step, Forward)
    assert "ana@example.org" not in json.dumps(step.body) and "<EMAIL_ADDRESS_1>" in json.dumps(step.body)
    return exchange, step


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "cloud",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\n".encode()


REPLY = "Sent to <EMAIL_ADDRESS_1> and <EMAIL_ADDRESS_2>."
RESTORED = "Sent to ana@example.org and bo@example.net."


def finished(router: PipelineRouter) -> CompletionReport:
    assert len(router.reports) == 1
    report = router.reports[0]
    assert (
        "ana@example.org" not in report.model_dump_json() and "<EMAIL_ADDRESS_1>" in report.model_dump_json()
    )
    return report


async def test_a_whole_answer_is_restored_for_the_client_only() -> None:
    router = PipelineRouter(pipeline("mask", Stores()))
    exchange, step = await begin(router)
    exchange.respond(200, {"content-type": "application/json"}, step.plan.candidates[0])
    answer = {"id": "x", "object": "chat.completion", "model": "cloud",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}]}  # fmt: skip
    reply = await exchange.answer_body(json.dumps(answer).encode())
    assert json.loads(reply.body)["choices"][0]["message"]["content"] == RESTORED
    assert reply.headers["x-vsr-pii-action"] == "mask"
    await exchange.finish()
    finished(router)


@pytest.mark.parametrize("api", [ChatApi(), ResponsesApi()], ids=["chat", "responses"])
async def test_a_stream_split_inside_placeholders_is_restored(api: Any) -> None:
    router = PipelineRouter(pipeline("mask", Stores()))
    exchange, step = await begin(router, api, stream=True)
    head = exchange.respond(200, {"content-type": "text/event-stream"}, step.plan.candidates[0])
    assert head.streaming
    wire = chat_chunk({"role": "assistant", "content": ""})
    wire += b"".join(chat_chunk({"content": REPLY[i : i + 4]}) for i in range(0, len(REPLY), 4))
    wire += chat_chunk({}, "stop") + b"data: [DONE]\n\n"
    out = b"".join(exchange.stream_chunk(wire[i : i + 7]) for i in range(0, len(wire), 7))
    out += exchange.stream_end()
    text = out.decode()
    assert "EMAIL_ADDRESS" not in text
    deltas = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    if isinstance(api, ChatApi):
        got = "".join(c["choices"][0]["delta"].get("content") or "" for c in deltas if c.get("choices"))
    else:
        got = "".join(e.get("delta", "") for e in deltas if e.get("type") == "response.output_text.delta")
    assert got == RESTORED
    await exchange.finish()
    report = finished(router)
    assert report.response is not None and report.response["choices"][0]["message"]["content"] == REPLY
