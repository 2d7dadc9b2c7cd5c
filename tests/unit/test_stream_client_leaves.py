"""The front door's stream relay when the client leaves: after the answer's [DONE] (the OpenAI
SDK closes the connection on it, often before the upstream's body has ended) the answer was
whole and counts as finished (cost, cache write); before it, a cancellation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from app.api.dataplane import DataPlane
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.plan import CompletionReport, RoutePlan
from tests.unit.test_replay_recording import body, config


class RecordingRouter:
    def __init__(self) -> None:
        self.reports: list[CompletionReport] = []

    async def complete(self, plan: RoutePlan, report: CompletionReport) -> None:
        self.reports.append(report)


class HeldOpenStream:
    """An upstream stream that has sent `chunks` and not yet ended its body."""

    status, finished, translation_completed = 200, False, True
    target = SimpleNamespace(model="small")

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = False

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


def chunk(content: str, finish: str | None = None) -> bytes:
    delta = {"id": "c", "object": "chat.completion.chunk", "model": "small",
             "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}
    return f"data: {json.dumps(delta)}\n\n".encode()


async def relay_until_the_client_leaves(chunks: list[bytes]) -> tuple[CompletionReport, HeldOpenStream]:
    router = RecordingRouter()
    plane = DataPlane(router, upstream=None, config=None)  # type: ignore[arg-type]
    plan = await RouterPipeline(config(None), PipelineServices()).route(body("urgent: stream"), {}, "r")
    stream = HeldOpenStream(chunks)
    relay: Any = plane._relay_chat_stream(plan, stream, started=0.0)
    for _ in chunks:
        await relay.__anext__()
    await relay.aclose()  # the client went away
    await plane.background.drain()
    [report] = router.reports
    return report, stream


async def test_a_client_leaving_after_done_leaves_a_finished_answer() -> None:
    report, stream = await relay_until_the_client_leaves(
        [chunk("all "), chunk("done", "stop"), b"data: [DONE]\n\n"])
    assert stream.closed
    assert report.stream_finished and report.error_reason is None
    assert report.response is not None and report.response["choices"][0]["message"]["content"] == "all done"


async def test_a_client_leaving_mid_answer_is_a_cancellation() -> None:
    report, stream = await relay_until_the_client_leaves([chunk("half an ans")])
    assert stream.closed
    assert not report.stream_finished and report.error_reason == "cancellation"
