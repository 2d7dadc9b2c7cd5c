"""DecisionModel deployment: the Ray Serve host of the decision model behind the frontend's
POST /v1/decisions, /v1/systemone and GET /v1/systemone/models (docs/model-runtime.md).

Two ways to answer, chosen by the router config the graph passes in (`runtime`):
- built in (no `decision_model` in the config): the engine of app/srun/decisions.py runs in
  the replica, the same engine `svc-srun run` serves over HTTP, through `HostedDecisions`
  (app/runtime/hosted_decisions.py: checks, load state, metrics). Each encoder text is
  queued on a per-instance `@serve.batch` queue (see deployments/embedding.py for why per
  instance), so states and option texts from concurrent requests share encoder passes;
- router-managed (`decision_model.deployment` names a `model_deployments` entry): the
  replica runs that deployment's `svc-srun run` workers over Unix sockets, restarted on exit,
  or attaches to its `endpoint`, and forwards each request (app/srun/hosting.py). Each replica
  has its own workers; scale the deployment to scale them.

`decide(body) -> dict` answers with the wire shapes and raises `.status`-carrying errors
(RuntimeFailure subclasses in process, RuntimeCallError from a worker), which
`HandleDecisionSource` (the Ingress side) passes on so the frontend answers its fixed public
words (app/api/decisions.py). `models()` lists the cards, `info()` the load state. A model
that fails to load does not fail the deployment: `decide` raises NotReady (503).

Metrics: `svc_model_runtime_*` (deployment label: the config key, or `decision-model` when
built in), pushed to the Observability deployment like every other replica's metrics.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.runtime.hosted import DEFAULT_BATCH_WAIT_TIMEOUT_S, DEFAULT_MAX_BATCH_SIZE
from app.runtime.hosted_decisions import HostedDecisions
from app.runtime.schemas import InvalidRequest, NotReady, Overloaded
from app.srun.catalog import ALIASES, DECISION_MODEL, load
from app.srun.decisions import DecisionModel as DecisionEngine
from app.srun.decisions import EncodedRow
from app.srun.runtime_metrics import RuntimeMetrics, request_outcome
from app.srun.settings import RuntimeSettings
from deployments.observability import replica_pusher
from deployments.ray_compat import call
from deployments.rollout import SHUTDOWN_POLL_S, SURGE_PERCENT


def _replica_id() -> str:
    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # local testing mode has no replica context
        return "local"


def _load_engine(engine: str, device: str) -> DecisionEngine:
    model = load(DECISION_MODEL, engine=engine, device=device)
    if not isinstance(model, DecisionEngine):
        raise TypeError(f"{DECISION_MODEL} loaded as {type(model).__name__}")
    return model


@serve.deployment(
    max_ongoing_requests=1024,
    ray_actor_options={"num_cpus": 0.1},
    max_surge_percent=SURGE_PERCENT,
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
class DecisionModel:
    # Ray runs an async constructor on the replica's loop: managed workers' clients and health
    # watch then live on the loop that serves the calls. Assigned as `__init__` below, since a
    # coroutine `__init__` is not something a type checker accepts written out.
    async def _construct(
        self,
        engine: str = "auto",
        device: str = "cpu",
        runtime: dict[str, Any] | None = None,
        observability: DeploymentHandle | None = None,
    ) -> None:
        self._runtimes: Any = None
        self._backend: Any = None
        self._metrics = RuntimeMetrics()
        settings = RuntimeSettings.model_validate(runtime or {})
        self._deployment = (
            DECISION_MODEL if settings.decision_model is None else settings.decision_model.deployment
        )
        names = {DECISION_MODEL, self._deployment, *(k for k, v in ALIASES.items() if v == DECISION_MODEL)}
        self._hosted = HostedDecisions(DECISION_MODEL, names, _replica_id(), self._metrics, request_outcome)
        if settings.decision_model is not None:
            await self._start_managed(settings)
        else:
            self._hosted.load(lambda: _load_engine(engine, device))
        self._encode_one = serve.batch(
            max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S
        )(self._hosted.encode_batch)
        self._pusher = replica_pusher(self._metrics.recorder, observability)

    __init__ = _construct

    async def _start_managed(self, settings: RuntimeSettings) -> None:
        from app.srun.hosting import ManagedRuntimes
        from app.srun.settings import SrunEnvironment

        replica = self._hosted.replica
        env = SrunEnvironment.from_env().for_replica(replica)  # replicas on one node share no sockets
        self._runtimes = ManagedRuntimes(
            settings, env, self._metrics, deployments=[self._deployment], replica_prefix=f"{replica}/"
        )
        if not await self._runtimes.start(wait=True):
            self._hosted.error = "NotReady: the managed runtime did not become ready in time"
        self._backend = self._runtimes.decision_source()

    async def _encode(self, texts: list[str]) -> list[EncodedRow]:
        return list(await asyncio.gather(*(self._encode_one(t) for t in texts)))

    # -- the deployment's methods ----------------------------------------------------------

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._backend is not None:
            if not isinstance(body, dict):
                raise InvalidRequest("body: must be a JSON object")
            answer: dict[str, Any] = await self._backend.decide(body)
            return answer
        return await self._hosted.decide(body, self._encode, self._deployment)

    async def models(self) -> list[dict[str, Any]]:
        """Cards of the published native models."""
        if self._backend is not None:
            cards: list[dict[str, Any]] = await self._backend.models()
            return cards
        return [self._hosted.card()]

    async def card(self) -> dict[str, Any]:
        return self._hosted.card()

    async def info(self) -> dict[str, Any]:
        managed = self._runtimes is not None
        return {
            "name": DECISION_MODEL,
            "deployment": self._deployment,
            "managed": managed,
            "loaded": self._hosted.model is not None or managed,
            "error": self._hosted.error,
        }

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


def _has_status(exc: BaseException) -> bool:
    return isinstance(getattr(exc, "status", None), int)


class HandleDecisionSource:
    """The frontend's DecisionSource (app/api/decisions.py) over the DecisionModel handle.

    A replica's own error (RuntimeFailure, RuntimeCallError: anything with `.status`) reaches
    the frontend as itself, so the answer has the same status and public words as with
    `LocalDecisionSource`; an unavailable deployment is NotReady (503 not_ready), a full
    queue Overloaded (429 overloaded)."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle

    async def _call(self, method: str, *args: Any) -> Any:
        return await call(
            self._handle,
            method,
            *args,
            keep=_has_status,
            unavailable=lambda exc: NotReady(f"decision model unavailable ({type(exc).__name__})"),
            overloaded=lambda _: Overloaded("the decision model's queue is full"),
            retries=1,  # a replica that died or is busy: another one first
        )

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = await self._call("decide", body)
        return answer

    async def models(self) -> list[dict[str, Any]]:
        cards: list[dict[str, Any]] = await self._call("models")
        return cards
