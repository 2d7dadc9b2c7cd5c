"""DecisionModel deployment: the Ray Serve host of the decision model behind the frontend's
POST /v1/decisions, /v1/systemone and GET /v1/systemone/models (spec 2).

Two ways to answer, chosen by the router config the graph passes in (`runtime`):
- built in (no `decision_model` in the config): the engine of app/srun/decisions.py runs in
  the replica, the same engine `svc-srun run` serves over HTTP. Each encoder text is queued
  on a per-instance `@serve.batch` queue (see deployments/embedding.py for why per instance),
  so states and option texts from concurrent requests share encoder passes;
- router-managed (`decision_model.deployment` names a `model_deployments` entry): the
  replica runs that deployment's `svc-srun run` workers over Unix sockets, restarted on exit,
  or attaches to its `endpoint`, and forwards each request (app/srun/hosting.py). Each replica
  has its own workers; scale the deployment to scale them.

`decide(body) -> dict` answers with the wire shapes and raises `.status`-carrying errors
(RuntimeFailure subclasses in process, RuntimeCallError from a worker), which
`HandleDecisionBackend` (the Ingress side) passes on so the frontend answers its fixed public
words (app/api/decisions.py). `models()` lists the cards, `info()` the load state. A model
that fails to load does not fail the deployment: `decide` raises NotReady (503).

Metrics: `svc_model_runtime_*` (deployment label: the config key, or `decision-model` when
built in), pushed to the Observability deployment like every other replica's metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ray.serve.handle import DeploymentHandle

from app.runtime.schemas import InvalidRequest, ModelNotFound, NotReady, Overloaded, RuntimeFailure, Timings
from app.srun.catalog import ALIASES, DECISION_MODEL, load
from app.srun.decisions import DecisionModel as DecisionEngine
from app.srun.decisions import EncodedRow
from app.srun.runtime_metrics import RuntimeMetrics, request_outcome
from app.srun.settings import RuntimeSettings
from deployments.observability import replica_pusher

log = logging.getLogger("svc_sr.decision_model")

DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.002
SURFACE = "decisions"
PHASES = (("tokenize", "tokenize_ms"), ("queue", "queue_ms"), ("forward", "forward_ms"), ("post", "post_ms"))


def _replica_id() -> str:
    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # local testing mode has no replica context
        return "local"


@serve.deployment(max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0.1})
class DecisionModel:
    # Ray runs an async constructor on the replica's loop: managed workers' clients and health
    # watch then live on the loop that serves the calls.
    async def __init__(  # type: ignore[misc]
        self, engine: str = "auto", device: str = "cpu", runtime: dict[str, Any] | None = None,
        observability: DeploymentHandle | None = None,
    ) -> None:
        self._model: DecisionEngine | None = None
        self._error: str | None = None
        self._runtimes: Any = None
        self._backend: Any = None
        self._replica = _replica_id()
        self._metrics = RuntimeMetrics()
        settings = RuntimeSettings.model_validate(runtime or {})
        if settings.decision_model is not None:
            self._deployment = settings.decision_model.deployment
            await self._start_managed(settings)
        else:
            self._deployment = DECISION_MODEL
            self._load(engine, device)
        self._names = {DECISION_MODEL, self._deployment, *(k for k, v in ALIASES.items() if v == DECISION_MODEL)}
        self._encode_one = serve.batch(
            max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S
        )(self._encode_batch)
        self._pusher = replica_pusher(self._metrics.recorder, observability)

    def _load(self, engine: str, device: str) -> None:
        try:
            model = load(DECISION_MODEL, engine=engine, device=device)
            assert isinstance(model, DecisionEngine)
            self._model = model
        except Exception as exc:  # serve what we can; calls say the model is not ready
            self._error = f"{type(exc).__name__}: {exc}"
            log.error("decision model not loaded: %s", self._error)
        ready = 1.0 if self._model is not None else 0.0
        self._metrics.set("svc_model_runtime_replica_ready", ready, deployment=DECISION_MODEL, replica=self._replica)
        self._metrics.set("svc_model_runtime_ready", ready, deployment=DECISION_MODEL)

    async def _start_managed(self, settings: RuntimeSettings) -> None:
        from app.srun.hosting import ManagedRuntimes
        from app.srun.settings import SrunEnvironment

        env = SrunEnvironment.from_env().for_replica(self._replica)  # replicas on one node share no sockets
        self._runtimes = ManagedRuntimes(settings, env, self._metrics, deployments=[self._deployment],
                                         replica_prefix=f"{self._replica}/")
        if not await self._runtimes.start(wait=True):
            self._error = "NotReady: the managed runtime did not become ready in time"
        self._backend = self._runtimes.decision_backend()

    # -- built in --------------------------------------------------------------------------

    def _require(self) -> DecisionEngine:
        if self._model is None:
            raise NotReady(f"decision model not loaded ({(self._error or 'unknown').split(':', 1)[0]})")
        return self._model

    async def _encode_batch(self, texts: list[str]) -> list[EncodedRow]:
        model = self._require()
        return await asyncio.to_thread(model.forward, texts)

    async def _encode(self, texts: list[str]) -> list[EncodedRow]:
        return list(await asyncio.gather(*(self._encode_one(t) for t in texts)))

    def _check_model(self, body: dict[str, Any]) -> None:
        name = body.get("model")
        if name is None:
            return
        if not isinstance(name, str):
            raise InvalidRequest("model: must be a string")
        if name not in self._names:
            raise ModelNotFound(f"model {name!r} is not served here; serving: {DECISION_MODEL}")

    async def _decide_here(self, body: dict[str, Any]) -> dict[str, Any]:
        timings = Timings()
        inflight = {"deployment": self._deployment, "replica": self._replica}
        self._metrics.add("svc_model_runtime_replica_inflight", 1, **inflight)
        started = time.perf_counter()
        outcome, replica_outcome = "failed", None
        try:
            if not isinstance(body, dict):
                raise InvalidRequest("body: must be a JSON object")
            self._check_model(body)
            model = self._require()
            answer = (await model.decide(body, self._encode, timings)).to_wire()
            outcome = "ok"
            for phase, field in PHASES:
                self._metrics.observe("svc_model_runtime_server_seconds", getattr(timings, field) / 1000.0,
                                      deployment=self._deployment, surface=SURFACE, phase=phase)
            return answer
        except RuntimeFailure as exc:
            outcome = request_outcome(exc.status, exc.code)
            raise
        except asyncio.CancelledError:
            outcome, replica_outcome = "timeout", "canceled"
            raise
        finally:
            self._metrics.add("svc_model_runtime_replica_inflight", -1, **inflight)
            self._metrics.record_call(self._deployment, self._replica, SURFACE, outcome,
                                      time.perf_counter() - started, replica_outcome)

    # -- the deployment's methods ----------------------------------------------------------

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._backend is not None:
            if not isinstance(body, dict):
                raise InvalidRequest("body: must be a JSON object")
            return await self._backend.decide(body)  # type: ignore[no-any-return]
        return await self._decide_here(body)

    async def models(self) -> list[dict[str, Any]]:
        """Cards of the published native models."""
        if self._backend is not None:
            return await self._backend.models()  # type: ignore[no-any-return]
        return [self._require().card.to_wire()]

    async def card(self) -> dict[str, Any]:
        return self._require().card.to_wire()

    async def info(self) -> dict[str, Any]:
        return {"name": DECISION_MODEL, "deployment": self._deployment, "managed": self._runtimes is not None,
                "loaded": self._model is not None or self._runtimes is not None, "error": self._error}

    async def check_health(self) -> None:
        """Serve's periodic probe: a managed worker is restarted by its supervisor, not by
        failing the replica; this only keeps the health watch running."""
        if self._runtimes is not None:
            self._runtimes.supervisor.start_watch()

    def __del__(self) -> None:
        # Serve calls this when the replica stops: end the managed workers (SIGTERM, then
        # SIGKILL after 10 s). Workers of a replica killed outright stop on their own
        # (SVC_SRUN_PARENT_PID).
        runtimes = getattr(self, "_runtimes", None)
        if runtimes is not None:
            runtimes.supervisor.stop_processes()


class HandleDecisionBackend:
    """The frontend's DecisionBackend (app/api/decisions.py) over the DecisionModel handle.

    A replica's own error (RuntimeFailure, RuntimeCallError: anything with `.status`) reaches
    the frontend as itself, so the answer has the same status and public words as with
    `LocalDecisionBackend`; an unavailable deployment is NotReady (503 not_ready), a full
    queue Overloaded (429 overloaded)."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle

    async def _call(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self._handle, method).remote(*args)
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception) and isinstance(getattr(cause, "status", None), int):
                raise cause from None
            raise
        except BackPressureError:
            raise Overloaded("the decision model's queue is full") from None
        except (RayActorError, ActorUnavailableError, DeploymentUnavailableError) as exc:
            raise NotReady(f"decision model unavailable ({type(exc).__name__})") from None

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call("decide", body)  # type: ignore[no-any-return]

    async def models(self) -> list[dict[str, Any]]:
        return await self._call("models")  # type: ignore[no-any-return]
