"""GET /api/v1/observability/classification-metrics (spec 1 "Inventory and metrics":
"counters and timing"): what the router's classification did, summed over every replica that
pushes metrics (the Observability deployment's aggregate; app/observability/metrics.py).

Counters: routed requests by domain category and status, PII detections and jailbreak attempts
by action, routing reason codes. Timing: the classification time per routed request (signal
evaluation and the decision), with quantiles estimated from the histogram's buckets (the upper
bound of the bucket holding the quantile, as Prometheus' histogram_quantile does without
interpolation), so they are bucket-resolution figures, not exact ones.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, Field

from app.observability.metrics import CATALOG, HistogramState, MetricsAggregator, MetricsSnapshot


class MetricsReport(BaseModel):
    """Every source's metrics summed, and how many sources there were."""

    snapshot: MetricsSnapshot
    sources: int


# What the route reads (the graph: a call to the Observability deployment; one process:
# `aggregator_report` over its MetricsAggregator).
MetricsSource = Callable[[], MetricsReport | Awaitable[MetricsReport]]

CLASSIFICATION_HISTOGRAM = "svc_router_classification_duration_seconds"


class TimingSummary(BaseModel):
    count: int = 0
    mean_ms: float | None = None
    p50_ms: float | None = Field(None, description="bucket upper bound holding the median")
    p90_ms: float | None = None
    p99_ms: float | None = None


class ClassificationMetrics(BaseModel):
    sources: int = Field(description="processes whose metrics are summed (replicas, front doors)")
    classification: TimingSummary
    requests_by_category: dict[str, int] = Field(default_factory=dict)
    requests_by_status: dict[str, int] = Field(default_factory=dict)
    pii_detections: dict[str, int] = Field(default_factory=dict, description="by action taken")
    jailbreak_attempts: dict[str, int] = Field(default_factory=dict, description="by action taken")
    routing_reason_codes: dict[str, int] = Field(default_factory=dict)


def bucket_quantile(state: HistogramState, buckets: tuple[float, ...], q: float) -> float | None:
    """The upper bound (seconds) of the bucket holding quantile `q`; None without samples. A
    quantile in the +Inf bucket reports the largest finite bound."""
    if state.count <= 0:
        return None
    rank = q * state.count
    seen = 0
    for bound, count in zip((*buckets, buckets[-1]), state.bucket_counts, strict=False):
        seen += count
        if seen >= rank:
            return bound
    return buckets[-1]


def _by_label(series: dict[str, float], position: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, value in series.items():
        label = json.loads(key)[position]
        out[label] = out.get(label, 0) + int(value)
    return dict(sorted(out.items()))


def classification_metrics(report: MetricsReport) -> ClassificationMetrics:
    snapshot = report.snapshot
    counters = snapshot.counters
    buckets = CATALOG[CLASSIFICATION_HISTOGRAM].buckets
    state = snapshot.histograms.get(CLASSIFICATION_HISTOGRAM, {}).get(json.dumps([]))
    timing = TimingSummary()
    if state is not None and state.count > 0:

        def ms(q: float) -> float | None:
            value = bucket_quantile(state, buckets, q)
            return None if value is None else round(value * 1000, 3)

        timing = TimingSummary(
            count=state.count,
            mean_ms=round(state.sum / state.count * 1000, 3),
            p50_ms=ms(0.5),
            p90_ms=ms(0.9),
            p99_ms=ms(0.99),
        )
    requests = counters.get("svc_router_requests_total", {})  # (endpoint, category, status)
    return ClassificationMetrics(
        sources=report.sources,
        classification=timing,
        requests_by_category=_by_label(requests, 1),
        requests_by_status=_by_label(requests, 2),
        pii_detections=_by_label(counters.get("svc_router_pii_detections_total", {}), 0),
        jailbreak_attempts=_by_label(counters.get("svc_router_jailbreak_attempts_total", {}), 0),
        routing_reason_codes=_by_label(counters.get("llm_routing_reason_codes_total", {}), 0),
    )


def aggregator_report(aggregator: MetricsAggregator) -> MetricsReport:
    return MetricsReport(snapshot=aggregator.merged(), sources=len(aggregator.sources))
