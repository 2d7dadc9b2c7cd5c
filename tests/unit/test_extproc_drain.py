"""ExtProcBridge.drain waits for open exchanges, not only for completions already started; an
exchange that ends without the body's last frame is finished when its [DONE] went through
(the OpenAI SDK closes on [DONE]) and a cancellation otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from envoy.service.ext_proc.v3.external_processor_pb2 import HttpBody

from app.extproc.bridge import ExtProcBridge, _Exchange
from app.pipeline import PipelineServices, RouterPipeline
from tests.unit.test_replay_recording import body, config
from tests.unit.test_stream_client_leaves import RecordingRouter, chunk


async def _held_open(release: asyncio.Event) -> AsyncIterator[Any]:
    await release.wait()
    return
    yield  # an async generator that sends nothing until released


async def test_drain_returns_only_after_every_open_exchange_has_closed() -> None:
    bridge = ExtProcBridge(router=object())  # type: ignore[arg-type]  # no request reaches it
    first, second = asyncio.Event(), asyncio.Event()

    async def exchange(release: asyncio.Event) -> None:
        async for _ in bridge.Process(_held_open(release), context=None):
            pass

    streams = [asyncio.create_task(exchange(first)), asyncio.create_task(exchange(second))]
    await asyncio.sleep(0.01)
    drained = asyncio.create_task(bridge.drain())
    await asyncio.sleep(0.05)
    assert not drained.done()
    first.set()
    await asyncio.sleep(0.05)
    assert not drained.done()  # one exchange is still open
    second.set()
    await asyncio.wait_for(drained, timeout=2)
    await asyncio.gather(*streams)


async def test_drain_with_nothing_open_returns_at_once() -> None:
    await asyncio.wait_for(ExtProcBridge(router=object()).drain(), timeout=1)  # type: ignore[arg-type]


# ---------------------------------------------------------------- abandoned exchanges

async def _streaming_exchange(router: RecordingRouter) -> _Exchange:
    pipeline = RouterPipeline(config(None), PipelineServices())
    exchange = _Exchange(ExtProcBridge(router))  # type: ignore[arg-type]
    exchange.plan = await pipeline.route(body("urgent: stream it"), {}, "req-s")
    exchange.streaming, exchange.status = True, 200
    return exchange


async def test_a_stream_whose_done_went_through_is_finished_when_the_client_closes_first() -> None:
    # The OpenAI SDK closes the connection once it reads [DONE]; Envoy then ends the exchange
    # without the body's last, empty frame. The answer was whole: cost and cache write count.
    router = RecordingRouter()
    exchange = await _streaming_exchange(router)
    exchange.on_response_body(HttpBody(body=chunk("all ") + chunk("done", "stop") + b"data: [DONE]\n\n"))
    exchange.finish_abandoned()
    await exchange.bridge.drain()
    [report] = router.reports
    assert report.stream_finished and report.error_reason is None and report.status == 200
    assert report.response is not None and report.response["choices"][0]["message"]["content"] == "all done"


async def test_a_stream_cut_before_its_end_is_a_cancellation() -> None:
    router = RecordingRouter()
    exchange = await _streaming_exchange(router)
    exchange.on_response_body(HttpBody(body=chunk("half an ans")))
    exchange.finish_abandoned()
    await exchange.bridge.drain()
    [report] = router.reports
    assert not report.stream_finished and report.error_reason == "cancellation"
