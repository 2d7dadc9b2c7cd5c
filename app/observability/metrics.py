"""Process-local metric recording and cross-process aggregation.

Every process that serves traffic (Router replicas, the Ingress, the ext_proc bridge,
ResponseCache replicas) records into its own `MetricsRecorder` and periodically pushes
a *cumulative* snapshot to one `MetricsAggregator`, which renders the sum over every
source in Prometheus text format. Pushing cumulative state (never deltas) makes a lost
or repeated push harmless, and a counter never depends on which replica served.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

Kind = Literal["counter", "gauge", "histogram"]

# Seconds; from sub-10 ms cache answers to multi-minute generations.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class MetricDef:
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    # How sources combine: "sum" (counts, in-flight) or "max" (a 0/1 state such as
    # readiness, which several replicas report for one series).
    aggregate: Literal["sum", "max"] = "sum"


def _defs(*defs: MetricDef) -> dict[str, MetricDef]:
    return {d.name: d for d in defs}


# Model-runtime calls take milliseconds: finer low buckets than whole requests.
RUNTIME_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_DR = ("deployment", "replica")

# Calls to model runtimes (docs/model-runtime.md), recorded by app/srun/runtime_metrics.py
# (managed or attached workers, and the DecisionModel deployment's in-process engine).
RUNTIME_CATALOG: dict[str, MetricDef] = _defs(
    MetricDef(
        "svc_model_runtime_replica_ready",
        "gauge",
        "1 when the runtime replica answers ready.",
        _DR,
        aggregate="max",
    ),
    MetricDef("svc_model_runtime_replica_inflight", "gauge", "Calls in flight to the runtime replica.", _DR),
    MetricDef(
        "svc_model_runtime_replica_admitted_bytes",
        "gauge",
        "Request bytes admitted to the runtime replica.",
        _DR,
    ),
    MetricDef(
        "svc_model_runtime_replica_requests_total",
        "counter",
        "Calls per runtime replica by outcome.",
        (*_DR, "outcome"),
    ),
    MetricDef(
        "svc_model_runtime_ready",
        "gauge",
        "1 when some replica of the deployment is ready.",
        ("deployment",),
        aggregate="max",
    ),
    MetricDef(
        "svc_model_runtime_requests_total",
        "counter",
        "Calls per model deployment by outcome.",
        ("deployment", "outcome"),
    ),
    MetricDef(
        "svc_model_runtime_request_duration_seconds",
        "histogram",
        "Call latency seen by the router.",
        ("deployment", "surface"),
        RUNTIME_BUCKETS,
    ),
    MetricDef(
        "svc_model_runtime_transport_seconds",
        "histogram",
        "Call latency less the runtime's Server-Timing total.",
        ("deployment", "surface"),
        RUNTIME_BUCKETS,
    ),
    MetricDef(
        "svc_model_runtime_server_seconds",
        "histogram",
        "Runtime-side time per Server-Timing phase.",
        ("deployment", "surface", "phase"),
        RUNTIME_BUCKETS,
    ),
    MetricDef(
        "svc_model_runtime_unknown_answers_total",
        "counter",
        "Answers the router could not read.",
        ("deployment", "reason"),
    ),
    MetricDef(
        "svc_model_runtime_restarts_total", "counter", "Managed runtime process restarts.", ("deployment",)
    ),
    MetricDef(
        "svc_model_runtime_stage_decision_calls_total",
        "counter",
        "Calls of a request's routing stage to a runtime deployment (round: first or later).",
        ("deployment", "round"),
    ),
    MetricDef(
        "svc_model_runtime_bundle_question_wait_seconds",
        "histogram",
        "Wait of a stage question from its arrival to its bundle's send.",
        (),
        RUNTIME_BUCKETS,
    ),
    MetricDef(
        "svc_model_runtime_bundle_wait_seconds",
        "histogram",
        "Wait of a stage bundle from its first question to its send.",
        (),
        RUNTIME_BUCKETS,
    ),
)

# The router metrics (docs/envoy.md "Metrics"), plus the counters the cache hit ratio needs.
CATALOG: dict[str, MetricDef] = _defs(
    MetricDef(
        "svc_router_requests_total",
        "counter",
        "Requests by endpoint, category and HTTP status.",
        ("endpoint", "category", "status"),
    ),
    MetricDef(
        "svc_router_request_duration_seconds",
        "histogram",
        "Request latency seen by the router.",
        ("endpoint",),
        LATENCY_BUCKETS,
    ),
    MetricDef(
        "svc_router_classification_accuracy",
        "gauge",
        "Share of correct domain classifications among submitted outcomes.",
        ("category",),
        aggregate="max",  # a per-replica share: summing replicas would exceed 1
    ),
    MetricDef(
        "svc_router_classification_duration_seconds",
        "histogram",
        "Signal evaluation and decision time per routed request.",
        (),
        LATENCY_BUCKETS,
    ),
    MetricDef(
        "svc_router_signal_evaluations_total",
        "counter",
        "Routed requests that evaluated a signal family, by result: error when a rule of the family"
        " errored, else matched when a rule matched, else unmatched.",
        ("family", "result"),
    ),
    MetricDef(
        "svc_router_signal_results_total",
        "counter",
        "Signal rule results (matched, unmatched, error) of routed requests.",
        ("family", "signal", "result"),
    ),
    MetricDef(
        "svc_router_signal_duration_seconds",
        "histogram",
        "Evaluation time of a signal family per routed request.",
        ("family",),
        RUNTIME_BUCKETS,
    ),
    MetricDef(
        "svc_router_cache_lookups_total",
        "counter",
        "Response-cache lookups by result (hit, miss).",
        ("result",),
    ),
    MetricDef(
        "svc_router_cache_errors_total",
        "counter",
        "Response-cache calls a shared store could not answer (down, timed out), by operation;"
        " each lookup among them counted as a miss.",
        ("operation",),
    ),
    MetricDef(
        "svc_router_context_compression_requests_total",
        "counter",
        "Routed requests whose decision runs context_compression, by whether turns were dropped"
        " and whether the result still exceeds the budget.",
        ("recipe", "decision", "compressed", "over_budget"),
    ),
    MetricDef(
        "svc_router_context_compression_turns_dropped_total",
        "counter",
        "Conversation turns context_compression dropped (summarised or not).",
        ("recipe", "decision"),
    ),
    MetricDef(
        "svc_router_context_compression_tokens_saved_total",
        "counter",
        "Tokens context_compression removed from forwarded requests (router tokenizer).",
        ("recipe", "decision"),
    ),
    MetricDef(
        "svc_router_context_compression_duration_seconds",
        "histogram",
        "Time context_compression took per routed request.",
        (),
        RUNTIME_BUCKETS,
    ),
    MetricDef("svc_router_cache_hit_ratio", "gauge", "Response-cache hits / lookups since start."),
    MetricDef("svc_router_cache_size", "gauge", "Entries held by the response cache."),
    MetricDef(
        "svc_router_pii_detections_total",
        "counter",
        "Requests with PII detected, by action taken.",
        ("action",),
    ),
    MetricDef(
        "svc_router_jailbreak_attempts_total",
        "counter",
        "Jailbreak attempts detected, by action taken.",
        ("action",),
    ),
    MetricDef(
        "llm_request_errors_total", "counter", "Failed requests by model and reason.", ("model", "reason")
    ),
    MetricDef(
        "llm_model_requests_total", "counter", "Requests by model (error-rate denominator).", ("model",)
    ),
    MetricDef(
        "llm_reasoning_decisions_total",
        "counter",
        "Reasoning decisions.",
        ("category", "model", "enabled", "effort"),
    ),
    MetricDef(
        "llm_reasoning_template_usage_total",
        "counter",
        "Reasoning template parameters applied.",
        ("family", "param"),
    ),
    MetricDef(
        "llm_reasoning_effort_usage_total", "counter", "Reasoning efforts applied.", ("family", "effort")
    ),
    MetricDef(
        "llm_model_cost_total", "counter", "Cumulative cost from usage and pricing.", ("model", "currency")
    ),
    MetricDef(
        "svc_router_api_key_spend_usd_total", "counter", "USD spent per API key.", ("key_id", "key_name")
    ),
    MetricDef("llm_routing_reason_codes_total", "counter", "Routing reason codes.", ("reason_code", "model")),
    MetricDef(
        "llm_model_ttft_seconds",
        "histogram",
        "Time to first token since the router began the request.",
        ("model",),
        LATENCY_BUCKETS,
    ),
    MetricDef(
        "llm_model_tpot_seconds",
        "histogram",
        "Completion latency per completion token.",
        ("model",),
        TOKEN_TIME_BUCKETS,
    ),
    *RUNTIME_CATALOG.values(),
)

# Rendered from other series at exposition time, never recorded directly.
DERIVED = frozenset({"svc_router_cache_hit_ratio"})


class HistogramState(BaseModel):
    bucket_counts: list[int]  # per bucket (not cumulative), len(buckets) + 1 for +Inf
    sum: float = 0.0
    count: int = 0


class MetricsSnapshot(BaseModel):
    """One source's cumulative state; series keyed by the JSON list of label values."""

    source: str
    counters: dict[str, dict[str, float]] = Field(default_factory=dict)
    gauges: dict[str, dict[str, float]] = Field(default_factory=dict)
    histograms: dict[str, dict[str, HistogramState]] = Field(default_factory=dict)


