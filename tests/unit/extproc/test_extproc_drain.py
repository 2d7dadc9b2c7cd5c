"""ExtProcBridge.drain waits for open exchanges, not only for completions already started; an
exchange that ends without the body's last frame is finished when its [DONE] went through
(the OpenAI SDK closes on [DONE]) and a cancellation otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from app.extproc.bridge import ExtProcBridge
from tests.unit.exchange.test_exchange import RecordingRouter, chunk, raw


def headers(pairs: dict[str, str], end: bool = False) -> pb.HttpHeaders:
    values = [base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    return pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=values), end_of_stream=end)


async def _messages(items: list[pb.ProcessingRequest], release: asyncio.Event) -> AsyncIterator[Any]:
    for item in items:
        yield item
    await release.wait()  # the stream stays open until released (Envoy has not closed it)


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0)


async def test_drain_returns_only_after_every_open_exchange_has_closed() -> None:
    bridge = ExtProcBridge(router=RecordingRouter())
    first, second = asyncio.Event(), asyncio.Event()

    async def exchange(release: asyncio.Event) -> None:
        async for _ in bridge.Process(_messages([], release), context=None):
            pass

    streams = [asyncio.create_task(exchange(first)), asyncio.create_task(exchange(second))]
    await _until(lambda: bridge._open_exchanges == 2)
    drained = asyncio.create_task(bridge.drain())
    first.set()
    await _until(lambda: bridge._open_exchanges == 1)
    assert not drained.done()  # one exchange is still open
    second.set()
    await drained
    await asyncio.gather(*streams)


async def test_drain_with_nothing_open_returns_at_once() -> None:
    await ExtProcBridge(router=RecordingRouter()).drain()


async def _abandoned_stream(body: bytes) -> RecordingRouter:
    """A streamed answer whose ext_proc stream closes after `body`, without the body's end."""
    router = RecordingRouter()
    bridge = ExtProcBridge(router)
    items = [
        pb.ProcessingRequest(request_headers=headers({":method": "POST", ":path": "/v1/chat/completions"})),
        pb.ProcessingRequest(
            request_body=pb.HttpBody(body=raw("urgent: stream it", stream=True), end_of_stream=True)
        ),
        pb.ProcessingRequest(
            response_headers=headers({":status": "200", "content-type": "text/event-stream"})
        ),
        pb.ProcessingRequest(response_body=pb.HttpBody(body=body)),
    ]
    closed = asyncio.Event()
    closed.set()  # Envoy closes the stream right after the last message it sent
    answers = [answer async for answer in bridge.Process(_messages(items, closed), context=None)]
    assert [a.WhichOneof("response") for a in answers] == [
        "request_headers",
        "request_body",
        "response_headers",
        "response_body",
    ]
    await bridge.drain()
    return router


async def test_a_stream_whose_done_went_through_is_finished_when_the_client_closes_first() -> None:
    # The OpenAI SDK closes the connection once it reads [DONE]; Envoy then ends the exchange
    # without the body's last, empty frame. The answer was whole: cost and cache write count.
    router = await _abandoned_stream(chunk("all ") + chunk("done", "stop") + b"data: [DONE]\n\n")
    [report] = router.reports
    assert report.stream_finished and report.error_reason is None and report.status == 200
    assert report.response is not None and report.response["choices"][0]["message"]["content"] == "all done"


async def test_a_stream_cut_before_its_end_is_a_cancellation() -> None:
    router = await _abandoned_stream(chunk("half an ans"))
    [report] = router.reports
    assert not report.stream_finished and report.error_reason == "cancellation"


async def test_a_post_without_a_body_is_answered_400_at_its_headers() -> None:
    """Envoy sends no body message for a request whose headers end it: the bridge answers the
    empty body (400 malformed JSON) instead of letting Envoy forward it unrouted."""
    router = RecordingRouter()
    bridge = ExtProcBridge(router)
    items = [
        pb.ProcessingRequest(
            request_headers=headers({":method": "POST", ":path": "/v1/chat/completions"}, end=True)
        )
    ]
    closed = asyncio.Event()
    closed.set()
    answers = [answer async for answer in bridge.Process(_messages(items, closed), context=None)]
    assert [a.WhichOneof("response") for a in answers] == ["immediate_response"]
    assert answers[0].immediate_response.status.code == 400
    assert b"malformed JSON body" in answers[0].immediate_response.body
    assert router.reports == []  # nothing routed, nothing to complete
