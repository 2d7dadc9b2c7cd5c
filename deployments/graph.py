"""The svc-sr application graph, built from a config path.

    Ingress (FastAPI) -> Router -> Embedding (only with router_local_encoder false;
                 |                           by default the Router encodes in-process)
                 |             -> ResponseCache (lookups; a Unix-socket lane on the same node)
                 +-(after the answer: accounting, cache write, replay)-> ResponseCache, Observability
                 |             -> DomainClassifier -> Embedding (texts without vectors)
                 +-(diagnostics)-> Guard (PII, jailbreak) -> Embedding
                 +-(/v1/decisions)-> DecisionModel (built in, or managed `svc-srun` workers)
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

from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel
from ray.serve import Application, Deployment

from app.config.loader import load_config, parse_config
from app.srun.hosting import runtime_settings
from deployments.decision_model import DecisionModel
from deployments.domain_classifier import DomainClassifier
from deployments.embedding import Embedding
from deployments.guard import Guard
from deployments.ingress import Ingress
from deployments.observability import Observability
from deployments.response_cache import ResponseCache
from deployments.router import Router
from deployments.versioning import stamp_versions


class GraphArgs(BaseModel):
    config_path: str = "configs/config.yaml"
    # Optional per-deployment Serve options, e.g. {"Router": {"num_replicas": 2}}.
    deployments: dict[str, dict[str, Any]] = {}
    # Encode the request inside the Router instead of calling the Embedding deployment: one
    # hop fewer (~2-5 ms on 2 cores). The vector still goes to the classifiers, so a request
    # is encoded once. Set false where the Embedding deployment batches on a GPU.
    router_local_encoder: bool = True
    # Overrides of the config's global.services.observability.metrics ({"enabled": false},
    # {"port": 19190}): several graphs on one Ray instance must not share the metrics port.
    metrics: dict[str, Any] = {}
    # The DecisionModel deployment behind /v1/decisions and /v1/systemone (the built-in model,
    # or the config's router-managed `decision_model`). False leaves it out: the native
    # decision API then answers 503 not_ready.
    decision_model: bool = True
    # An inline configuration document (instead of reading config_path).
    config: dict[str, Any] | None = None
    # Management state (config versions) and a Milvus Lite response cache: default
    # .cache/state/<app name> under the replicas' working directory.
    state_dir: str | None = None
    # How long an activation may take to reach every replica before it fails (and the
    # previous configuration is pushed back).
    activation_timeout_s: float = 120.0


def _deployment(cls: type) -> Deployment:
    """The Serve deployment a `@serve.deployment` class became: mypy types a decorated class as
    the class itself (it ignores class decorators' return types), so `.options()` needs this."""
    return cast(Deployment, cls)


def build_app(args: dict[str, Any] | GraphArgs | None = None) -> Application:
    """The builder `serve deploy` imports (Serve requires exactly one parameter)."""
    return build_graph(args)


def build_graph(
    args: dict[str, Any] | GraphArgs | None = None, document: dict[str, Any] | None = None
) -> Application:
    """`document`: the configuration to build with instead of the one GraphArgs names (an
    activation rebuilds the running graph with the same GraphArgs and the new document)."""
    graph_args = args if isinstance(args, GraphArgs) else GraphArgs.model_validate(args or {})
    if document is not None:
        loaded = parse_config(document, source="activation")
    elif graph_args.config is not None:
        loaded = parse_config(graph_args.config, source="GraphArgs.config")
    else:
        loaded = load_config(Path(graph_args.config_path))
    document = loaded.config.to_document()
    cache_settings = loaded.config.global_.stores.response_cache.model_dump(mode="json")
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
        .bind()
    )

    embedding = _deployment(Embedding).options(**options.get("Embedding", {})).bind()
    cache = (
        _deployment(ResponseCache)
        .options(**{"user_config": {"response_cache": cache_settings}, **options.get("ResponseCache", {})})
        .bind(observability, state_dir=graph_args.state_dir)
    )
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
            local_encoder=graph_args.router_local_encoder,
            observability=observability,
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
        .bind(router, graph_args, domain, guard, observability, decision_model=decision, cache=cache)
    )
    return stamp_versions(ingress)
