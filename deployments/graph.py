"""The svc-sr application graph, built from a config path.

    Ingress (FastAPI) -> Router -> Embedding
                 |             -> ResponseCache
                 |             -> DomainClassifier -> Embedding (texts without vectors)
                 +-(diagnostics)-> Guard (PII, jailbreak) -> Embedding
    Router, Ingress, ResponseCache --(metrics push)--> Observability (GET :9190/metrics)

`serve deploy` imports `deployments.graph:build_app` with `args: {config_path: ...}`;
`svc-sr serve` calls the same builder, so a laptop and a cluster run one graph.
Resources, replicas and autoscaling are deployment options in the Serve config,
never hard-coded here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel
from ray.serve import Application

from app.config.loader import load_config
from deployments.domain_classifier import DomainClassifier
from deployments.embedding import Embedding
from deployments.guard import Guard
from deployments.ingress import Ingress
from deployments.observability import Observability
from deployments.response_cache import ResponseCache
from deployments.router import Router


class GraphArgs(BaseModel):
    config_path: str = "configs/config.yaml"
    # Optional per-deployment Serve options, e.g. {"Router": {"num_replicas": 2}}.
    deployments: dict[str, dict[str, Any]] = {}
    # Encode the request inside the Router instead of calling the Embedding deployment
    # (lower latency on few cores; the Embedding deployment still serves everything else).
    router_local_encoder: bool = False
    # Overrides of the config's global.services.observability.metrics ({"enabled": false},
    # {"port": 19190}): several graphs on one Ray instance must not share the metrics port.
    metrics: dict[str, Any] = {}


def build_app(args: dict[str, Any] | GraphArgs | None = None) -> Application:
    graph_args = args if isinstance(args, GraphArgs) else GraphArgs.model_validate(args or {})
    loaded = load_config(Path(graph_args.config_path))
    document = loaded.config.to_document()
    cache_settings = loaded.config.global_.stores.response_cache.model_dump(mode="json")
    options = graph_args.deployments

    metrics = {**loaded.config.global_.services.observability.metrics.model_dump(mode="json"),
               **graph_args.metrics}
    observability = None
    if metrics.get("enabled", True):
        observability = Observability.options(
            **{"user_config": {"metrics": metrics}, **options.get("Observability", {})}
        ).bind()

    embedding = Embedding.options(**options.get("Embedding", {})).bind()
    cache = ResponseCache.options(
        **{"user_config": {"response_cache": cache_settings}, **options.get("ResponseCache", {})}
    ).bind(observability)
    domain = DomainClassifier.options(**options.get("DomainClassifier", {})).bind(embedding)
    guard = Guard.options(**options.get("Guard", {})).bind(embedding)
    router = Router.options(
        **{"user_config": {"config": document}, **options.get("Router", {})}
    ).bind(embedding, cache, domain, guard, local_encoder=graph_args.router_local_encoder,
           observability=observability)
    return Ingress.options(**options.get("Ingress", {})).bind(router, document, domain, guard, observability)
