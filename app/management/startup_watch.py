"""`StartupWatcher`: feeds a StartupTracker from a Serve application's deployment states.

Every deployment but the excluded ones (the Ingress) is registered; HEALTHY (or scaling)
is ready, and for model deployments only once their `info()` says the model loaded; one that
may scale to zero (`on_demand`, started on its first call) is ready once HEALTHY, replica or not;
DEPLOY_FAILED or a model that did not load is a failure. The status and info functions
are injected (deployments/activation.py reads them from Ray Serve).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from app.management.rollout import AppState, first_line
from app.management.startup import StartupTracker

log = logging.getLogger("svc_sr.activation")

READY_STATES = frozenset({"HEALTHY", "UPSCALING", "DOWNSCALING"})
# Which model each deployment loads (inventory and /startup-status `artifact`).
ARTIFACTS = {
    "Embedding": "minilm-embedding",
    "DomainClassifier": "domain-classifier",
    "Guard": "pii-detector,jailbreak-guard",
    "DecisionModel": "decision-model",
}

StatusFn = Callable[[], AppState]
InfoFn = Callable[[str], dict[str, Any] | None]


def load_failure(info: dict[str, Any] | None) -> str | None:
    """A model deployment's `info()` -> why its model is not loaded (None: loaded or unknown)."""
    if not isinstance(info, dict):
        return None
    parts = [info] + [v for v in info.values() if isinstance(v, dict) and "loaded" in v]
    for part in parts:
        if part.get("loaded") is False:
            return first_line(str(part.get("error") or "model not loaded"))
    return None


class StartupWatcher:
    """Polls `status` (then, once startup completed, the cheaper `health`) on a daemon thread."""

    def __init__(
        self,
        tracker: StartupTracker,
        status: StatusFn,
        info: InfoFn | None = None,
        exclude: frozenset[str] = frozenset(),
        interval_s: float = 0.5,
        idle_interval_s: float = 5.0,
        health: StatusFn | None = None,
        on_demand: frozenset[str] = frozenset(),
    ) -> None:
        self.tracker = tracker
        self.status = status
        # Once started, the cheap status (no replica counts) keeps watching: the full one
        # holds this replica's GIL for ~100 ms, a latency spike for requests every poll.
        self.health = health
        self.info = info
        self.exclude = exclude
        self.on_demand = on_demand
        self.interval_s = interval_s
        self.idle_interval_s = idle_interval_s
        self._stop = threading.Event()
        self._registered: set[str] = set()
        self._checked: set[str] = set()
        self._thread: threading.Thread | None = None

    def start(self) -> StartupWatcher:
        self._thread = threading.Thread(target=self._run, name="svc-sr-startup", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # the controller may be busy or restarting
                log.debug("startup status poll failed: %s", exc)
            self._stop.wait(self.idle_interval_s if self.tracker.complete else self.interval_s)

    def poll(self) -> None:
        status_fn = self.health if self.tracker.complete and self.health is not None else self.status
        _, _, deployments = status_fn()
        if not deployments:
            return
        names = sorted(n for n in deployments if n not in self.exclude)
        for name in names:
            if name not in self._registered:
                self.tracker.register(name, artifact=ARTIFACTS.get(name), process="ray_serve")
                self._registered.add(name)
        self.tracker.seal()
        for name in names:
            self._observe(name, *deployments[name])

    def _observe(self, name: str, state: str, running: int) -> None:
        if state in READY_STATES and name in self.on_demand:
            # No info() call, which would start a replica (the cheap health status counts every
            # ready deployment as running): a model that fails to load says so on its first call.
            self.tracker.mark_ready(name)
        elif state in READY_STATES and running > 0:
            reason = self._load_failure(name)
            if reason is not None:
                self.tracker.mark_failed(name, reason)
            else:
                self.tracker.mark_ready(name)
        elif state == "DEPLOY_FAILED" or (state == "UNHEALTHY" and self.tracker.complete):
            self.tracker.mark_failed(name, f"deployment {state}")

    def _load_failure(self, name: str) -> str | None:
        """A model deployment's info() is read once, when it first turns ready."""
        if name not in ARTIFACTS or self.info is None or name in self._checked:
            return None
        self._checked.add(name)
        return load_failure(self.info(name))
