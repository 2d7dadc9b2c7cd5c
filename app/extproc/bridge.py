"""The Envoy ext_proc front door: one gRPC `Process` stream per HTTP request.

An adapter of the exchange (app/exchange/exchange.py), which decides every answer. This
module hosts the streams (the gRPC servicer, failure policy, drain); app/extproc/stream.py
translates one request's messages:

    request headers  -> APIs other than chat/responses pass untouched
    request body     -> Exchange.begin: a Reply becomes an immediate response; a routed request
                        becomes the rewritten body, headers and `:path` for the plan's first
                        candidate, with clear_route_cache so Envoy re-picks the route by
                        `x-selected-model` (Envoy forwards to that one backend)
    response headers -> Exchange.respond (STREAMED mode for an event stream)
    response body    -> Exchange.whole_body (buffered) or stream_chunk/stream_end (SSE)
    stream closed    -> Exchange.close; the completion runs in the background

An error inside one stream never stops the server: `failure_mode` "open" lets the request
continue unmodified, "closed" answers 503 (the Envoy filter's own `failure_mode_allow`
covers the bridge being unreachable).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pbg
from pydantic import BaseModel, Field

from app.common.background import BackgroundTasks
from app.common.body_limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_DEPTH, HARD_MAX_DEPTH, MIN_MAX_DEPTH
from app.exchange.exchange import ExchangeSettings, RouterClient
from app.exchange.responses.images import ResolveImageFile
from app.extproc.stream import ExtProcStream
from app.keys.gate import KeyGate
from app.llm.addressing import is_in_cluster
from app.pipeline.metrics import RouterMetrics

log = logging.getLogger("svc_sr.extproc")


class BridgeSettings(BaseModel):
    failure_mode: Literal["open", "closed"] = "closed"
    clear_route_cache: bool = True
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    max_json_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=MIN_MAX_DEPTH, le=HARD_MAX_DEPTH)


class ExtProcBridge(pbg.ExternalProcessorServicer):
    def __init__(
        self,
        router: RouterClient,
        settings: BridgeSettings | None = None,
        metrics: RouterMetrics | None = None,
        images: ResolveImageFile | None = None,
        keys: KeyGate | None = None,
    ) -> None:
        """`keys`: the API-key gate (app/keys/gate.py), the Ingress's rules over the same stores."""
        self.settings = settings or BridgeSettings()
        # Responses input_image file ids: the files store, where this process reaches one
        # (None: such a part answers 400).
        self.images = images
        self.exchange_settings = ExchangeSettings(
            router,
            metrics or RouterMetrics(),
            self.settings.max_body_bytes,
            self.settings.max_json_depth,
            # Envoy forwards to HTTP clusters: an in-cluster model's engine is the Ingress's to call.
            reaches=lambda target: not is_in_cluster(target.base_url),
            keys=keys,
        )
        self._background = BackgroundTasks()
        self._open_exchanges = 0
        self._no_open_exchange = asyncio.Event()
        self._no_open_exchange.set()

    @property
    def metrics(self) -> RouterMetrics:
        return self.exchange_settings.metrics

    async def Process(  # noqa: N802 (the gRPC method name)
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: Any
    ) -> AsyncIterator[pb.ProcessingResponse]:
        stream = ExtProcStream(self)
        self._open_exchanges += 1
        self._no_open_exchange.clear()
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("request")
                try:
                    response = await stream.handle(kind, request)
                except Exception:
                    log.exception("ext_proc %s failed (request %s)", kind, stream.request_id)
                    response = stream.on_failure(kind)
                stream.complete_if_due()
                yield response
        finally:
            stream.close()
            self._open_exchanges -= 1
            if not self._open_exchanges:
                self._no_open_exchange.set()

    def spawn(self, coro: Any) -> None:
        self._background.spawn(coro)

    async def drain(self) -> None:
        """Wait until no exchange is open and every completion it started has run (shutdown,
        tests). Open exchanges count: a client can read a stream's [DONE] (sent on the
        upstream's last event) before Envoy hands the bridge the end of the body, and only
        then does the exchange complete."""
        await self._no_open_exchange.wait()
        await self._background.drain()
