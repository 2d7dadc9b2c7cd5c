"""Observability deployment: sums every replica's metrics and serves GET /metrics (:9190).

Exactly one replica (it owns the port). Replicas push cumulative snapshots through
`push()` about once a second (app/observability/push.py), so counters are totals over
every replica of every deployment, whichever replica served a request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.observability.exposition import MetricsHTTPServer
from app.observability.metrics import MetricsAggregator, MetricsRecorder, MetricsSnapshot
from app.observability.push import MetricsPusher

log = logging.getLogger("svc_sr.metrics")

BIND_RETRY_S = 1.0
BIND_ATTEMPTS = 120  # a rolling update starts the new replica while the old one holds the port


@serve.deployment(num_replicas=1, max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0.05})
class Observability:
    def __init__(self) -> None:
        self._aggregator = MetricsAggregator()
        self._server: MetricsHTTPServer | None = None
        self._address: tuple[str, int] | None = None
        self._binder: asyncio.Task[None] | None = None

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        metrics = (user_config or {}).get("metrics", {})
        address = (str(metrics.get("bind_address", "127.0.0.1")), int(metrics.get("port", 9190)))
        enabled = bool(metrics.get("enabled", True))
        if address == self._address and enabled == (self._server is not None or self._binder is not None):
            return
        self._stop_server()
        self._address = address
        if enabled:
            self._binder = asyncio.get_running_loop().create_task(self._bind(address))

    async def _bind(self, address: tuple[str, int]) -> None:
        for attempt in range(BIND_ATTEMPTS):
            try:
                self._server = MetricsHTTPServer(self._aggregator.render, *address).start()
                log.info("metrics on http://%s:%d/metrics", *address)
                return
            except OSError as exc:
                if attempt == 0:
                    log.warning("metrics port %s:%d busy (%s); retrying", *address, exc)
                await asyncio.sleep(BIND_RETRY_S)
        log.error("metrics port %s:%d never became free; /metrics is off", *address)

    def _stop_server(self) -> None:
        if self._binder is not None:
            self._binder.cancel()
            self._binder = None
        if self._server is not None:
            self._server.stop()
            self._server = None

    async def push(self, snapshot: MetricsSnapshot | dict[str, Any]) -> None:
        if isinstance(snapshot, dict):
            snapshot = MetricsSnapshot.model_validate(snapshot)
        self._aggregator.push(snapshot)

    async def render(self) -> str:
        return self._aggregator.render()

    async def sources(self) -> list[str]:
        return self._aggregator.sources

    def __del__(self) -> None:
        self._stop_server()


def replica_pusher(recorder: MetricsRecorder, observability: DeploymentHandle | None) -> MetricsPusher | None:
    """A started pusher from this replica to the Observability deployment (None: metrics off)."""
    if observability is None:
        return None
    context = serve.get_replica_context()
    source = f"{context.deployment}/{context.replica_id.unique_id}"

    def send(snapshot: MetricsSnapshot) -> None:
        observability.push.remote(snapshot).result(timeout_s=5)

    return MetricsPusher(recorder, send, source).start()
