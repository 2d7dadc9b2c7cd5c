"""Pydantic v2 models of the canonical v0.3 configuration document.

Key names follow the reference router (vllm-project/semantic-router) so its users'
files load unchanged. This module holds the document root and its listeners; each
section has its own module: providers.py, signals.py and routing.py (the `routing:`
section), global_config.py (`global:`), model_deployments.py; model_base.py holds the
strict/open base classes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from app.config.global_config import GlobalConfig
from app.config.model_base import Strict
from app.config.model_deployments import (
    BindingSpec,
    DecisionModelRef,
    ModelDeployment,
    check_references,
    check_rule_bindings,
    read_bindings,
)
from app.config.providers import ProviderModel, Providers
from app.config.recipes import Entrypoint, Recipe
from app.config.routing import Routing

# ---------------------------------------------------------------- listeners


class Listener(Strict):
    name: str
    address: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)
    timeout: str | None = None
    # svc-sr extension: every data-plane request through this listener needs an issued API key
    # (docs/security.md "Keys and budgets"); false on a laptop listener bound to 127.0.0.1.
    api_key_required: bool = False
    # svc-sr extension: the listener's public model grants, provider model names (None: every
    # model). They bound every key's grants, and alone apply to a caller without a key; MoM never
    # leaves them (docs/security.md "Keys and budgets").
    models: list[str] | None = None


# ---------------------------------------------------------------- document


class RouterConfig(Strict):
    """The canonical v0.3 document."""

    version: Literal["v0.3"] = "v0.3"
    listeners: list[Listener] = Field(default_factory=list)
    providers: Providers = Field(default_factory=Providers)
    routing: Routing = Field(default_factory=Routing)
    global_: GlobalConfig = Field(default_factory=GlobalConfig, alias="global")
    # Virtual model names -> a named recipe (a `routing:` of its own); app/config/recipes.py.
    entrypoints: list[Entrypoint] = Field(default_factory=list)
    recipes: list[Recipe] = Field(default_factory=list)
    # Model-runtime deployments: provider model_runtime, managed by the router
    # (`svc-srun run` over a Unix socket) or attached through `endpoint`; docs/model-runtime.md.
    model_deployments: dict[str, ModelDeployment] = Field(default_factory=dict)
    # The deployment answering /v1/decisions and /v1/systemone (absent: the built-in decision model).
    decision_model: DecisionModelRef | None = None

    @model_validator(mode="after")
    def _runtime_refs(self) -> RouterConfig:
        configured = {m.name for m in self.providers.models}
        for listener in self.listeners:
            unknown = sorted(set(listener.models or []) - configured)
            if unknown:
                raise ValueError(f"listener {listener.name!r} grants unknown models: {', '.join(unknown)}")
        bindings = read_bindings(self.global_.model_catalog)
        check_references(self.model_deployments, self.decision_model, bindings)
        self.rule_binding_specs()
        return self

    def rule_binding_specs(self) -> dict[str, BindingSpec]:
        """The per-rule bindings (`safety.<rule>`, `classifier.<rule>`) with their rule's family."""
        signals = self.routing.signals
        rules: dict[str, list[str]] = {
            "domain": [r.name for r in signals.domains],
            "pii": [r.name for r in signals.pii],
            "jailbreak": [r.name for r in signals.jailbreak],
            "fact_check": [r.name for r in signals.fact_check],
            "user_feedback": [r.name for r in signals.user_feedbacks],
            "modality": [r.name for r in signals.modality],
        }
        return check_rule_bindings(read_bindings(self.global_.model_catalog), rules)

    # ---- lookups used by the pipeline
    def model(self, name: str) -> ProviderModel | None:
        for model in self.providers.models:
            if model.name == name or name in model.external_model_ids.values():
                return model
        return None

    @property
    def auto_model_names(self) -> set[str]:
        settings = self.global_.router
        return {settings.auto_model_name, "MoM", "auto", *settings.auto_model_names}

    @property
    def default_model(self) -> str | None:
        return self.providers.defaults.default_model

    def to_document(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
