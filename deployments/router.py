"""Router deployment: the request pipeline behind DeploymentHandles.

Routing configuration arrives as Serve `user_config` so a routing change reaches live
replicas through `reconfigure()` without a restart (deployments/activation.py drives it);
app/pipeline/reload.py builds each generation aside and keeps the previous one when a
reload fails, reported through `generation()` for the activator's warm check.

route() marks the requests whose decision records replays (`router_replay` plugin); the
front door that completes the request (Ingress, ext_proc sidecar) sends the record to the
Observability deployment, shared by every replica.

The learned signal families (`domain`, `pii`, `jailbreak`, `harmful`) ask their engines
through one interface (app/runtime/signal_engine.py): on the DomainClassifier and Guard
deployments by handle (deployments/signal_engines.py); the request's query vector is passed
along, so the text is encoded once per request. With `InProcess.heads` the heads on that vector
(domain, jailbreak, harmful) and PII's pattern-only checks run on engines in this replica
instead (app/pipeline/local_models.py), and only PII checks that need NER ask the Guard. Cache lookups and epoch reads go over the ResponseCache's
lane. A family the configuration binds to a `model_deployments` entry (`prompt_guard`,
`pii_classifier`, `domain_classifier`) calls that deployment's `svc-srun` workers, which each
replica runs itself (SVC_SRUN_DIR/<replica id>/; app/srun/hosting.py BindingRuntimes).
check_answer() runs the response-side plugins for the front doors (app/pipeline/answers).
The `rag` plugin searches the Storage deployment's vector stores over its handle
(deployments/router_services.py, deployments/storage.py).
"""

from __future__ import annotations

import logging
import os
from typing import Any, NamedTuple

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.common.heap import freeze_startup_heap
from app.keys.grant import ModelGrant
from app.observability.tracing import configure_tracing
from app.pipeline import encoder_embed
from app.pipeline.answers.schemas import AnswerChecks, AnswerVerdict
from app.pipeline.local_models import router_evaluators
from app.pipeline.plan import ProviderState, RoutePlan
from app.pipeline.reload import ReloadingPipeline
from app.runtime.encoder import MiniLMEncoder
from app.runtime.threads import limit_blas_threads
from app.srun.hosting import BindingRuntimes
from app.srun.runtime_metrics import RuntimeMetrics
from app.upstream.client import UpstreamClient
from deployments import ray_compat
from deployments.llm_transport import in_cluster_mounts
from deployments.observability import replica_pusher
from deployments.replica_logs import route_project_logs
from deployments.rollout import SHUTDOWN_POLL_S, SURGE_PERCENT
from deployments.router_services import handle_services, read_shared_state
from deployments.signal_engines import HandleEngine

log = logging.getLogger("svc_sr.router")


class InProcess(NamedTuple):
    """What the Router runs in its own process instead of calling a model deployment."""

    encoder: bool = False  # the request's one encoder pass (else the Embedding deployment)
    heads: bool = False  # the heads on its vector: domain, jailbreak, harmful (else DomainClassifier, Guard)


ALL_REMOTE = InProcess()


