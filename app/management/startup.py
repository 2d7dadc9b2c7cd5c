"""Startup status of the model deployments (docs/management-api.md).

The graph registers each managed model deployment and reports readiness or failure; the
tracker answers /ready and /startup-status. Startup completes once every registered
deployment is ready; from then on /ready stays 200, also while a reload's new models load
(the previous configuration keeps serving). A load failure during startup moves the phase
to `error`. The per-deployment list is kept after startup.
"""

from __future__ import annotations

import threading
from typing import Literal

from pydantic import BaseModel

Phase = Literal["loading_model_deployments", "complete", "error"]
ModelState = Literal["loading", "ready", "failed"]


class ModelDeploymentStatus(BaseModel):
    name: str
    artifact: str | None = None
    process: str | None = None
    state: ModelState = "loading"
    ready: bool = False
    reason: str | None = None


class StartupStatus(BaseModel):
    phase: Phase
    ready: bool
    pending_models: list[str]
    ready_models: int
    total_models: int
    reason: str | None = None
    model_deployments: list[ModelDeploymentStatus] | None = None


class StartupTracker:
    def __init__(self) -> None:
        self._models: dict[str, ModelDeploymentStatus] = {}
        self._complete = False
        self._failed_reason: str | None = None
        self._lock = threading.Lock()
        self._sealed = False

    def register(self, name: str, artifact: str | None = None, process: str | None = None) -> None:
        with self._lock:
            self._models[name] = ModelDeploymentStatus(name=name, artifact=artifact, process=process)
            self._refresh()

    def seal(self) -> None:
        """Every startup deployment is registered: startup completes once they are all ready."""
        with self._lock:
            self._sealed = True
            self._refresh()

    def mark_ready(self, name: str) -> None:
        with self._lock:
            model = self._models.setdefault(name, ModelDeploymentStatus(name=name))
            model.state, model.ready, model.reason = "ready", True, None
            self._refresh()

    def mark_failed(self, name: str, reason: str) -> None:
        with self._lock:
            model = self._models.setdefault(name, ModelDeploymentStatus(name=name))
            model.state, model.ready, model.reason = "failed", False, reason
            if not self._complete:
                self._failed_reason = f"model deployment {name!r} failed to load: {reason}"
            self._refresh()

    def _refresh(self) -> None:
        if self._complete or not self._sealed or self._failed_reason:
            return
        if all(model.ready for model in self._models.values()):
            self._complete = True  # a latch: later reloads never turn /ready back to 503

    @property
    def complete(self) -> bool:
        return self._complete

    def status(self, detail: bool = False) -> StartupStatus:
        with self._lock:
            models = [m.model_copy() for m in self._models.values()]
            complete, reason = self._complete, self._failed_reason
        if complete:
            phase: Phase = "complete"
        elif reason:
            phase = "error"
        else:
            phase = "loading_model_deployments"
        return StartupStatus(
            phase=phase,
            ready=complete,
            pending_models=[m.name for m in models if not m.ready],
            ready_models=sum(1 for m in models if m.ready),
            total_models=len(models),
            reason=reason if phase == "error" else None,
            model_deployments=models if detail else None,
        )


def completed_tracker() -> StartupTracker:
    """A tracker with nothing to wait for (the standalone app: models load in-process)."""
    tracker = StartupTracker()
    tracker.seal()
    return tracker