class UnknownMetric(KeyError):
    pass


def _label_key(definition: MetricDef, labels: dict[str, object]) -> str:
    if set(labels) != set(definition.labels):
        raise ValueError(f"{definition.name}: labels {sorted(labels)} != {sorted(definition.labels)}")
    return json.dumps([str(labels[name]) for name in definition.labels])


class MetricsRecorder:
    """Thread-safe cumulative counters, gauges and histograms of one process."""

    def __init__(self, catalog: dict[str, MetricDef] | None = None) -> None:
        self.catalog = catalog or CATALOG
        self._lock = threading.Lock()
        self._counters: dict[str, dict[str, float]] = {}
        self._gauges: dict[str, dict[str, float]] = {}
        self._histograms: dict[str, dict[str, HistogramState]] = {}
        self.version = 0  # bumped on every change: pushers skip unchanged state

    def _def(self, name: str, kind: Kind) -> MetricDef:
        definition = self.catalog.get(name)
        if definition is None or definition.kind != kind:
            raise UnknownMetric(f"{name} is not a {kind} in the catalog")
        return definition

    def inc(self, name: str, value: float = 1.0, **labels: object) -> None:
        if value < 0 or not math.isfinite(value):
            raise ValueError(f"{name}: a counter only goes up by a finite amount, got {value}")
        key = _label_key(self._def(name, "counter"), labels)
        with self._lock:
            series = self._counters.setdefault(name, {})
            series[key] = series.get(key, 0.0) + value
            self.version += 1

    def set(self, name: str, value: float, **labels: object) -> None:
        key = _label_key(self._def(name, "gauge"), labels)
        with self._lock:
            self._gauges.setdefault(name, {})[key] = float(value)
            self.version += 1

    def add(self, name: str, delta: float, **labels: object) -> None:
        """Move a gauge up or down (in-flight counts)."""
        key = _label_key(self._def(name, "gauge"), labels)
        with self._lock:
            series = self._gauges.setdefault(name, {})
            series[key] = series.get(key, 0.0) + float(delta)
            self.version += 1

    def observe(self, name: str, value: float, **labels: object) -> None:
        definition = self._def(name, "histogram")
        if not math.isfinite(value):
            return
        key = _label_key(definition, labels)
        index = next(
            (i for i, bound in enumerate(definition.buckets) if value <= bound), len(definition.buckets)
        )
        with self._lock:
            series = self._histograms.setdefault(name, {})
            state = series.get(key)
            if state is None:
                state = series[key] = HistogramState(bucket_counts=[0] * (len(definition.buckets) + 1))
            state.bucket_counts[index] += 1
            state.sum += value
            state.count += 1
            self.version += 1

    def value(self, name: str, **labels: object) -> float:
        """A counter or gauge value (0 when never recorded); for tests and previews."""
        definition = self.catalog[name]
        key = _label_key(definition, labels)
        store = self._counters if definition.kind == "counter" else self._gauges
        with self._lock:
            return store.get(name, {}).get(key, 0.0)

    def snapshot(self, source: str) -> MetricsSnapshot:
        with self._lock:
            return MetricsSnapshot(
                source=source,
                counters={n: dict(s) for n, s in self._counters.items()},
                gauges={n: dict(s) for n, s in self._gauges.items()},
                histograms={
                    n: {k: v.model_copy(deep=True) for k, v in s.items()} for n, s in self._histograms.items()
                },
            )