@serve.deployment(
    max_ongoing_requests=1024,
    ray_actor_options={"num_cpus": 0.25},
    max_surge_percent=SURGE_PERCENT,
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
class Router:
    def __init__(  # noqa: PLR0913 - one handle per deployment it calls (Serve binds them)
        self,
        embedding: DeploymentHandle,
        cache: DeploymentHandle,
        domain: DeploymentHandle | None = None,
        guard: DeploymentHandle | None = None,
        local: InProcess = ALL_REMOTE,
        observability: DeploymentHandle | None = None,
        llm_servers: DeploymentHandle | None = None,
        ratings_at: tuple[Any, str | None, str | None] | None = None,
        storage: DeploymentHandle | None = None,
    ) -> None:
        route_project_logs()  # errors in this replica's log at once (deployments/replica_logs.py)
        limit_blas_threads()  # the heads' products on one thread: spinning pools took the cores
        # llm_servers only keeps the in-cluster models in the graph (deployments/llm_server.py).
        transport = ray_compat.process_transport
        guard = transport(guard)
        # Retrieval for the rag plugin: the Storage deployment's vector stores (deployments/storage.py).
        services = handle_services(
            transport(embedding), transport(cache), transport(domain), guard, transport(storage)
        )
        observability = transport(observability)
        self._pusher = replica_pusher(services.metrics.recorder, observability)
        if local.encoder:
            # The request's one encoder pass runs in this replica: one Ray hop and the batch
            # wait fewer per request, at the cost of a ~265 MB encoder per Router replica.
            # Two intra-op threads: encoder_embed runs one (micro-batched) forward at a time,
            # and on 2 cores a short prompt takes 4.6 ms with two threads against 6.4 with one.
            encoder = MiniLMEncoder(threads=int(os.environ.get("SVC_SR_ROUTER_ENCODER_THREADS", "2")))
            encoder.warm_up()
            services.embed = encoder_embed(encoder)
        if local.heads:
            # Matrix products on a vector this replica holds, and PII's pattern-only checks:
            # no Ray call or batch wait for them; PII calls that need spaCy's NER go to the Guard.
            remote_pii = HandleEngine(guard, "pii") if guard is not None else None
            services.evaluators.update(router_evaluators(lambda texts: services.embed(texts), remote_pii))
        # The front doors complete requests and record replays; route() only marks them.
        services.capture_replays = observability is not None
        # External LLM classifiers and guards are asked over this client; in-cluster ones by handle.
        services.llm_client = UpstreamClient(mounts=in_cluster_mounts(serve.get_replica_context().app_name))
        self._replica = serve.get_replica_context().replica_id.unique_id
        # The elo ratings, knowledge bases and memories the Ingress writes (GraphArgs' store).
        if ratings_at is not None:
            read_shared_state(services, ratings_at, serve.get_replica_context().app_name)
        # Workers of the model deployments the configuration binds; their metrics are pushed
        # with the replica's own.
        bindings = BindingRuntimes(self._replica, RuntimeMetrics(services.metrics.recorder))
        self._host = ReloadingPipeline(services, bindings)

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """A routing configuration (user_config) arrives: at startup or a hot reload."""
        first = self._host.generation()["hash"] is None
        await self._host.apply(user_config["config"])
        # tracing settings change only with a restart (409 RESTART_REQUIRED): set once, then no-ops
        configure_tracing(self._host.pipeline.config.global_.services.observability.tracing, "router")
        if first:
            freeze_startup_heap()

    async def check_health(self) -> None:
        """Serve's probe: a bound worker is restarted by its supervisor; keep the watch running."""
        self._host.bindings.start_watch()

    def __del__(self) -> None:
        # The replica stops: end the bound workers (SIGTERM, SIGKILL after 10 s).
        host = getattr(self, "_host", None)
        if host is not None:
            host.bindings.stop_processes()

    async def generation(self) -> dict[str, Any]:
        """The configuration served and the last failed reload (the activator's warm check)."""
        return {"replica": self._replica, **self._host.generation()}

    async def route(
        self,
        body: dict[str, Any],
        headers: dict[str, str],
        request_id: str,
        grant: ModelGrant | None = None,
        tie: ProviderState | None = None,
    ) -> RoutePlan:
        # `body` is the chat body a front door's exchange decoded and validated; the handle only
        # pickled it, so it is routed as it is, not validated again (app/pipeline/phases/parse.py).
        plan = await self._host.pipeline.route(body, headers, request_id=request_id, grant=grant, tie=tie)
        plan.router_replica = self._replica  # replay records name it (the front door completes)
        return plan

    async def check_answer(self, checks: AnswerChecks, answer: str, context: list[str]) -> AnswerVerdict:
        return await self._host.pipeline.check_answer(checks, answer, context)  # response-side plugins

    async def preview(
        self, body: dict[str, Any], headers: dict[str, str] | None = None, seed: int | None = None
    ) -> dict[str, Any]:
        """Routing preview (no backend call, no cache access); see RouterPipeline.preview."""
        return await self._host.pipeline.preview(body, headers, seed=seed)
