"""Tracing through the OpenAI SDK on both front doors (the Ingress, and Envoy with the ext_proc
bridge): with `global.services.observability.tracing` on, a streamed request under the client's
W3C traceparent arrives at a real OTLP/HTTP receiver on 127.0.0.1 (tests/fakes/otlp.py) as ONE
trace: the front door's request span, the route with each signal, the decision and the cache
lookup, each upstream attempt (the Ingress's client, fallback included), the stream, and the
completion with its cache store; the upstream receives the trace as traceparent.

The harness runs both doors over one in-process pipeline, so what crosses the Ray hops in the
graph (the headers route() gets, the plan's trace_context for complete()) crosses here as the
same carriers; tests/integration/test_tracing_graph.py runs it over real Ray hops."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.common import tracing
from app.config.loader import parse_config
from app.observability.tracing import configure_tracing
from tests.contract.answers import sdk, user
from tests.contract.conftest import DOORS, INGRESS, FrontDoors, Upstreams
from tests.fakes.otlp import OTLPReceiver, ReceivedSpan


@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as served:
        yield served


def traced_document(up: Upstreams, receiver: OTLPReceiver) -> dict[str, Any]:
    def decision(name: str, word: str, models: list[str], **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "rules": {"type": "keyword", "name": word},
            "modelRefs": [{"model": m} for m in models],
            "plugins": [{"type": "semantic-cache", "configuration": {"enabled": True}}],
            **extra,
        }

    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "chat"},
            "models": [
                {"name": "chat", "backend_refs": [{"base_url": up.chat.host_url}]},
                {"name": "dead", "backend_refs": [{"base_url": up.dead_url}]},
            ],
        },
        "routing": {
            "signals": {
                "keywords": [
                    {"name": "traced", "operator": "OR", "keywords": ["tracetest"]},
                    {"name": "fallback", "operator": "OR", "keywords": ["falltest"]},
                ]
            },
            "decisions": [
                decision("traced", "traced", ["chat"]),
                decision(
                    "fallback", "fallback", ["dead", "chat"], fallback={"enabled": True, "max_attempts": 2}
                ),
            ],
        },
        "global": {
            "services": {
                "observability": {
                    "tracing": {
                        "enabled": True,
                        "exporter": {"type": "otlp", "endpoint": receiver.host_url},
                        "sampling": {"type": "always_on"},
                    }
                }
            }
        },
    }


@pytest.fixture(scope="module")
def doors(
    front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams, receiver: OTLPReceiver
) -> Iterator[FrontDoors]:
    document = traced_document(upstreams, receiver)
    # what each replica and the sidecar do at start (deployments/ingress.py, router.py, extproc_sidecar.py)
    configure_tracing(parse_config(document).config.global_.services.observability.tracing, "contract")
    yield front_doors(document)
    tracing.shutdown_tracing()


def ask_traced(url: str, text: str, trace_id: str, parent: str) -> str:
    headers = {"traceparent": f"00-{trace_id}-{parent}-01"}
    with sdk(url).chat.completions.with_streaming_response.create(
        model="MoM", messages=user(text), stream=True, extra_headers=headers
    ) as response:
        assert response.http_response.status_code == 200
        return response.read().decode()


def spans_of(receiver: OTLPReceiver, trace_id: str, names: set[str]) -> dict[str, list[ReceivedSpan]]:
    tracing.flush_tracing()

    def arrived(spans: list[ReceivedSpan]) -> bool:
        return names <= {s.name for s in spans if s.trace_id == trace_id}

    receiver.wait_for(arrived)
    out: dict[str, list[ReceivedSpan]] = {}
    for span in receiver.spans:
        if span.trace_id == trace_id:
            out.setdefault(span.name, []).append(span)
    return out


PARTS = {
    "svc_sr.request",
    "svc_sr.route",
    "svc_sr.signal",
    "svc_sr.decision",
    "svc_sr.cache.lookup",
    "svc_sr.stream",
    "svc_sr.complete",
    "svc_sr.cache.store",
}


@pytest.mark.parametrize("door", DOORS)
def test_a_streamed_request_is_one_trace_under_the_clients_traceparent(
    doors: FrontDoors, upstreams: Upstreams, receiver: OTLPReceiver, door: str
) -> None:
    upstreams.reset()
    doors.forget()
    trace_id, client_span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    body = ask_traced(doors.url(door), f"tracetest: what is {door}?", trace_id, client_span)
    assert "[DONE]" in body
    doors.settle(door)
    expected = PARTS | ({"svc_sr.upstream.attempt"} if door == INGRESS else set())
    spans = spans_of(receiver, trace_id, expected)
    (request,) = spans["svc_sr.request"]
    (route,) = spans["svc_sr.route"]
    (complete,) = spans["svc_sr.complete"]
    (stream,) = spans["svc_sr.stream"]
    assert request.parent_span_id == client_span and request.kind == 2
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["svc_sr.decision"] == "traced"
    assert route.parent_span_id == request.span_id
    assert route.attributes["svc_sr.selected_model"] == "chat"
    assert [s.attributes["svc_sr.signal.family"] for s in spans["svc_sr.signal"]] == ["keyword"]
    assert spans["svc_sr.signal"][0].parent_span_id == route.span_id
    assert spans["svc_sr.decision"][0].parent_span_id == route.span_id
    assert spans["svc_sr.decision"][0].attributes["svc_sr.decision"] == "traced"
    (lookup,) = spans["svc_sr.cache.lookup"]
    assert lookup.parent_span_id == route.span_id and lookup.attributes["svc_sr.cache.status"] == "miss"
    assert stream.parent_span_id == request.span_id
    assert complete.parent_span_id == request.span_id
    (store,) = spans["svc_sr.cache.store"]
    assert store.parent_span_id == complete.span_id and store.attributes["svc_sr.cache.stored"] is True
    # the upstream was handed the trace: under the attempt (Ingress) or the request (Envoy)
    sent = upstreams.chat.requests[-1].headers["traceparent"].split("-")
    assert sent[1] == trace_id
    if door == INGRESS:
        (attempt,) = spans["svc_sr.upstream.attempt"]
        assert attempt.parent_span_id == request.span_id and attempt.kind == 3
        assert attempt.attributes["svc_sr.model"] == "chat" and attempt.attributes["svc_sr.fallback"] is False
        assert sent[2] == attempt.span_id
    else:
        assert sent[2] == request.span_id


def test_each_upstream_attempt_is_a_span_fallback_included(
    doors: FrontDoors, upstreams: Upstreams, receiver: OTLPReceiver
) -> None:
    upstreams.reset()
    doors.forget()
    trace_id, client_span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    ask_traced(doors.url(INGRESS), "falltest: which planet is largest?", trace_id, client_span)
    doors.settle(INGRESS)
    # a fallback model's answer is not cached (its partition promises the selected model's)
    spans = spans_of(receiver, trace_id, (PARTS - {"svc_sr.cache.store"}) | {"svc_sr.upstream.attempt"})
    attempts = spans["svc_sr.upstream.attempt"]
    assert len(attempts) == 2
    by_order = sorted(attempts, key=lambda a: a.attributes["svc_sr.attempt"])
    assert [a.attributes["svc_sr.model"] for a in by_order] == ["dead", "chat"]
    assert [a.attributes["svc_sr.fallback"] for a in by_order] == [False, True]
    assert by_order[0].status_code == 2 and by_order[1].status_code != 2
    assert upstreams.chat.requests[-1].headers["traceparent"].split("-")[2] == by_order[1].span_id
