"""Metric recording, cross-source aggregation, exposition and the router's metric hooks."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from app.config.loader import parse_config
from app.observability.exposition import MetricsHTTPServer
from app.observability.metrics import MetricsAggregator, MetricsRecorder, MetricsSnapshot, UnknownMetric
from app.observability.push import LoopMetricsPusher, MetricsPusher
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.plan import CompletionReport


def test_counters_sum_over_sources_and_histograms_merge() -> None:
    a, b = MetricsRecorder(), MetricsRecorder()
    a.inc("llm_model_requests_total", model="m1")
    a.inc("llm_model_requests_total", model="m1")
    b.inc("llm_model_requests_total", model="m1")
    b.inc("llm_model_requests_total", model="m2")
    a.observe("llm_model_ttft_seconds", 0.02, model="m1")
    b.observe("llm_model_ttft_seconds", 7.0, model="m1")
    agg = MetricsAggregator()
    agg.push(a.snapshot("a"))
    agg.push(b.snapshot("b"))
    agg.push(b.snapshot("b"))  # a repeated push of cumulative state changes nothing
    assert agg.value("llm_model_requests_total", model="m1") == 3
    assert agg.value("llm_model_requests_total", model="m2") == 1
    text = agg.render()
    assert 'llm_model_requests_total{model="m1"} 3' in text
    assert 'llm_model_ttft_seconds_bucket{model="m1",le="0.025"} 1' in text
    assert 'llm_model_ttft_seconds_bucket{model="m1",le="10"} 2' in text
    assert 'llm_model_ttft_seconds_bucket{model="m1",le="+Inf"} 2' in text
    assert 'llm_model_ttft_seconds_count{model="m1"} 2' in text
    assert "# TYPE llm_model_ttft_seconds histogram" in text


def test_recorder_rejects_wrong_labels_unknown_names_and_negative_counts() -> None:
    r = MetricsRecorder()
    with pytest.raises(ValueError):
        r.inc("llm_model_requests_total", wrong="x")
    with pytest.raises(UnknownMetric):
        r.inc("no_such_metric_total")
    with pytest.raises(ValueError):
        r.inc("llm_model_requests_total", -1, model="m")


def test_label_values_are_escaped_and_hit_ratio_is_derived() -> None:
    r = MetricsRecorder()
    r.inc("llm_model_requests_total", model='we"ird\nname')
    r.inc("svc_router_cache_lookups_total", result="hit")
    r.inc("svc_router_cache_lookups_total", result="miss")
    r.inc("svc_router_cache_lookups_total", result="miss")
    r.inc("svc_router_cache_lookups_total", result="miss")
    agg = MetricsAggregator()
    agg.push(r.snapshot("x"))
    text = agg.render()
    assert 'model="we\\"ird\\nname"' in text
    assert "svc_router_cache_hit_ratio 0.25" in text


def test_pusher_sends_only_changes_and_survives_failures() -> None:
    r = MetricsRecorder()
    agg = MetricsAggregator()
    sent: list[int] = []
    fail = {"on": True}

    def send(snapshot: MetricsSnapshot) -> None:
        if fail["on"]:
            raise ConnectionError("aggregator down")
        sent.append(1)
        agg.push(snapshot)

    pusher = MetricsPusher(r, send, "replica-1", interval_s=0.01)
    r.inc("llm_model_requests_total", model="m")
    assert pusher.flush() is False  # failed: retried later, nothing lost
    fail["on"] = False
    assert pusher.flush() is True
    assert pusher.flush() is True  # unchanged: not sent again
    assert len(sent) == 1
    r.inc("llm_model_requests_total", model="m")
    pusher.start()
    for _ in range(200):
        if agg.value("llm_model_requests_total", model="m") == 2:
            break
        time.sleep(0.01)
    pusher.stop()
    assert agg.value("llm_model_requests_total", model="m") == 2


def test_loop_pusher_pushes_on_the_event_loop_and_survives_failures() -> None:
    """The handle-friendly pusher: async sends on the caller's loop, never from another thread."""
    r = MetricsRecorder()
    agg = MetricsAggregator()
    fail = {"on": True}
    threads: set[int] = set()

    async def send(snapshot: MetricsSnapshot) -> None:
        threads.add(threading.get_ident())
        if fail["on"]:
            raise ConnectionError("aggregator down")
        agg.push(snapshot)

    async def scenario() -> None:
        pusher = LoopMetricsPusher(r, send, "replica-1", interval_s=0.01)
        r.inc("llm_model_requests_total", model="m")
        assert await pusher.flush() is False
        fail["on"] = False
        pusher.start()
        r.inc("llm_model_requests_total", model="m")
        for _ in range(200):
            if agg.value("llm_model_requests_total", model="m") == 2:
                break
            await asyncio.sleep(0.01)
        r.inc("llm_model_requests_total", model="m")
        await pusher.stop()  # the last change is flushed on stop

    asyncio.run(scenario())
    assert agg.value("llm_model_requests_total", model="m") == 3
    assert threads == {threading.get_ident()}


