"""An OTLP/HTTP trace receiver on 127.0.0.1, built on the official OTLP protobuf definitions
(opentelemetry-proto): `POST /v1/traces` takes an `ExportTraceServiceRequest`
(application/x-protobuf) as a collector does, answers an `ExportTraceServiceResponse`, and
keeps every span it was sent, decoded, for a test to read (`spans`, `trace`, `wait_for`).

No registry package ships the OpenTelemetry Collector as a binary usable offline, so tests
export to this instead; what it parses is the exporter's real wire format.

Standalone: python -m tests.fakes.otlp --port 4318
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.fakes.served import ServedApp

PROTOBUF = "application/x-protobuf"
SERVER_KIND = 2  # opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_SERVER
CLIENT_KIND = 3


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error


@dataclass
class ReceiverBehavior:
    fail_status: int | None = None  # answer every export with this status (a collector that is down)


@dataclass
class _Store:
    spans: list[ReceivedSpan] = field(default_factory=list)
    exports: int = 0
    refused: int = 0  # exports answered with fail_status


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def decode(raw: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(raw)
    out: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes={kv.key: _value(kv.value) for kv in span.attributes},
                        resource=resource,
                        status_code=span.status.code,
                    )
                )
    return out


class OTLPReceiver(ServedApp):
    def __init__(self, port: int = 0, **behavior: Any) -> None:
        super().__init__("otlp", "", port, ReceiverBehavior(**behavior))
        self._store = _Store()
        self.app = self._build_app()

    def reset(self) -> None:
        with self._lock:
            self._store = _Store()

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._store.spans)

    @property
    def refused(self) -> int:
        return self._store.refused

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(
        self, condition: Callable[[list[ReceivedSpan]], bool], timeout: float = 20.0
    ) -> list[ReceivedSpan]:
        """The spans once `condition(spans)` holds (a bounded poll); raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans
            if condition(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted({s.name for s in spans})
                raise TimeoutError(f"the receiver's {len(spans)} spans ({names}) never met the condition")
            time.sleep(0.02)

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/traces")
        async def traces(request: Request) -> Response:
            if self.behavior.fail_status is not None:
                with self._lock:
                    self._store.refused += 1
                return Response(status_code=self.behavior.fail_status)
            if request.headers.get("content-type", "").split(";")[0] != PROTOBUF:
                return Response("OTLP/HTTP takes application/x-protobuf here", status_code=415)
            spans = decode(await request.body())
            with self._lock:
                self._store.spans.extend(spans)
                self._store.exports += 1
            return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)

        return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args(argv)
    receiver = OTLPReceiver(port=args.port)
    uvicorn.run(receiver.app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
