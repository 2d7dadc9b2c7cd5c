"""Router-side `svc_model_runtime_*` values (spec 2 "Router metrics"), kept as plain
counters/gauges so the router's metrics endpoint can export them however it aggregates
replicas: `snapshot()` -> {metric name: {label tuple: value}}. Histograms keep count and
sum per label set (enough for rates and means; the exporter owns bucket layout)."""

from __future__ import annotations

import threading
from collections import defaultdict

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


def labels(**values: str) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in values.items()))


class RuntimeMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))

    def inc(self, name: str, amount: float = 1.0, **label_values: str) -> None:
        assert name in COUNTERS, name
        with self._lock:
            self._values[name][labels(**label_values)] += amount

    def set(self, name: str, value: float, **label_values: str) -> None:
        assert name in GAUGES, name
        with self._lock:
            self._values[name][labels(**label_values)] = value

    def add(self, name: str, delta: float, **label_values: str) -> None:
        """Move a gauge (inflight, admitted bytes) up or down."""
        assert name in GAUGES, name
        with self._lock:
            self._values[name][labels(**label_values)] += delta

    def observe(self, name: str, seconds: float, **label_values: str) -> None:
        assert name in HISTOGRAMS, name
        key = labels(**label_values)
        with self._lock:
            self._values[name + "_count"][key] += 1
            self._values[name + "_sum"][key] += seconds

    def snapshot(self) -> dict[str, dict[Labels, float]]:
        with self._lock:
            return {name: dict(values) for name, values in self._values.items()}

    def value(self, name: str, **label_values: str) -> float:
        with self._lock:
            return self._values.get(name, {}).get(labels(**label_values), 0.0)
