"""Router-side `svc_model_runtime_*` values (docs/model-runtime.md "Metrics").

Every value goes two ways: into plain per-label dicts (`snapshot()` -> {metric name: {label
tuple: value}}, `value()`; histograms keep `_count` and `_sum` per label set) for tests and
in-process readers, and into a `MetricsRecorder` (`.recorder`, the catalog of
app/observability/metrics.py) that a host pushes to the router's metrics endpoint (:9190),
where the Observability deployment sums every replica's snapshot.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from app.observability.metrics import MetricsRecorder

Labels = tuple[tuple[str, str], ...]

COUNTERS = (
    "svc_model_runtime_replica_requests_total",
    "svc_model_runtime_requests_total",
    "svc_model_runtime_unknown_answers_total",
    "svc_model_runtime_restarts_total",
    "svc_model_runtime_stage_decision_calls_total",
)
GAUGES = (
    "svc_model_runtime_replica_ready",
    "svc_model_runtime_replica_inflight",
    "svc_model_runtime_replica_admitted_bytes",
    "svc_model_runtime_ready",
)
HISTOGRAMS = (
    "svc_model_runtime_request_duration_seconds",
    "svc_model_runtime_transport_seconds",
    "svc_model_runtime_server_seconds",
    "svc_model_runtime_bundle_question_wait_seconds",
    "svc_model_runtime_bundle_wait_seconds",
)
# svc_model_runtime_replica_requests_total outcomes for the deployment-level outcomes.
REPLICA_OUTCOMES = {"overloaded": "rejected", "unavailable": "failed", "rejected": "rejected"}


def labels(**values: str) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in values.items()))


def request_outcome(status: int, code: str = "") -> str:
    """svc_model_runtime_requests_total outcome of a failed call, from its status and code."""
    if status == 429:
        return "overloaded"
    if status == 504 or code == "timeout":
        return "timeout"
    if status in (503, 0):
        return "unavailable"
    if 400 <= status < 500:
        return "rejected"
    return "failed"


class RuntimeMetrics:
    def __init__(self, recorder: MetricsRecorder | None = None) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self.recorder = recorder or MetricsRecorder()

    def inc(self, name: str, amount: float = 1.0, **label_values: str) -> None:
        assert name in COUNTERS, name
        with self._lock:
            self._values[name][labels(**label_values)] += amount
        self.recorder.inc(name, amount, **label_values)

    def set(self, name: str, value: float, **label_values: str) -> None:
        assert name in GAUGES, name
        with self._lock:
            self._values[name][labels(**label_values)] = value
        self.recorder.set(name, value, **label_values)

    def add(self, name: str, delta: float, **label_values: str) -> None:
        """Move a gauge (inflight, admitted bytes) up or down."""
        assert name in GAUGES, name
        with self._lock:
            self._values[name][labels(**label_values)] += delta
        self.recorder.add(name, delta, **label_values)

    def observe(self, name: str, seconds: float, **label_values: str) -> None:
        assert name in HISTOGRAMS, name
        key = labels(**label_values)
        with self._lock:
            self._values[name + "_count"][key] += 1
            self._values[name + "_sum"][key] += seconds
        self.recorder.observe(name, seconds, **label_values)

    def record_call(
        self,
        deployment: str,
        replica: str,
        surface: str,
        outcome: str,
        seconds: float,
        replica_outcome: str | None = None,
    ) -> None:
        """One finished call of an in-process host (no transport, no Server-Timing)."""
        self.inc("svc_model_runtime_requests_total", deployment=deployment, outcome=outcome)
        self.inc(
            "svc_model_runtime_replica_requests_total",
            deployment=deployment,
            replica=replica,
            outcome=replica_outcome or REPLICA_OUTCOMES.get(outcome, outcome),
        )
        self.observe(
            "svc_model_runtime_request_duration_seconds", seconds, deployment=deployment, surface=surface
        )

    def snapshot(self) -> dict[str, dict[Labels, float]]:
        with self._lock:
            return {name: dict(values) for name, values in self._values.items()}

    def value(self, name: str, **label_values: str) -> float:
        with self._lock:
            return self._values.get(name, {}).get(labels(**label_values), 0.0)
