"""Pushes a recorder's cumulative snapshot to the aggregator, about once a second.

A daemon thread with a blocking `send`: it works the same in a Serve replica (whatever
its event loop is doing), in the Ingress and in the ext_proc sidecar. Only changed state
is sent; a failed push is retried on the next tick (snapshots are cumulative, so nothing
is lost). `flush()` sends now, e.g. before a replica stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.observability.metrics import MetricsRecorder, MetricsSnapshot

log = logging.getLogger("svc_sr.metrics")

SendFn = Callable[[MetricsSnapshot], object]


class MetricsPusher:
    def __init__(self, recorder: MetricsRecorder, send: SendFn, source: str, interval_s: float = 1.0) -> None:
        self.recorder = recorder
        self._send = send
        self.source = source
        self.interval_s = interval_s
        self._sent_version = -1
        self._failures = 0
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
            version = self.recorder.version
            if version == self._sent_version:
                return True
            try:
                self._send(self.recorder.snapshot(self.source))
            except Exception as exc:
                self._failures += 1
                if self._failures in (1, 10) or self._failures % 100 == 0:
                    log.warning("metrics push from %s failed (%d times): %s", self.source, self._failures, exc)
                return False
            self._sent_version = version
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
