"""Tracing on its own (app/observability/tracing.py): off is OpenTelemetry's no-op tracer and
exports nothing; on, spans reach a real OTLP/HTTP receiver on 127.0.0.1 (tests/fakes/otlp.py,
the official protobuf definitions) under the client's traceparent; sampling is honoured."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.trace import NoOpTracer

from app.common import tracing
from app.config.global_config import TracingConfig
from app.observability.tracing import configure_tracing
from tests.fakes.otlp import OTLPReceiver

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def traceparent(sampled: bool = True) -> dict[str, str]:
    return {"Traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-{'01' if sampled else '00'}"}


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as served:
        yield served
    tracing.shutdown_tracing()


def on(receiver: OTLPReceiver, timeout_s: float = 10.0, **sampling: object) -> None:
    settings = TracingConfig.model_validate(
        {
            "enabled": True,
            "exporter": {"endpoint": receiver.host_url, "timeout_s": timeout_s},
            "sampling": sampling or {},
        }
    )
    configure_tracing(settings, "test")


def test_off_is_the_no_op_tracer_and_carries_nothing() -> None:
    configure_tracing(TracingConfig(), "test")
    assert isinstance(tracing.tracer(), NoOpTracer) and not tracing.enabled()
    with tracing.span("x", parent=traceparent()) as span:
        assert not span.is_recording()
        carrier: dict[str, str] = {}
        tracing.inject(carrier, span)
        assert carrier == {}


def test_spans_reach_the_receiver_under_the_clients_trace(receiver: OTLPReceiver) -> None:
    on(receiver)
    with tracing.span(
        "outer", parent=traceparent(), kind=tracing.SpanKind.SERVER, attributes={"a": 1, "b": None}
    ):
        carrier: dict[str, str] = {}
        tracing.inject(carrier)
        with tracing.span("inner", parent=carrier):
            pass
    assert tracing.flush_tracing()
    spans = {s.name: s for s in receiver.wait_for(lambda got: len(got) == 2)}
    outer, inner = spans["outer"], spans["inner"]
    assert outer.trace_id == inner.trace_id == CLIENT_TRACE
    assert outer.parent_span_id == CLIENT_SPAN and inner.parent_span_id == outer.span_id
    assert outer.attributes == {"a": 1} and outer.kind == 2
    assert outer.resource["service.name"] == "svc-sr" and outer.resource["svc_sr.process"] == "test"
    assert carrier["traceparent"].split("-")[1:3] == [CLIENT_TRACE, outer.span_id]


def test_an_exception_marks_the_span_failed(receiver: OTLPReceiver) -> None:
    on(receiver)
    with pytest.raises(RuntimeError), tracing.span("boom"):
        raise RuntimeError("x")
    tracing.flush_tracing()
    (span,) = receiver.wait_for(lambda got: len(got) == 1)
    assert span.status_code == 2


def test_always_off_exports_no_root_but_follows_a_sampled_client(receiver: OTLPReceiver) -> None:
    on(receiver, type="always_off")
    with tracing.span("root"):
        pass
    with tracing.span("unsampled child", parent=traceparent(sampled=False)):
        pass
    with tracing.span("sampled child", parent=traceparent()):
        pass
    tracing.flush_tracing()
    assert [s.name for s in receiver.wait_for(lambda got: len(got) >= 1)] == ["sampled child"]


def test_probabilistic_sampling_keeps_about_its_rate(receiver: OTLPReceiver) -> None:
    on(receiver, type="probabilistic", rate=0.25)
    for index in range(400):
        with tracing.span(f"s{index}"):
            pass
    tracing.flush_tracing()
    kept = len(receiver.spans)
    assert 60 <= kept <= 140, kept  # 100 expected; trace ids are random (binomial sd ~8.7)


def test_a_collector_that_is_down_never_fails_the_caller(receiver: OTLPReceiver) -> None:
    receiver.configure(fail_status=503)
    on(receiver, timeout_s=0.5)  # the exporter's retries end within it
    with tracing.span("lost"):
        pass
    tracing.flush_tracing(timeout_s=2)
    assert receiver.spans == [] and receiver.refused >= 1  # the export was tried, and lost
