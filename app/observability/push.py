"""Pushes a recorder's cumulative snapshot to the aggregator, about once a second.

Two hosts for one policy. `MetricsPusher`: a daemon thread with a blocking `send`, for
processes without an event loop. `LoopMetricsPusher`: a task on the caller's event loop
with an async `send`, required where DeploymentHandles are bound to that loop (Serve's
throughput-optimized mode runs the handle router on the caller's loop, and a handle used
from another thread fails). Only changed state is sent; a failed push is retried on the
next tick (snapshots are cumulative, so nothing is lost). `flush()` sends now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable

from app.observability.metrics import MetricsRecorder, MetricsSnapshot

log = logging.getLogger("svc_sr.metrics")

SendFn = Callable[[MetricsSnapshot], object]
AsyncSendFn = Callable[[MetricsSnapshot], Awaitable[object]]


class _PushPolicy:
    """What to send and how often to complain: shared by both pushers."""

    def __init__(self, recorder: MetricsRecorder, source: str) -> None:
        self.recorder = recorder
        self.source = source
        self._sent_version = -1
        self._failures = 0

    def pending(self) -> tuple[int, MetricsSnapshot] | None:
        version = self.recorder.version
        if version == self._sent_version:
            return None
        return version, self.recorder.snapshot(self.source)

    def sent(self, version: int) -> None:
        self._sent_version = version

    def failed(self, exc: BaseException) -> None:
        self._failures += 1
        if self._failures in (1, 10) or self._failures % 100 == 0:
            log.warning("metrics push from %s failed (%d times): %s", self.source, self._failures, exc)


class MetricsPusher:
    def __init__(self, recorder: MetricsRecorder, send: SendFn, source: str, interval_s: float = 1.0) -> None:
        self.recorder = recorder
        self._send = send
        self.source = source
        self.interval_s = interval_s
        self._policy = _PushPolicy(recorder, source)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one push at a time: flush() and the thread may race
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsPusher:
        """Idempotent."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"metrics-push-{self.source}", daemon=True)
            self._thread.start()
        return self

    def flush(self) -> bool:
        with self._lock:
            pending = self._policy.pending()
            if pending is None:
                return True
            try:
                self._send(pending[1])
            except Exception as exc:
                self._policy.failed(exc)
                return False
            self._policy.sent(pending[0])
            return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.flush()


class LoopMetricsPusher:
    """The same pushes as a task on the running event loop (see the module docstring)."""

    def __init__(
        self,
        recorder: MetricsRecorder,
        send: AsyncSendFn,
        source: str,
        interval_s: float = 1.0,
        send_timeout_s: float = 5.0,
    ) -> None:
        self.recorder = recorder
        self._send = send
        self.source = source
        self.interval_s = interval_s
        self.send_timeout_s = send_timeout_s
        self._policy = _PushPolicy(recorder, source)
        self._lock: asyncio.Lock | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LoopMetricsPusher:
        """Idempotent; must be called with the loop running (a replica constructor, a coroutine)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"metrics-push-{self.source}"
            )
        return self

    async def flush(self) -> bool:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            pending = self._policy.pending()
            if pending is None:
                return True
            try:
                await asyncio.wait_for(self._send(pending[1]), self.send_timeout_s)
            except Exception as exc:
                self._policy.failed(exc)
                return False
            self._policy.sent(pending[0])
            return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.flush()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