def test_http_exposition_serves_metrics_and_rejects_other_paths() -> None:
    agg = MetricsAggregator()
    r = MetricsRecorder()
    r.inc("svc_router_pii_detections_total", action="block")
    agg.push(r.snapshot("s"))
    server = MetricsHTTPServer(agg.render, port=0).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        ok = httpx.get(f"{base}/metrics")
        assert ok.status_code == 200
        assert ok.headers["content-type"].startswith("text/plain")
        assert 'svc_router_pii_detections_total{action="block"} 1' in ok.text
        assert httpx.get(f"{base}/other").status_code == 404
        assert httpx.post(f"{base}/metrics").status_code == 405
    finally:
        server.stop()


CONFIG = {
    "version": "v0.3",
    "providers": {
        "defaults": {
            "default_model": "b",
            "reasoning_families": {"qwen3": {"type": "chat_template_kwargs", "parameter": "enable_thinking"}},
        },
        "models": [
            {
                "name": "a",
                "reasoning_family": "qwen3",
                "pricing": {"currency": "EUR", "prompt_per_1m": 1_000_000, "completion_per_1m": 2_000_000},
                "backend_refs": [{"endpoint": "127.0.0.1:9"}],
            },
            {"name": "b", "backend_refs": [{"endpoint": "127.0.0.1:9"}]},
        ],
    },
    "routing": {
        "signals": {"keywords": [{"name": "m", "operator": "OR", "keywords": ["integral"]}]},
        "decisions": [
            {
                "name": "math",
                "priority": 1,
                "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "m"}]},
                "modelRefs": [{"model": "a", "use_reasoning": True, "reasoning_effort": "high"}],
            }
        ],
    },
}


async def test_pipeline_records_spec_metrics_for_a_request_mix() -> None:
    services = PipelineServices()
    pipeline = RouterPipeline(parse_config(CONFIG).config, services)
    rec = services.metrics.recorder
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}], "usage": usage}

    routed = await pipeline.route({"model": "MoM", "messages": [{"role": "user", "content": "an integral"}]})
    await pipeline.complete(
        routed, CompletionReport(status=200, model="a", response=answer, ttft_s=0.1, total_s=0.3)
    )
    explicit = await pipeline.route({"model": "b", "messages": [{"role": "user", "content": "hi"}]})
    explicit.endpoint = "responses"
    await pipeline.complete(explicit, CompletionReport(status=503, model="b", error_reason="upstream_5xx"))

    assert (
        rec.value("svc_router_requests_total", endpoint="chat_completions", category="math", status=200) == 1
    )
    assert rec.value("svc_router_requests_total", endpoint="responses", category="none", status=503) == 1
    assert rec.value("llm_model_requests_total", model="a") == 1
    assert rec.value("llm_routing_reason_codes_total", reason_code="auto_routing", model="a") == 1
    assert rec.value("llm_routing_reason_codes_total", reason_code="model_specified", model="b") == 1
    assert rec.value("llm_request_errors_total", model="b", reason="upstream_5xx") == 1
    assert rec.value("llm_model_cost_total", model="a", currency="EUR") == pytest.approx(3 + 4)
    assert (
        rec.value("llm_reasoning_decisions_total", category="math", model="a", enabled="true", effort="high")
        == 1
    )
    assert rec.value("llm_reasoning_template_usage_total", family="qwen3", param="enable_thinking") == 1
    assert rec.value("llm_reasoning_effort_usage_total", family="qwen3", effort="high") == 1
    agg = MetricsAggregator()
    agg.push(rec.snapshot("r"))
    text = agg.render()
    assert 'llm_model_ttft_seconds_count{model="a"} 1' in text
    assert 'llm_model_tpot_seconds_count{model="a"} 1' in text


async def test_preview_records_nothing() -> None:
    services = PipelineServices()
    pipeline = RouterPipeline(parse_config(CONFIG).config, services)
    await pipeline.preview({"model": "MoM", "messages": [{"role": "user", "content": "an integral"}]})
    assert services.metrics.recorder.version == 0
