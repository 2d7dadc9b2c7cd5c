"""The `model_deployments` config shapes (spec 2 "Router settings for managed runtimes"):
the deployment entries, `decision_model.deployment`, and the bindings of routing features to
deployments under `global.model_catalog`, with their cross-reference checks.

They are configuration, read by app/config (RouterConfig, validation) and by the svc-srun
hosting in app/srun; app.config sits below app.srun, so they live here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

_COMMIT = re.compile(r"[0-9a-f]{40}")
QUESTION_MODELS = frozenset({"decision-model", "decisions", "systemone"})


class StrictSettings(BaseModel):
    """A settings block that rejects unknown keys."""

    model_config = ConfigDict(extra="forbid")


class InputSettings(StrictSettings):
    max_tokens: int | None = Field(default=None, ge=3)
    overflow: Literal["reject", "truncate", "window"] | None = None


class ReplicaSettings(StrictSettings):
    """One worker placement: a managed `device`, or an `endpoint` (+ `served_name`) to attach to."""

    device: str | None = None
    endpoint: str | None = None
    served_name: str | None = None

    @model_validator(mode="after")
    def _one_placement(self) -> ReplicaSettings:
        if (self.device is None) == (self.endpoint is None):
            raise ValueError("a replica names either device or endpoint")
        if self.served_name is not None and self.endpoint is None:
            raise ValueError("served_name goes with endpoint")
        return self


class ModelDeployment(StrictSettings):
    provider: Literal["model_runtime"] = "model_runtime"
    artifact: str = Field(min_length=1, description="built-in name, hub repository or absolute local path")
    revision: str | None = None
    device: str | None = None
    profile: str | None = None
    process: str | None = None
    input: InputSettings | None = None
    replicas: list[ReplicaSettings] | None = None
    endpoint: str | None = None
    served_name: str | None = None

    @field_validator("revision")
    @classmethod
    def _immutable(cls, value: str | None) -> str | None:
        if value is not None and not _COMMIT.fullmatch(value):
            raise ValueError("revision must be an immutable 40-character commit")
        return value

    @model_validator(mode="after")
    def _check(self) -> ModelDeployment:
        if self.replicas is not None:
            if not self.replicas:
                raise ValueError("replicas: give at least one replica or leave it out")
            placed = [k for k in ("device", "endpoint", "served_name") if getattr(self, k) is not None]
            if placed:
                raise ValueError(f"replicas[] is not combined with deployment-level {', '.join(placed)}")
        if self.endpoint is not None and self.process is not None:
            raise ValueError("process applies to managed deployments, not to an endpoint")
        if self.revision is not None and Path(self.artifact).is_absolute():
            raise ValueError("revision applies to hub artifacts, not to a local path")
        if self.answers_questions and self.input is not None:
            if self.input.overflow not in (None, "window"):
                raise ValueError("input.overflow: a deployment that answers questions takes only window")
            if self.input.max_tokens is None:
                raise ValueError(
                    "input.max_tokens: required (the scan budget) for a question-answering deployment"
                )
        return self

    @property
    def answers_questions(self) -> bool:
        return self.artifact.partition("@")[0] in QUESTION_MODELS

    @property
    def managed(self) -> bool:
        if self.replicas is not None:
            return any(r.endpoint is None for r in self.replicas)
        return self.endpoint is None

    def placements(self) -> list[ReplicaSettings]:
        if self.replicas is not None:
            return list(self.replicas)
        if self.endpoint is not None:
            return [ReplicaSettings(endpoint=self.endpoint, served_name=self.served_name)]
        return [ReplicaSettings(device=self.device or "auto")]


class DecisionModelRef(StrictSettings):
    deployment: str = Field(min_length=1)


OnUnscanned = Literal["block", "allow"]


# -- bindings: a routing feature evaluated by a model_deployments entry -------------------------

Contract = Literal["label_probabilities", "label_scores", "token_spans"]
BINDING_KEYS = ("deployment", "contract", "head")


class ModelBinding(StrictSettings):
    """`deployment` (a key of model_deployments), `contract` (the answer type read) and `head`
    (the label whose score is read; prompt_guard only, default `jailbreak`)."""

    deployment: str = Field(min_length=1)
    contract: Contract | None = None
    head: str | None = Field(default=None, min_length=1)


@dataclass(frozen=True)
class BindingSpec:
    path: tuple[str, ...]  # under global.model_catalog
    contracts: tuple[str, ...]  # the first is the default
    family: str  # the routing signal family it evaluates
    safety: bool  # a safety signal: on_unscanned applies
    head: str | None = None  # default head; None: the binding takes none


# The bindings the routing pipeline consumes. Each sits in its module's own section, where the
# reference layout keeps that module's settings (legacy `prompt_guard`, `classifier.category_model`,
# `classifier.pii_model` migrate there unchanged).
BINDINGS: dict[str, BindingSpec] = {
    "domain_classifier": BindingSpec(
        ("modules", "classifier", "domain"), ("label_probabilities",), "domain", False
    ),
    "pii_classifier": BindingSpec(("modules", "classifier", "pii"), ("token_spans",), "pii", True),
    "prompt_guard": BindingSpec(
        ("modules", "prompt_guard"),
        ("label_scores", "label_probabilities"),
        "jailbreak",
        True,
        head="jailbreak",
    ),
}


def catalog_node(catalog: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """`global.model_catalog.<path>` as a dict ({} when absent or not a mapping)."""
    node: Any = catalog
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, dict) else {}


def read_bindings(catalog: Mapping[str, Any]) -> dict[str, ModelBinding]:
    """The bindings set in `global.model_catalog` by binding name. ValueError naming the path
    (relative to global.model_catalog) for a malformed one."""
    out: dict[str, ModelBinding] = {}
    for name, spec in BINDINGS.items():
        section = catalog_node(catalog, spec.path)
        given = {key: section[key] for key in BINDING_KEYS if key in section}
        if not given:
            continue
        where = ".".join(spec.path)
        try:
            binding = ModelBinding.model_validate(given)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "deployment"
            raise ValueError(f"{where}.{field}: {first['msg']}") from None
        if binding.contract is not None and binding.contract not in spec.contracts:
            raise ValueError(
                f"{where}.contract: {name} reads {' or '.join(spec.contracts)}, got {binding.contract!r}"
            )
        if binding.head is not None and spec.head is None:
            raise ValueError(f"{where}.head: {name} reads no head (head applies to prompt_guard)")
        out[name] = binding
    return out


def on_unscanned_of(catalog: Mapping[str, Any], binding: str) -> OnUnscanned:
    """`on_unscanned` of a safety binding's module (default `block`)."""
    return (
        "allow" if catalog_node(catalog, BINDINGS[binding].path).get("on_unscanned") == "allow" else "block"
    )


def check_references(
    model_deployments: Mapping[str, ModelDeployment],
    decision_model: DecisionModelRef | None,
    bindings: Mapping[str, ModelBinding] | None = None,
) -> None:
    """ValueError unless decision_model and every binding name a deployment and shared processes
    share a device (also checked by the router config, app/config/models.py)."""
    if decision_model is not None and decision_model.deployment not in model_deployments:
        raise ValueError(
            f"decision_model.deployment: {decision_model.deployment!r} is not a key of model_deployments"
        )
    for name, binding in (bindings or {}).items():
        if binding.deployment not in model_deployments:
            where = ".".join(("global", "model_catalog", *BINDINGS[name].path, "deployment"))
            raise ValueError(
                f"{where}: {binding.deployment!r} is not a key of model_deployments ({name} binding)"
            )
    processes: dict[str, str | None] = {}
    for name, dep in model_deployments.items():
        if dep.process is None:
            continue
        device = dep.device or "auto"
        if processes.setdefault(dep.process, device) != device:
            raise ValueError(
                f"model_deployments.{name}: process {dep.process!r} is shared by different devices"
            )
