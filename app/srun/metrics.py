"""Worker metrics (docs/model-runtime.md), Prometheus text at GET /metrics. Each worker app owns
its registry so two workers in one process (tests) never share counters. Labels carry
model names, endpoints and outcomes, never request content."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536, 262144)


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "svc_srun_requests", "Worker requests by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.duration = Histogram(
            "svc_srun_request_duration_seconds",
            "Request duration",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "svc_srun_queue_duration_seconds",
            "Wait before the forward",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.forward = Histogram(
            "svc_srun_forward_duration_seconds",
            "Forward time of a request",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_rows = Histogram(
            "svc_srun_batch_rows", "Rows per forward batch", ["model"], buckets=ROW_BUCKETS, registry=r
        )
        self.batch_tokens = Histogram(
            "svc_srun_batch_tokens", "Tokens per forward batch", ["model"], buckets=TOKEN_BUCKETS, registry=r
        )
        self.bundle_tasks = Histogram(
            "svc_srun_bundle_tasks", "Tasks per bundle", buckets=ROW_BUCKETS, registry=r
        )
        self.cache = Counter(
            "svc_srun_result_cache", "Result cache lookups", ["model", "outcome"], registry=r
        )
        self.queue_depth = Gauge("svc_srun_queue_depth", "Requests waiting per model", ["model"], registry=r)
        self.ready = Gauge("svc_srun_ready", "1 when the model is ready", ["model"], registry=r)
        self.info = Gauge(
            "svc_srun_model_info",
            "Loaded model",
            ["model", "task", "engine", "device", "revision"],
            registry=r,
        )
        self.memory = Gauge(
            "svc_srun_model_memory_bytes", "Artifact bytes of the model (files loaded)", ["model"], registry=r
        )
        self._refreshers: list[Callable[[], None]] = []

    def on_scrape(self, refresh: Callable[[], None]) -> None:
        self._refreshers.append(refresh)

    def render(self) -> bytes:
        for refresh in self._refreshers:
            refresh()
        return generate_latest(self.registry)
