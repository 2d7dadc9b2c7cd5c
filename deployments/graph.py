"""The svc-sr application graph, built from a config path.

    Ingress (FastAPI) -> Router -> Embedding (only with router_local_encoder false;
                 |                           by default the Router encodes in-process)
                 |             -> ResponseCache (lookups; a Unix-socket lane on the same node)
                 +-(after the answer: accounting, cache write, replay)-> ResponseCache, Observability
                 |             -> Guard (PII; with router_local_heads false also the
                 |                  jailbreak/harmful heads, and DomainClassifier the domain head)
                 +-(diagnostics)-> DomainClassifier, Guard -> Embedding (texts without vectors)
                 +-(/v1/decisions)-> DecisionModel (built in, or managed `svc-srun` workers)
                 +-(upstream call to an in-cluster model, by name)-> LLMServer-<model> (vLLM)
                 +-(files and vector-store routes)-> Storage (one replica: records, ingestion, chunks)
    Router -> Storage (the `rag` plugin's retrieval)
    Router -> LLMServers (anchors the LLMServer deployments in the graph)
    Router, Ingress, ResponseCache, DecisionModel --(metrics push)--> Observability (:9190/metrics)

`serve deploy` imports `deployments.graph:build_app` with `args: {config_path: ...}`;
`svc-sr serve` calls the same builder, so a laptop and a cluster run one graph.

Hot reload (deployments/activation.py): the Ingress's management API rebuilds this graph
with the same GraphArgs and the activated document (`build_graph(args, document=...)`) and
redeploys it. Every deployment carries a stable version (deployments/versioning.py), so
one whose arguments did not change keeps its replicas and only gets the new `user_config`
through `reconfigure()`. The document reaches the Router and the Ingress only as
`user_config`; the Ingress's own arguments (GraphArgs, handles) never depend on it.
Resources, replicas and autoscaling are deployment options in the Serve config,
never hard-coded here.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from pydantic import BaseModel
from ray.serve import Application, Deployment

from app.cache.factory import single_owner
from app.config.loader import parse_config
from app.management.state import StartupKind
from app.management.stores import file_candidate, start_document
from app.srun.hosting import runtime_settings
from app.state.shared_store import ManagementStoreSettings, store_settings
from deployments.decision_model import DecisionModel
from deployments.domain_classifier import DomainClassifier
from deployments.embedding import Embedding
from deployments.guard import Guard
from deployments.ingress import Ingress
from deployments.llm_graph import llm_servers
from deployments.observability import Observability
from deployments.response_cache import ResponseCache
from deployments.rollout import single_replica
from deployments.router import InProcess, Router
from deployments.storage import storage_node
from deployments.versioning import stamp_versions

log = logging.getLogger("svc_sr.graph")


class GraphArgs(BaseModel):
    config_path: str = "configs/config.yaml"
    # Optional per-deployment Serve options, e.g. {"Router": {"num_replicas": 2}}.
    deployments: dict[str, dict[str, Any]] = {}
    # Encode the request inside the Router instead of calling the Embedding deployment: one
    # hop fewer (~2-5 ms on 2 cores). The vector still goes to the classifiers, so a request
    # is encoded once. Set false where the Embedding deployment batches on a GPU.
    router_local_encoder: bool = True
    # Run the heads on the request's vector (domain, jailbreak, harmful) inside the Router:
    # three Ray calls and their batch waits fewer per request (measured in docs/performance.md).
    # False sends them to the DomainClassifier and Guard deployments.
    router_local_heads: bool = True
    # Overrides of the config's global.services.observability.metrics ({"enabled": false},
    # {"port": 19190}): several graphs on one Ray instance must not share the metrics port.
    metrics: dict[str, Any] = {}
    # The DecisionModel deployment behind /v1/decisions and /v1/systemone (the built-in model,
    # or the config's router-managed `decision_model`). False leaves it out: the native
    # decision API then answers 503 not_ready.
    decision_model: bool = True
    # An inline configuration document (instead of reading config_path).
    config: dict[str, Any] | None = None
    # A JSON merge patch over the configuration file: what differs per deployment (where the
    # shared stores live) without a second copy of the routing policy, e.g.
    # {"global": {"stores": {"response_cache": {"backend_type": "redis", "redis": {"url": ...}}}}}.
    config_overrides: dict[str, Any] = {}
    # Management state (config versions) and a Milvus Lite response cache: default
    # .cache/state/<app name> under the replicas' working directory.
    state_dir: str | None = None
    # How long an activation may take to reach every replica before it fails (and the
    # previous configuration is pushed back).
    activation_timeout_s: float = 120.0
    # Where the management state lives (versions, activation record, audit, outcomes):
    # {"backend": "file"} (default, the state directory) or {"backend": "redis", "url": ...}
    # shared by every Ingress replica (app/state/shared_store.py); None also reads
    # SVC_SR_MANAGEMENT_STORE_URL.
    management_store: ManagementStoreSettings | None = None
    # The Serve application name this graph is deployed as: it names the management state,
    # so a start can resume the stored active version before deploying (`svc-sr serve` sets
    # it; a Serve config should repeat its application `name` here). None: the Ingress uses
    # the Serve application's name and every start serves the configuration file.
    app_name: str | None = None


def _deployment(cls: type) -> Deployment:
    """The Serve deployment a `@serve.deployment` class became: mypy types a decorated class as
    the class itself (it ignores class decorators' return types), so `.options()` needs this."""
    return cast(Deployment, cls)


def start_document_of(graph_args: GraphArgs) -> tuple[dict[str, Any], StartupKind]:
    """What a start deploys: the configuration file, or the stored active version when the
    file did not change since it was last loaded (needs `app_name` to find the store)."""
    file = file_candidate(graph_args)
    if graph_args.app_name is None:
        return file.document, "file"
    return start_document(
        file, store_settings(graph_args.management_store), graph_args.app_name, graph_args.state_dir
    )


def build_app(args: dict[str, Any] | GraphArgs | None = None) -> Application:
    """The builder `serve deploy` imports (Serve requires exactly one parameter)."""
    return build_graph(args)


def build_graph(
    args: dict[str, Any] | GraphArgs | None = None, document: dict[str, Any] | None = None
) -> Application:
    """`document`: the configuration to build with instead of the one GraphArgs names (an
    activation rebuilds the running graph with the same GraphArgs and the new document)."""
    graph_args = args if isinstance(args, GraphArgs) else GraphArgs.model_validate(args or {})
    if document is None:
        document, _ = start_document_of(graph_args)
    loaded = parse_config(document, source="activation")
    document = loaded.config.to_document()
    cache_config = loaded.config.global_.stores.response_cache
    cache_settings = cache_config.model_dump(mode="json")
    options = graph_args.deployments

    metrics = {
        **loaded.config.global_.services.observability.metrics.model_dump(mode="json"),
        **graph_args.metrics,
    }
    # Always deployed (it binds the metrics port only when metrics are enabled): it also holds
    # the replay records, and deployment arguments must not depend on the document.
    observability = (
        _deployment(Observability)
        .options(**{"user_config": {"metrics": metrics}, **options.get("Observability", {})})
        .bind(graph_args.management_store, graph_args.app_name)
    )

    embedding = _deployment(Embedding).options(**options.get("Embedding", {})).bind()
    # A store one process must own gets one replica and no surge on every path here: the file
    # at start, a resumed version, and each activation (it rebuilds this graph with its document).
    cache_options, owner = options.get("ResponseCache", {}), single_owner(cache_config)
    cache = (
        _deployment(ResponseCache)
        .options(
            **{
                "user_config": {"response_cache": cache_settings},
                **(cache_options if owner is None else single_replica(cache_options, "ResponseCache", owner)),
            }
        )
        .bind(observability, state_dir=graph_args.state_dir)
    )
    # Always deployed: the Ingress's arguments must not depend on the document.
    storage = storage_node(loaded.config.global_.stores.vector_store, graph_args, options.get("Storage", {}))
    domain = _deployment(DomainClassifier).options(**options.get("DomainClassifier", {})).bind(embedding)
    guard = _deployment(Guard).options(**options.get("Guard", {})).bind(embedding)
    router = (
        _deployment(Router)
        .options(**{"user_config": {"config": document}, **options.get("Router", {})})
        .bind(
            embedding,
            cache,
            domain,
            guard,
            local=InProcess(graph_args.router_local_encoder, graph_args.router_local_heads),
            observability=observability,
            llm_servers=llm_servers(loaded.config, options),
            ratings_at=(graph_args.management_store, graph_args.app_name, graph_args.state_dir),
            storage=storage,
        )
    )
    decision = None
    if graph_args.decision_model:
        runtime = runtime_settings(loaded.config).model_dump(mode="json", exclude_none=True)
        decision = (
            _deployment(DecisionModel)
            .options(**options.get("DecisionModel", {}))
            .bind(runtime=runtime, observability=observability)
        )
    ingress = (
        _deployment(Ingress)
        .options(**{"user_config": {"config": document}, **options.get("Ingress", {})})
        .bind(router, graph_args, domain, guard, observability, decision, cache, embedding, storage)
    )
    return stamp_versions(ingress)
