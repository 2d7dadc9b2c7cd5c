"""Ingress deployment: the FastAPI front door (standalone data plane, system routes,
classification diagnostics over the DomainClassifier / Guard handles, the native decision
API over the DecisionModel handle)."""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.api.app import StaticConfigView, create_app
from app.api.parts import ingress_parts, open_shared_stores
from app.api.request_id import ServerEchoesRequestId
from app.cache.admin import LocalCacheAdmin
from app.common.background import BackgroundTasks
from app.common.heap import freeze_startup_heap
from app.config.document import RouterConfig
from app.config.loader import parse_config
from app.management.service import ManagementParts
from app.management.stores import file_candidate, open_replica_stores
from app.observability.tracing import configure_tracing
from app.pipeline.direct_route import DirectRouter
from app.pipeline.metrics import RouterMetrics
from app.upstream.client import UpstreamClient
from deployments import ray_compat
from deployments.activation import build_management
from deployments.decision_model import HandleDecisionSource
from deployments.diagnostics_source import HandleClassifiers
from deployments.error_page import install_error_pages
from deployments.handles import (
    HandleCacheControl,
    HandleRouterClient,
    ObservabilityReplays,
    front_door_completion,
    storage_client,
)
from deployments.llm_transport import in_cluster_mounts
from deployments.observability import metrics_source, replica_pusher
from deployments.replica_logs import route_project_logs
from deployments.rollout import SHUTDOWN_POLL_S, SURGE_PERCENT


@serve.deployment(
    max_ongoing_requests=1024,
    ray_actor_options={"num_cpus": 0.25},
    max_surge_percent=SURGE_PERCENT,
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
@serve.ingress()
class Ingress:
    def __init__(  # noqa: PLR0913 - one handle per deployment it calls (Serve binds them)
        self,
        router: DeploymentHandle,
        graph_args: Any,
        domain: DeploymentHandle | None = None,
        guard: DeploymentHandle | None = None,
        observability: DeploymentHandle | None = None,
        decision_model: DeploymentHandle | None = None,
        cache: DeploymentHandle | None = None,
        embedding: DeploymentHandle | None = None,
        storage: DeploymentHandle | None = None,
    ) -> None:
        # The configuration arrives as user_config (hot reload without restarting this replica,
        # which runs the activation); Serve calls reconfigure() only after the ASGI app is built,
        # so the constructor reads the replica's current user_config itself.
        route_project_logs()  # errors in this replica's log at once (deployments/replica_logs.py)
        install_error_pages()  # HAProxy's own answers (no replica could) in the spec's error shape
        transport = ray_compat.process_transport
        router, observability, cache = transport(router), transport(observability), transport(cache)
        domain, guard, decision_model = transport(domain), transport(guard), transport(decision_model)
        embedding, storage = transport(embedding), transport(storage)
        config = parse_config(_current_document(graph_args)).config
        configure_tracing(config.global_.services.observability.tracing, "ingress")
        self._config = StaticConfigView(config)
        # /v1/decisions, /v1/systemone (None: no DecisionModel in the graph, they answer 503)
        self._decisions = HandleDecisionSource(decision_model) if decision_model is not None else None
        self._metrics = RouterMetrics()
        self._replay_sends = BackgroundTasks()
        completion = front_door_completion(cache, observability, self._metrics, self._replay_sends)
        # explicit models route here, on the config this replica holds; auto ones on a Router
        self._router = HandleRouterClient(
            router, completion, DirectRouter(self._config.current, self._metrics)
        )
        # In-cluster models (vLLM deployments of this application) are reached by handle.
        self._upstream = UpstreamClient(mounts=in_cluster_mounts(serve.get_replica_context().app_name))
        self._classifiers = HandleClassifiers(domain, guard, router, embedding)
        self._pusher = replica_pusher(self._metrics.recorder, observability)
        # The management API (docs/management-api.md): persistent versions, activation through
        # Serve, startup status.
        stores = open_replica_stores(graph_args, serve.get_replica_context().app_name)
        self._management = build_management(
            config,
            graph_args,
            stores,
            router=router,
            held=ManagementParts(
                config_view=self._config, previewer=self._router, compile_check=_compile_check(domain, guard)
            ),
        )
        # The wings beside it, their stores where the management state lives (app/api/parts.py).
        self._parts = ingress_parts(
            open_shared_stores(stores.settings, stores.name, stores.state_dir, stores.client),
            # Files and vector stores: the Storage deployment's one service (None: 503s).
            storage=storage_client(storage) if storage is not None else None,
            kb_embed=self._classifiers.embed,  # knowledge bases embedded by the graph's encoder
            replays=ObservabilityReplays(observability) if observability is not None else None,
            metrics=metrics_source(observability) if observability is not None else None,
            recorder=self._metrics.recorder,  # outcomes set svc_router_classification_accuracy
            # The storage API (docs/management-api.md) over the ResponseCache (none: 503s).
            cache_admin=LocalCacheAdmin(HandleCacheControl(cache)) if cache is not None else None,
        )
        # The `memory` plugin's write after the answer runs here (complete()): the store the
        # Routers recall from (Redis; None on a file store, app/storage/memories.py
        # router_memories), each fact embedded by the graph's encoder.
        completion.memories = self._parts.storage.memories
        if completion.memories is not None:  # else no encoder pass added to complete()
            completion.embed = self._classifiers.embed

    def __serve_build_asgi_app__(self) -> Any:
        app = create_app(
            self._router,
            self._upstream,
            self._config,
            self._classifiers,
            decisions=self._decisions,
            management=self._management,
            parts=self._parts,
        )
        app.state.plane.metrics = (
            self._metrics
        )  # front-door errors and completions, summed with the Routers' metrics
        app.add_middleware(ServerEchoesRequestId)  # Serve appends the request's id to every response
        freeze_startup_heap()
        return app

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """The document of an activation (this replica's own, deployments/activation.py)."""
        if "config" in (user_config or {}):
            config = parse_config(user_config["config"]).config
            self._config.update(config)
            # An activation run by another Ingress replica reaches this one only here.
            self._management.activation.adopt(config)


def _current_document(graph_args: Any) -> dict[str, Any]:
    """This replica's user_config document, else the one GraphArgs names (a graph built
    without user_config for the Ingress)."""
    document = (ray_compat.replica_user_config() or {}).get("config")
    if document is not None:
        return document
    return file_candidate(graph_args).document


def _compile_check(domain: DeploymentHandle | None, guard: DeploymentHandle | None) -> Any:
    """Stage compile: build the routing pipeline with the Router's own signal evaluators
    (no model is called; that is the Routers' warm stage)."""
    from app.pipeline import PipelineServices, RouterPipeline
    from deployments.router_services import classifier_evaluators

    def check(config: RouterConfig) -> None:
        RouterPipeline(config, PipelineServices(evaluators=classifier_evaluators(domain, guard)))

    return check