class MetricsAggregator:
    """The latest snapshot of every source, summed at exposition time."""

    def __init__(self, catalog: dict[str, MetricDef] | None = None) -> None:
        self.catalog = catalog or CATALOG
        self._lock = threading.Lock()
        self._sources: dict[str, MetricsSnapshot] = {}

    def push(self, snapshot: MetricsSnapshot) -> None:
        with self._lock:
            self._sources[snapshot.source] = snapshot

    @property
    def sources(self) -> list[str]:
        with self._lock:
            return sorted(self._sources)

    def merged(self) -> MetricsSnapshot:
        with self._lock:
            snapshots = list(self._sources.values())
        total = MetricsSnapshot(source="all")
        for snap in snapshots:
            self._merge_values(snap.counters, total.counters)
            self._merge_values(snap.gauges, total.gauges)
            _merge_histograms(snap.histograms, total.histograms)
        return total

    def _merge_values(self, family: dict[str, dict[str, float]], target: dict[str, dict[str, float]]) -> None:
        for name, series in family.items():
            merged = target.setdefault(name, {})
            definition = self.catalog.get(name)
            use_max = definition is not None and definition.aggregate == "max"
            for key, value in series.items():
                if use_max:
                    merged[key] = max(merged[key], value) if key in merged else value
                else:
                    merged[key] = merged.get(key, 0.0) + value

    def value(self, name: str, **labels: object) -> float:
        """The summed value of one counter/gauge series."""
        definition = self.catalog[name]
        merged = self.merged()
        store = merged.counters if definition.kind == "counter" else merged.gauges
        return store.get(name, {}).get(_label_key(definition, labels), 0.0)

    def render(self) -> str:
        merged = self.merged()
        lookups = merged.counters.get("svc_router_cache_lookups_total", {})
        hits = lookups.get(json.dumps(["hit"]), 0.0)
        total = sum(lookups.values())
        merged.gauges["svc_router_cache_hit_ratio"] = {json.dumps([]): hits / total if total else 0.0}
        lines: list[str] = []
        for name, definition in self.catalog.items():
            lines.append(f"# HELP {name} {definition.help}")
            lines.append(f"# TYPE {name} {definition.kind}")
            if definition.kind == "histogram":
                for key, state in sorted(merged.histograms.get(name, {}).items()):
                    lines.extend(_histogram_lines(definition, json.loads(key), state))
                continue
            store = merged.counters if definition.kind == "counter" else merged.gauges
            for key, value in sorted(store.get(name, {}).items()):
                lines.append(f"{name}{_labels(definition.labels, json.loads(key))} {_number(value)}")
        return "\n".join(lines) + "\n"


