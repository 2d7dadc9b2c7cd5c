"""GET /api/v1/observability/classification-metrics (app/replays/classification_metrics.py):
counters and timing of requests routed through the in-process app, summed over the sources a
MetricsAggregator holds; 404 FEATURE_DISABLED when nothing collects metrics, 503 when the
source fails."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.observability.metrics import HistogramState, MetricsAggregator
from app.replays.classification_metrics import (
    MetricsReport,
    aggregator_report,
    bucket_quantile,
)
from tests.fakes.upstream import FakeUpstream
from tests.unit.management.test_management_support import Harness, base_document, with_auth


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


@pytest.mark.slow
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


@pytest.mark.slow
async def test_without_a_metrics_source_404_and_with_a_failing_one_503() -> None:
    async with Harness().client() as client:
        response = await client.get("/api/v1/observability/classification-metrics")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "FEATURE_DISABLED"

    def broken() -> MetricsReport:
        raise ConnectionError("Observability replica restarting")

    async with Harness(metrics=broken).client() as client:
        response = await client.get("/api/v1/observability/classification-metrics")
    assert response.status_code == 503 and "ConnectionError" in response.json()["error"]["message"]


def signal_document(base_url: str) -> dict[str, Any]:
    """base_document plus a second keyword rule and an embedding rule, which fails in a process
    without an embedding service: keyword matches and misses, embedding errors."""
    document = base_document(base_url)
    document["routing"]["signals"]["keywords"].append({"name": "greet_kw", "keywords": ["hello"]})
    document["routing"]["signals"]["embeddings"] = [{"name": "near_math", "candidates": ["calculus"]}]
    conditions = [{"type": "keyword", "name": "greet_kw"}, {"type": "embedding", "name": "near_math"}]
    document["routing"]["decisions"].append(
        {
            "name": "greet",
            "rules": {"operator": "OR", "conditions": conditions},
            "modelRefs": [{"model": "small"}],
        }
    )
    return document


async def signals_after(harness: Harness, texts: list[str]) -> dict[str, Any]:
    async with harness.client() as client:
        for text in texts:
            answer = await client.post(
                "/v1/chat/completions", json={"model": "MoM", "messages": [{"role": "user", "content": text}]}
            )
            assert answer.status_code == 200, answer.text
        response = await client.get("/api/v1/observability/classification-metrics")
    assert response.status_code == 200, response.text
    signals: dict[str, Any] = response.json()["signals"]
    return signals


@pytest.mark.slow
async def test_per_signal_family_requests_matches_errors_and_latency(upstream: FakeUpstream) -> None:
    aggregator = MetricsAggregator()
    harness: Harness

    def report() -> MetricsReport:
        aggregator.push(harness.pipeline.services.metrics.recorder.snapshot("router-1"))
        return aggregator_report(aggregator)

    harness = Harness(signal_document(upstream.base_url), metrics=report)
    signals = await signals_after(harness, ["hello, what is an integral", "hello there", "nothing to see"])
    assert set(signals) == {"keyword", "embedding"}
    keyword, embedding = signals["keyword"], signals["embedding"]
    assert (keyword["requests"], keyword["matched"], keyword["unmatched"], keyword["errors"]) == (3, 2, 1, 0)
    assert keyword["rules"] == {
        "greet_kw": {"matched": 2, "unmatched": 1, "errors": 0},
        "math_kw": {"matched": 1, "unmatched": 2, "errors": 0},
    }
    assert (embedding["requests"], embedding["matched"], embedding["errors"]) == (3, 0, 3)
    assert embedding["rules"] == {"near_math": {"matched": 0, "unmatched": 0, "errors": 3}}
    for family in (keyword, embedding):
        latency = family["latency"]
        assert latency["count"] == 3 and latency["mean_ms"] >= 0
        assert 0 < latency["p50_ms"] <= latency["p90_ms"] <= latency["p99_ms"]

    # the counters go on from there; an explicit model (no classification) and a routing preview
    # add nothing
    more = await signals_after(harness, ["a derivative please"])
    assert more["keyword"]["requests"] == 4 and more["keyword"]["rules"]["math_kw"]["matched"] == 2
    assert more["embedding"]["errors"] == 4 and more["embedding"]["latency"]["count"] == 4
    async with harness.client() as client:
        explicit = {"model": "small", "messages": [{"role": "user", "content": "hello"}]}
        assert (await client.post("/v1/chat/completions", json=explicit)).status_code == 200
        preview = {"model": "MoM", "messages": [{"role": "user", "content": "hello integral"}]}
        assert (await client.post("/api/v1/routing/preview", json=preview)).status_code == 200
    assert (await signals_after(harness, []))["keyword"]["requests"] == 4


@pytest.mark.slow
async def test_classification_metrics_need_observability_read() -> None:
    auth = {
        "mode": "bearer",
        "tokens": [
            {"name": "viewer", "token_env": "T_VIEW", "permissions": ["observability.read"]},
            {"name": "other", "token_env": "T_OTHER", "permissions": ["config.read"]},
        ],
    }
    harness = Harness(
        with_auth(base_document(), auth),
        environ={"T_VIEW": "view-token-1234567890", "T_OTHER": "other-token-1234567890"},
        metrics=lambda: aggregator_report(MetricsAggregator()),
    )
    path = "/api/v1/observability/classification-metrics"
    async with (
        harness.client("view-token-1234567890") as viewer,
        harness.client("other-token-1234567890") as other,
        harness.client() as anonymous,
    ):
        allowed = await viewer.get(path)
        assert allowed.status_code == 200 and allowed.json()["signals"] == {}
        assert (await other.get(path)).status_code == 403
        assert (await anonymous.get(path)).status_code == 401
