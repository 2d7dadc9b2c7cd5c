"""Both front doors' stream relays when the client leaves: after the answer's [DONE] (the
OpenAI SDK closes the connection on it, often before the upstream's body has ended) the answer
was whole and counts as finished (cost, cache write); before it, a cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

from app.api.dataplane import DataPlane
from app.exchange.client_api import ChatApi
from app.exchange.exchange import Exchange, ExchangeSettings, Forward
from app.pipeline.plan import CompletionReport
from tests.unit.exchange.test_exchange import RecordingRouter, chunk, raw


class HeldOpenStream:
    """An upstream stream that has sent `chunks` and not yet ended its body."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = False

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for part in self.chunks:
            yield part
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


async def relay_until_the_client_leaves(chunks: list[bytes]) -> tuple[CompletionReport, HeldOpenStream]:
    router = RecordingRouter()
    plane = DataPlane(router, upstream=None, config=None)  # type: ignore[arg-type]  # the relay only
    exchange = Exchange(ExchangeSettings(router), ChatApi())
    step = await exchange.begin(raw("urgent: stream", stream=True), {})
    assert isinstance(step, Forward)
    exchange.respond(200, httpx.Headers({"content-type": "text/event-stream"}), step.plan.candidates[0])
    stream = HeldOpenStream(chunks)
    relay: Any = plane._relay(exchange, stream)  # type: ignore[arg-type]
    for _ in chunks:
        await relay.__anext__()
    await relay.aclose()  # the client went away
    await plane.background.drain()
    [report] = router.reports
    return report, stream


async def test_a_client_leaving_after_done_leaves_a_finished_answer() -> None:
    report, stream = await relay_until_the_client_leaves(
        [chunk("all "), chunk("done", "stop"), b"data: [DONE]\n\n"]
    )
    assert stream.closed
    assert report.stream_finished and report.error_reason is None
    assert report.response is not None and report.response["choices"][0]["message"]["content"] == "all done"


async def test_a_client_leaving_mid_answer_is_a_cancellation() -> None:
    report, stream = await relay_until_the_client_leaves([chunk("half an ans")])
    assert stream.closed
    assert not report.stream_finished and report.error_reason == "cancellation"
