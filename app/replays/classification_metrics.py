"""GET /api/v1/observability/classification-metrics (docs/management-api.md
"Classification metrics"): what the router's classification did, summed over every replica that
pushes metrics (the Observability deployment's aggregate; app/observability/metrics.py).

Counters: routed requests by domain category and status, PII detections and jailbreak attempts
by action, routing reason codes. Timing: the classification time per routed request (signal
evaluation and the decision), with quantiles estimated from the histogram's buckets (the upper
bound of the bucket holding the quantile, as Prometheus' histogram_quantile does without
interpolation), so they are bucket-resolution figures, not exact ones.

Per signal family (`signals`; app/pipeline/metrics.py records them at route()): the routed
requests that evaluated it, split by result (error when a rule errored, else matched when a rule
matched, else unmatched), each rule's results, and the family's evaluation time (guard rules
count as their family's requests; they have no timing of their own).
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
SIGNAL_HISTOGRAM = "svc_router_signal_duration_seconds"
EVALUATIONS = "svc_router_signal_evaluations_total"
RULE_RESULTS = "svc_router_signal_results_total"
RESULT_FIELDS = {"matched": "matched", "unmatched": "unmatched", "error": "errors"}


class TimingSummary(BaseModel):
    count: int = 0
    mean_ms: float | None = None
    p50_ms: float | None = Field(None, description="bucket upper bound holding the median")
    p90_ms: float | None = None
    p99_ms: float | None = None


class RuleCounts(BaseModel):
    matched: int = 0
    unmatched: int = 0
    errors: int = 0


class SignalFamilyMetrics(BaseModel):
    requests: int = Field(0, description="routed requests that evaluated the family")
    matched: int = Field(0, description="requests where a rule matched (and none errored)")
    unmatched: int = 0
    errors: int = Field(0, description="requests where a rule of the family errored")
    rules: dict[str, RuleCounts] = Field(default_factory=dict, description="by signal rule name")
    latency: TimingSummary = Field(default_factory=TimingSummary)


class ClassificationMetrics(BaseModel):
    sources: int = Field(description="processes whose metrics are summed (replicas, front doors)")
    classification: TimingSummary
    signals: dict[str, SignalFamilyMetrics] = Field(default_factory=dict, description="by signal family")
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


def timing_summary(state: HistogramState | None, buckets: tuple[float, ...]) -> TimingSummary:
    if state is None or state.count <= 0:
        return TimingSummary()

    def ms(q: float) -> float | None:
        value = bucket_quantile(state, buckets, q)
        return None if value is None else round(value * 1000, 3)

    return TimingSummary(
        count=state.count,
        mean_ms=round(state.sum / state.count * 1000, 3),
        p50_ms=ms(0.5),
        p90_ms=ms(0.9),
        p99_ms=ms(0.99),
    )


def _count(target: SignalFamilyMetrics | RuleCounts, result: str, value: float) -> None:
    field = RESULT_FIELDS.get(result)
    if field is not None:
        setattr(target, field, getattr(target, field) + int(value))


def signal_families(snapshot: MetricsSnapshot) -> dict[str, SignalFamilyMetrics]:
    families: dict[str, SignalFamilyMetrics] = {}
    for key, value in snapshot.counters.get(EVALUATIONS, {}).items():
        family, result = json.loads(key)
        entry = families.setdefault(family, SignalFamilyMetrics())
        entry.requests += int(value)
        _count(entry, result, value)
    for key, value in snapshot.counters.get(RULE_RESULTS, {}).items():
        family, signal, result = json.loads(key)
        entry = families.setdefault(family, SignalFamilyMetrics())
        _count(entry.rules.setdefault(signal, RuleCounts()), result, value)
    buckets = CATALOG[SIGNAL_HISTOGRAM].buckets
    for key, state in snapshot.histograms.get(SIGNAL_HISTOGRAM, {}).items():
        (family,) = json.loads(key)
        families.setdefault(family, SignalFamilyMetrics()).latency = timing_summary(state, buckets)
    for entry in families.values():
        entry.rules = dict(sorted(entry.rules.items()))
    return dict(sorted(families.items()))


def classification_metrics(report: MetricsReport) -> ClassificationMetrics:
    snapshot = report.snapshot
    counters = snapshot.counters
    buckets = CATALOG[CLASSIFICATION_HISTOGRAM].buckets
    timing = timing_summary(
        snapshot.histograms.get(CLASSIFICATION_HISTOGRAM, {}).get(json.dumps([])), buckets
    )
    requests = counters.get("svc_router_requests_total", {})  # (endpoint, category, status)
    return ClassificationMetrics(
        sources=report.sources,
        classification=timing,
        signals=signal_families(snapshot),
        requests_by_category=_by_label(requests, 1),
        requests_by_status=_by_label(requests, 2),
        pii_detections=_by_label(counters.get("svc_router_pii_detections_total", {}), 0),
        jailbreak_attempts=_by_label(counters.get("svc_router_jailbreak_attempts_total", {}), 0),
        routing_reason_codes=_by_label(counters.get("llm_routing_reason_codes_total", {}), 0),
    )


def aggregator_report(aggregator: MetricsAggregator) -> MetricsReport:
    return MetricsReport(snapshot=aggregator.merged(), sources=len(aggregator.sources))
