"""GET /api/v1/observability/classification-metrics (app/management/classification_metrics.py):
counters and timing of requests routed through the in-process app, summed over the sources a
MetricsAggregator holds; 503 when nothing collects metrics or the source fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.management.classification_metrics import (
    MetricsReport,
    aggregator_report,
    bucket_quantile,
)
from app.observability.metrics import HistogramState, MetricsAggregator
from tests.fakes.upstream import FakeUpstream
from tests.unit.test_management_support import Harness, base_document


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="metrics", reply="fine") as fake:
        yield fake


def test_quantiles_are_the_upper_bound_of_the_bucket_holding_them() -> None:
    buckets = (0.01, 0.1, 1.0)
    state = HistogramState(bucket_counts=[50, 40, 9, 1], sum=5.0, count=100)
    assert bucket_quantile(state, buckets, 0.5) == 0.01
    assert bucket_quantile(state, buckets, 0.9) == 0.1
    assert bucket_quantile(state, buckets, 0.99) == 1.0
    assert bucket_quantile(state, buckets, 1.0) == 1.0  # the +Inf bucket reports the largest bound
    assert bucket_quantile(HistogramState(bucket_counts=[0, 0, 0, 0]), buckets, 0.5) is None


async def test_counters_and_timing_of_routed_requests_summed_over_sources(upstream: FakeUpstream) -> None:
    aggregator = MetricsAggregator()
    harness: Harness

    def report() -> MetricsReport:
        # the router's own recorder plus a second, idle replica
        aggregator.push(harness.pipeline.services.metrics.recorder.snapshot("router-1"))
        aggregator.push(MetricsAggregator().merged().model_copy(update={"source": "router-2"}))
        return aggregator_report(aggregator)

    harness = Harness(base_document(upstream.base_url), metrics=report)
    async with harness.client() as client:
        for text in ("what is the integral of x", "hello there", "an integral of sin x please"):
            answer = await client.post(
                "/v1/chat/completions", json={"model": "MoM", "messages": [{"role": "user", "content": text}]}
            )
            assert answer.status_code == 200
        response = await client.get("/api/v1/observability/classification-metrics")
    assert response.status_code == 200
    body = response.json()
    assert body["sources"] == 2
    timing = body["classification"]
    assert timing["count"] == 3 and timing["mean_ms"] > 0
    assert 0 < timing["p50_ms"] <= timing["p90_ms"] <= timing["p99_ms"]
    assert sum(body["requests_by_status"].values()) == 3 and body["requests_by_status"]["200"] == 3
    assert sum(body["routing_reason_codes"].values()) == 3


async def test_without_a_metrics_source_or_with_a_failing_one_the_route_answers_503() -> None:
    async with Harness().client() as client:
        response = await client.get("/api/v1/observability/classification-metrics")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "SERVICE_UNAVAILABLE"

    def broken() -> MetricsReport:
        raise ConnectionError("Observability replica restarting")

    async with Harness(metrics=broken).client() as client:
        response = await client.get("/api/v1/observability/classification-metrics")
    assert response.status_code == 503 and "ConnectionError" in response.json()["error"]["message"]
