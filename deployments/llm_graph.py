"""The in-cluster models' part of the graph: one LLMServer deployment per
`providers.models[]` entry with `llm_config`, under the LLMServers anchor."""

from __future__ import annotations

from typing import Any, cast

from ray.serve import Application, Deployment

from app.config.document import RouterConfig
from app.llm.addressing import deployment_name
from deployments.llm_server import LLMServer, LLMServers


def llm_servers(config: RouterConfig, options: dict[str, dict[str, Any]]) -> Application | None:
    """The in-cluster models' LLMServer deployments under their anchor (None: no model has
    `llm_config`). Serve options: the model's deployment_config, then GraphArgs.deployments
    under the deployment's name (app/llm/addressing.py)."""
    servers: dict[str, Application] = {}
    for model in config.providers.models:
        if model.llm_config is None:
            continue
        llm = model.llm_config
        name = deployment_name(model.name)
        servers[model.name] = (
            cast(Deployment, LLMServer)
            .options(name=name, **{**llm.deployment_options(), **options.get(name, {})})
            .bind(llm.model_loading_config.model_source, llm.served_name(model.name), llm.engine_kwargs)
        )
    if not servers:
        return None
    return cast(Deployment, LLMServers).options(**options.get("LLMServers", {})).bind(servers)
