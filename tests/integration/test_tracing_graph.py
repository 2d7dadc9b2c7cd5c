"""Tracing over the real Ray graph: an application of its own in the session's Ray instance
(keyword routing, tracing on, exporting to an OTLP/HTTP receiver on 127.0.0.1), a stream sent
with the OpenAI SDK under a client traceparent. Its spans arrive as ONE trace although they come
from different processes: the Ingress replica (request, upstream attempt, stream, completion,
cache store) and a Router replica (route, signal, decision, cache lookup): the Ray hops are
linked by the carriers the request takes across them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml

from tests.fakes.otlp import OTLPReceiver, ReceivedSpan
from tests.integration.conftest import Stack, _wait_ready

pytestmark = pytest.mark.integration

APP, PREFIX = "traced", "/traced"


@pytest.fixture(scope="module")
def traced(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, OTLPReceiver]]:
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    with OTLPReceiver() as receiver:
        document = {
            "version": "v0.3",
            "providers": {"models": [{"name": "model-a", "backend_refs": [{"base_url": stack.upstream_a.host_url}]}]},
            "routing": {
                "signals": {"keywords": [{"name": "traced", "operator": "OR", "keywords": ["tracetest"]}]},
                "decisions": [
                    {
                        "name": "traced",
                        "rules": {"type": "keyword", "name": "traced"},
                        "modelRefs": [{"model": "model-a"}],
                        "plugins": [{"type": "semantic-cache", "configuration": {"enabled": True}}],
                    }
                ],
            },
            "global": {
                "services": {
                    "observability": {
                        "tracing": {"enabled": True, "exporter": {"endpoint": receiver.host_url}}
                    }
                }
            },
        }  # fmt: skip
        path = Path(tmp_path_factory.mktemp("traced"), "traced.yaml")
        path.write_text(yaml.safe_dump(document))
        serve.run(
            build_app(GraphArgs(config_path=str(path), metrics={"enabled": False}, decision_model=False)),
            name=APP,
            route_prefix=PREFIX,
        )
        try:
            _wait_ready(f"{stack.base_url}{PREFIX}/health")
            yield f"{stack.base_url}{PREFIX}/v1", receiver
        finally:
            serve.delete(APP)


def test_a_stream_through_the_graph_is_one_trace_across_the_ray_hops(
    traced: tuple[str, OTLPReceiver], stack: Stack
) -> None:
    url, receiver = traced
    trace_id, client_span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    client = openai.OpenAI(base_url=url, api_key="k", max_retries=0, timeout=60)
    with client.chat.completions.with_streaming_response.create(
        model="MoM",
        messages=[{"role": "user", "content": "tracetest: name a prime number"}],
        stream=True,
        extra_headers={"traceparent": f"00-{trace_id}-{client_span}-01"},
    ) as response:
        assert response.http_response.status_code == 200
        assert b"[DONE]" in response.read()
    parts = {
        "svc_sr.request",
        "svc_sr.route",
        "svc_sr.signal",
        "svc_sr.decision",
        "svc_sr.cache.lookup",
        "svc_sr.upstream.attempt",
        "svc_sr.stream",
        "svc_sr.complete",
        "svc_sr.cache.store",
    }

    def arrived(spans: list[ReceivedSpan]) -> bool:
        return parts <= {s.name for s in spans if s.trace_id == trace_id}

    spans = [s for s in receiver.wait_for(arrived, timeout=60) if s.trace_id == trace_id]
    by_name = {s.name: s for s in spans}
    request, route = by_name["svc_sr.request"], by_name["svc_sr.route"]
    assert request.parent_span_id == client_span
    assert route.parent_span_id == request.span_id  # across the Ingress -> Router hop
    assert request.resource["svc_sr.process"] == "ingress" and route.resource["svc_sr.process"] == "router"
    assert by_name["svc_sr.decision"].resource["svc_sr.process"] == "router"
    assert by_name["svc_sr.complete"].parent_span_id == request.span_id
    assert by_name["svc_sr.upstream.attempt"].parent_span_id == request.span_id
    sent = stack.upstream_a.requests[-1].headers["traceparent"].split("-")
    assert sent[1] == trace_id and sent[2] == by_name["svc_sr.upstream.attempt"].span_id
