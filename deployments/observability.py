"""Observability deployment: sums every replica's metrics and serves GET /metrics (:9190);
holds the `router_replay` records of every Router replica.

Exactly one replica (it owns the port and the replay ring). Replicas push cumulative
snapshots through `push()` about once a second (app/observability/push.py), so counters
are totals over every replica of every deployment, whichever replica served a request.
The graph deploys it also when metrics are off (no port is bound then): the front doors
(Ingress, ext_proc sidecar), which complete requests, send replay records here
(`record_replay`, fire-and-forget) and the Ingress's management API reads them
(`list_replays`, `get_replay`, `aggregate_replays`), so a record shows up whichever
replica routed or answered the request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.common.background import BackgroundTasks
from app.observability.exposition import MetricsHTTPServer
from app.observability.metrics import MetricsAggregator, MetricsRecorder, MetricsSnapshot
from app.observability.push import LoopMetricsPusher, MetricsPusher
from app.replays.classification_metrics import MetricsReport, MetricsSource, aggregator_report
from app.replays.replays_redis import open_replay_store
from app.state.shared_store import ManagementStoreSettings, store_settings
from deployments.rollout import SHUTDOWN_POLL_S, SURGE_PERCENT

log = logging.getLogger("svc_sr.metrics")

BIND_RETRY_S = 1.0
BIND_ATTEMPTS = 120  # a rolling update starts the new replica while the old one holds the port


@serve.deployment(
    num_replicas=1,
    max_ongoing_requests=1024,
    ray_actor_options={"num_cpus": 0.05},
    max_surge_percent=SURGE_PERCENT,
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
class Observability:
    def __init__(
        self, management_store: ManagementStoreSettings | None = None, app_name: str | None = None
    ) -> None:
        self._aggregator = MetricsAggregator()
        self._server: MetricsHTTPServer | None = None
        self._address: tuple[str, int] | None = None
        self._binder: asyncio.Task[None] | None = None
        # With a Redis management store the records live there (every Ingress reads them).
        name = app_name or serve.get_replica_context().app_name
        self._replays = open_replay_store(store_settings(management_store), name)

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

    async def report(self) -> dict[str, Any]:
        """Every source's metrics summed: GET /api/v1/observability/classification-metrics."""
        return aggregator_report(self._aggregator).model_dump()

    # ------------------------------------------------------------------ replays
    async def record_replay(self, record: dict[str, Any]) -> str:
        return self._replays.record(record)

    async def list_replays(
        self, limit: int = 100, after_sequence: int = 0, decision: str | None = None, model: str | None = None
    ) -> dict[str, Any]:
        return self._replays.list(
            limit=limit, after_sequence=after_sequence, decision=decision, model=model
        ).model_dump(mode="json")

    async def get_replay(self, replay_id: str) -> dict[str, Any] | None:
        return self._replays.get(replay_id)

    async def aggregate_replays(
        self, decision: str | None = None, model: str | None = None
    ) -> dict[str, Any]:
        return self._replays.aggregate(decision=decision, model=model).model_dump(mode="json")

    def __del__(self) -> None:
        self._stop_server()


def metrics_source(handle: DeploymentHandle) -> MetricsSource:
    """The management API's MetricsSource over this deployment."""

    async def report() -> MetricsReport:
        return MetricsReport.model_validate(await handle.report.remote())

    return report


def replica_pusher(
    recorder: MetricsRecorder, observability: DeploymentHandle | None
) -> MetricsPusher | LoopMetricsPusher | None:
    """A started pusher from this replica to the Observability deployment (None: metrics off)."""
    if observability is None:
        return None
    context = serve.get_replica_context()
    return handle_pusher(recorder, observability, f"{context.deployment}/{context.replica_id.unique_id}")


def handle_pusher(
    recorder: MetricsRecorder, observability: DeploymentHandle, source: str
) -> MetricsPusher | LoopMetricsPusher:
    """On the caller's event loop when it has one (handles may be bound to it: Serve's
    throughput-optimized mode), else on a thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:

        def send(snapshot: MetricsSnapshot) -> None:
            observability.push.remote(snapshot).result(timeout_s=5)

        return MetricsPusher(recorder, send, source).start()

    async def send_async(snapshot: MetricsSnapshot) -> None:
        await observability.push.remote(snapshot)

    return LoopMetricsPusher(recorder, send_async, source).start()


def replay_sender(
    observability: DeploymentHandle, tasks: BackgroundTasks
) -> Callable[[dict[str, Any]], None]:
    """PipelineServices/CompletionServices.record_replay over the Observability deployment:
    hands the record to a background send and returns at once."""

    async def send(record: dict[str, Any]) -> None:
        try:
            await observability.record_replay.remote(record)
        except Exception as exc:  # a lost replay record must never fail a request
            log.warning("replay record %s not stored: %s", record.get("id"), exc)

    def record_replay(record: dict[str, Any]) -> None:
        tasks.spawn(send(record))

    return record_replay