def _merge_histograms(
    family: dict[str, dict[str, HistogramState]], target: dict[str, dict[str, HistogramState]]
) -> None:
    for name, series in family.items():
        merged = target.setdefault(name, {})
        for key, state in series.items():
            current = merged.get(key)
            if current is None or len(current.bucket_counts) != len(state.bucket_counts):
                merged[key] = state.model_copy(deep=True)
                continue
            current.bucket_counts = [
                a + b for a, b in zip(current.bucket_counts, state.bucket_counts, strict=True)
            ]
            current.sum += state.sum
            current.count += state.count


def _histogram_lines(definition: MetricDef, values: list[str], state: HistogramState) -> list[str]:
    lines = []
    cumulative = 0
    bounds = [*(_number(b) for b in definition.buckets), "+Inf"]
    for bound, count in zip(bounds, state.bucket_counts, strict=True):
        cumulative += count
        labels = _labels((*definition.labels, "le"), [*values, bound])
        lines.append(f"{definition.name}_bucket{labels} {cumulative}")
    plain = _labels(definition.labels, values)
    lines.append(f"{definition.name}_sum{plain} {_number(state.sum)}")
    lines.append(f"{definition.name}_count{plain} {state.count}")
    return lines


def _labels(names: tuple[str, ...], values: list[str]) -> str:
    if not names:
        return ""
    pairs = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
