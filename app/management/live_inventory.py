"""Live facts of the graph's deployments for the inventory (docs/management-api.md):
readiness, replica starts and restarts, and the device each deployment's process runs its
model on.

A `RuntimeFactsProvider` answers them; the Ray graph's is deployments/inventory_facts.py (Serve's
replica list and each model deployment's info()), tests pass fakes. `ReplicaStartCounter` turns
successive replica lists into counts: every replica id seen is a start; starts beyond the most
replicas ever running at once are restarts (a replica replaced after a crash or a failed
health check), so scaling up is not counted as a restart.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, Field

log = logging.getLogger("svc_sr.inventory")


class DeploymentFacts(BaseModel):
    deployment: str
    ready: bool | None = None  # None: not known
    replicas: int = 0  # running now
    replica_starts: int = 0  # distinct replicas seen since this process began watching
    restarts: int = 0
    devices: list[str] = Field(default_factory=list)  # what its replicas' processes run on


class RuntimeFactsProvider(Protocol):
    async def facts(self) -> Mapping[str, DeploymentFacts]: ...


class ReplicaStartCounter:
    """Replica starts per deployment from successive observations of its running replicas."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, set[str]] = {}
        self._peak: dict[str, int] = {}

    def observe(self, deployment: str, replica_ids: Iterable[str]) -> None:
        ids = set(replica_ids)
        with self._lock:
            self._seen.setdefault(deployment, set()).update(ids)
            self._peak[deployment] = max(self._peak.get(deployment, 0), len(ids))

    def starts(self, deployment: str) -> int:
        with self._lock:
            return len(self._seen.get(deployment, ()))

    def restarts(self, deployment: str) -> int:
        with self._lock:
            return max(0, len(self._seen.get(deployment, ())) - self._peak.get(deployment, 0))


def device_of(info: Mapping[str, Any] | None) -> str | None:
    """The device a deployment's info() reports (top level or its loaded model's), normalised
    to `cpu` or `cuda[:n]`."""
    if not info:
        return None
    found = info.get("device")
    model = info.get("model")
    if found is None and isinstance(model, Mapping):
        found = model.get("device")
    if not isinstance(found, str) or not found:
        return None
    return found if found.startswith("cuda") else "cpu"


def uses_gpu(devices: Iterable[str]) -> bool:
    return any(d.startswith("cuda") for d in devices)


DetailsFn = Callable[[], Mapping[str, Any]]
InfoFn = Callable[[str], Mapping[str, Any] | None]


class ServeFacts:
    """A RuntimeFactsProvider over Ray Serve's view of one application, given as plain calls so
    it is testable without Ray: `details()` is the application's entry of the controller's serve
    details ({deployments: {name: {status, replicas: [{replica_id, state}]}}}), `info(name)` a
    model deployment's info() (its device). Replica lists are sampled on every inventory read
    and every `interval_s` on a daemon thread (`start`), so a replica replaced between two
    samples is counted; one that lived less than a sample may be missed."""

    def __init__(
        self,
        details: DetailsFn,
        info: InfoFn,
        exclude: frozenset[str] = frozenset(),
        interval_s: float = 15.0,
    ) -> None:
        self.details = details
        self.info = info
        self.exclude = exclude
        self.interval_s = interval_s
        self.counter = ReplicaStartCounter()
        self._devices: dict[str, list[str]] = {}
        self._stop = threading.Event()

    def sample(self) -> dict[str, DeploymentFacts]:
        deployments = self.details().get("deployments") or {}
        out: dict[str, DeploymentFacts] = {}
        for name, entry in deployments.items():
            if name in self.exclude or not isinstance(entry, Mapping):
                continue
            running = [
                str(r.get("replica_id"))
                for r in entry.get("replicas") or []
                if isinstance(r, Mapping) and str(r.get("state", "")).upper() == "RUNNING"
            ]
            self.counter.observe(name, running)
            status = str(entry.get("status", "")).upper()
            out[name] = DeploymentFacts(
                deployment=name,
                ready=status in ("HEALTHY", "UPSCALING", "DOWNSCALING") and bool(running),
                replicas=len(running),
                replica_starts=self.counter.starts(name),
                restarts=self.counter.restarts(name),
                devices=self._device(name) if running else [],
            )
        return out

    def _device(self, name: str) -> list[str]:
        """Asked once per deployment, when it first runs (a placement does not change)."""
        if name not in self._devices:
            device = device_of(self.info(name))
            if device is None:
                return []
            self._devices[name] = [device]
        return self._devices[name]

    async def facts(self) -> Mapping[str, DeploymentFacts]:
        return await asyncio.to_thread(self.sample)

    def start(self) -> ServeFacts:
        threading.Thread(target=self._run, name="svc-sr-inventory", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception as exc:  # the controller may be busy or restarting
                log.debug("inventory sample failed: %s", exc)
