"""The DecisionModel deployment's Ray-free state when the decision model runs in the replica:
the engine object svc-srun serves (app/srun/decisions.py, loaded from app/srun's catalog),
its load state, the request checks and the `svc_model_runtime_*` metrics of each call.

The engine, its loader and the metrics live above app.runtime (in app.srun), so they come
in as arguments typed by the protocols below; the deployment (deployments/decision_model.py)
wires them and keeps only the Serve glue (the `@serve.batch` queue of encoder texts, the
managed-worker mode, handles).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol

from app.runtime.schemas import InvalidRequest, ModelNotFound, NotReady, RuntimeFailure, Timings

log = logging.getLogger("svc_sr.decision_model")

SURFACE = "decisions"
PHASES = (("tokenize", "tokenize_ms"), ("queue", "queue_ms"), ("forward", "forward_ms"), ("post", "post_ms"))
Encode = Callable[[list[str]], Awaitable[list[Any]]]


class WireAnswer(Protocol):
    def to_wire(self) -> dict[str, Any]: ...


class DecisionEngine(Protocol):
    """What this host needs of app.srun.decisions.DecisionModel."""

    @property
    def card(self) -> WireAnswer: ...

    def forward(self, texts: list[str]) -> list[Any]: ...

    async def decide(self, body: dict[str, Any], encode: Encode, timings: Timings) -> WireAnswer: ...


class RuntimeRecorder(Protocol):
    """What this host needs of app.srun.runtime_metrics.RuntimeMetrics."""

    def set(self, name: str, value: float, **label_values: str) -> None: ...

    def add(self, name: str, delta: float, **label_values: str) -> None: ...

    def observe(self, name: str, seconds: float, **label_values: str) -> None: ...

    def record_call(
        self,
        deployment: str,
        replica: str,
        surface: str,
        outcome: str,
        seconds: float,
        replica_outcome: str | None = None,
    ) -> None: ...


class HostedDecisions:
    """`model_name`: the engine's name (and the metrics' deployment label of a built-in
    model); `names`: every model name a request may carry; `outcome_of(status, code)`: the
    requests_total outcome of a failure."""

    def __init__(
        self,
        model_name: str,
        names: Collection[str],
        replica: str,
        metrics: RuntimeRecorder,
        outcome_of: Callable[[int, str], str],
    ) -> None:
        self.model_name = model_name
        self.names = set(names)
        self.replica = replica
        self.metrics = metrics
        self.outcome_of = outcome_of
        self.model: DecisionEngine | None = None
        self.error: str | None = None

    def load(self, build: Callable[[], DecisionEngine]) -> None:
        """Load the engine; a failure is kept (calls raise NotReady), not raised."""
        try:
            self.model = build()
        except Exception as exc:  # serve what we can; calls say the model is not ready
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("decision model not loaded: %s", self.error)
        ready = 1.0 if self.model is not None else 0.0
        self.metrics.set(
            "svc_model_runtime_replica_ready", ready, deployment=self.model_name, replica=self.replica
        )
        self.metrics.set("svc_model_runtime_ready", ready, deployment=self.model_name)

    def require(self) -> DecisionEngine:
        if self.model is None:
            raise NotReady(f"decision model not loaded ({(self.error or 'unknown').split(':', 1)[0]})")
        return self.model

    async def encode_batch(self, texts: list[str]) -> list[Any]:
        """One batch of encoder texts (the deployment's `@serve.batch` function)."""
        model = self.require()
        return await asyncio.to_thread(model.forward, texts)

    def check_model(self, body: dict[str, Any]) -> None:
        name = body.get("model")
        if name is None:
            return
        if not isinstance(name, str):
            raise InvalidRequest("model: must be a string")
        if name not in self.names:
            raise ModelNotFound(f"model {name!r} is not served here; serving: {self.model_name}")

    async def decide(self, body: Any, encode: Encode, deployment: str) -> dict[str, Any]:
        """The wire answer, with the call's metrics under `deployment`; raises the engine's
        RuntimeFailure (with `.status`) for a request it cannot answer."""
        timings = Timings()
        inflight = {"deployment": deployment, "replica": self.replica}
        self.metrics.add("svc_model_runtime_replica_inflight", 1, **inflight)
        started = time.perf_counter()
        outcome, replica_outcome = "failed", None
        try:
            if not isinstance(body, dict):
                raise InvalidRequest("body: must be a JSON object")
            self.check_model(body)
            answer = (await self.require().decide(body, encode, timings)).to_wire()
            outcome = "ok"
            for phase, field in PHASES:
                self.metrics.observe(
                    "svc_model_runtime_server_seconds",
                    getattr(timings, field) / 1000.0,
                    deployment=deployment,
                    surface=SURFACE,
                    phase=phase,
                )
            return answer
        except RuntimeFailure as exc:
            outcome = self.outcome_of(exc.status, exc.code)
            raise
        except asyncio.CancelledError:
            outcome, replica_outcome = "timeout", "canceled"
            raise
        finally:
            self.metrics.add("svc_model_runtime_replica_inflight", -1, **inflight)
            self.metrics.record_call(
                deployment, self.replica, SURFACE, outcome, time.perf_counter() - started, replica_outcome
            )

    def card(self) -> dict[str, Any]:
        return self.require().card.to_wire()
