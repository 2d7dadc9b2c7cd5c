"""The `model_deployments` config shapes (docs/model-runtime.md, "Router-managed runtimes"):
the deployment entries, `decision_model.deployment`, and the bindings of routing features to
deployments under `global.model_catalog`, with their cross-reference checks.

They are configuration, read by app/config (RouterConfig, validation) and by the svc-srun
hosting in app/srun; app.config sits below app.srun, so they live here.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

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

Contract = Literal["label_probabilities", "label_scores", "token_spans", "embeddings"]
BINDING_KEYS = ("deployment", "contract", "head", "labels")
# Families whose bound model's own labels a `labels` map renames (docs/model-runtime.md "Bindings
# to your own models"): a category set's labels to domain names, a token classifier's to PII entity types.
LABEL_MAP_FAMILIES = ("domain", "pii")


class ModelBinding(StrictSettings):
    """`deployment` (a key of model_deployments), `contract` (the answer type read), `head`
    (the label whose score is read; prompt_guard only, default `jailbreak`) and `labels` (the
    model's label -> the signal name it stands for; a label left out keeps its own name)."""

    deployment: str = Field(min_length=1)
    contract: Contract | None = None
    head: str | None = Field(default=None, min_length=1)
    labels: dict[str, Annotated[str, Field(min_length=1)]] | None = None


@dataclass(frozen=True)
class BindingSpec:
    path: tuple[str, ...]  # under global.model_catalog
    contracts: tuple[str, ...]  # the first is the default
    family: str  # the routing signal family it evaluates ("" for none)
    safety: bool  # a safety signal: on_unscanned applies
    head: str | None = None  # default head; None: the binding takes none
    # Why a model_deployments binding is refused (the graph serves it, app/management/graph_schemas.py);
    # None: a model-runtime deployment can serve it.
    refused: str | None = None


# Answer types each signal family can read from a deployment, and the default head.
FAMILY_CONTRACTS: dict[str, tuple[str, ...]] = {
    "domain": ("label_probabilities",),
    "pii": ("token_spans",),
    "jailbreak": ("label_scores", "label_probabilities"),
    "fact_check": ("label_probabilities", "label_scores"),
    "user_feedback": ("label_probabilities", "label_scores"),
    "modality": ("label_probabilities", "label_scores"),
}
SAFETY_FAMILIES = ("jailbreak", "pii")
LABEL_FAMILIES = ("fact_check", "user_feedback", "modality")
# Per-rule bindings `safety.<rule>` / `classifier.<rule>` (binding names the contract fixes): the section
# `global.model_catalog.<kind>.<rule>` binds one routing.signals rule of these families.
RULE_KINDS: dict[str, tuple[str, ...]] = {
    "safety": SAFETY_FAMILIES,
    "classifier": ("domain", *LABEL_FAMILIES),
}
_GRAPH_ONLY = (
    "the hallucination check reads the graph Embedding deployment's MiniLM vectors (the space the "
    "learned heads read); no model_deployments binding"
)


def _family(path: tuple[str, ...], family: str, head: str | None = None) -> BindingSpec:
    return BindingSpec(path, FAMILY_CONTRACTS[family], family, family in SAFETY_FAMILIES, head)


# The contract's binding names (docs/model-runtime.md "Routing bindings"). Each sits in its
# module's own section, where the reference layout keeps that module's settings (the flat
# layout's `prompt_guard`, `classifier.category_model`, `classifier.pii_model`,
# `feedback_detector`, `modality_detector`, `hallucination_mitigation` migrate there
# unchanged). Which model serves each when unbound: app/management/graph_schemas.py.
BINDINGS: dict[str, BindingSpec] = {
    "domain_classifier": _family(("modules", "classifier", "domain"), "domain"),
    "pii_classifier": _family(("modules", "classifier", "pii"), "pii"),
    "prompt_guard": _family(("modules", "prompt_guard"), "jailbreak", head="jailbreak"),
    "fact_check_classifier": _family(("modules", "classifier", "fact_check"), "fact_check"),
    "feedback_detector": _family(("modules", "feedback_detector"), "user_feedback"),
    "modality_detector": _family(("modules", "modality_detector"), "modality"),
    "hallucination_detector": BindingSpec(
        ("modules", "hallucination_mitigation"), (), "", False, refused=_GRAPH_ONLY
    ),
    # The embedding rules and the response cache read its vectors; the learned heads keep the
    # graph's MiniLM vector they were trained on (docs/model-runtime.md "Bindings to your own models").
    "embedding": BindingSpec(("embeddings", "semantic"), ("embeddings",), "embedding", False),
    "rag.reranker": BindingSpec(
        ("modules", "rag", "reranker"),
        (),
        "",
        False,
        refused="the reranker fuses the graph Embedding deployment's vectors with BM25 in the Ingress "
        "(app/srun/rerank.py); no model_deployments binding",
    ),
}


def rule_spec(kind: str, rule: str, family: str) -> BindingSpec:
    """The spec of a per-rule binding `<kind>.<rule>` whose rule is of `family`."""
    head = "jailbreak" if family == "jailbreak" else None  # label families: the rule's name
    return BindingSpec((kind, rule), FAMILY_CONTRACTS[family], family, family in SAFETY_FAMILIES, head)


def spec_of(name: str) -> BindingSpec:
    """A binding name's spec; a per-rule name's family is not known here ("")."""
    kind, _, rule = name.partition(".")
    if name in BINDINGS:
        return BINDINGS[name]
    return BindingSpec((kind, rule), (), "", kind == "safety")


def _validated(where: str, name: str, spec: BindingSpec, given: dict[str, Any]) -> ModelBinding:
    if spec.refused is not None:
        raise ValueError(f"{where}.deployment: {name} cannot be bound to a deployment: {spec.refused}")
    try:
        binding = ModelBinding.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "deployment"
        raise ValueError(f"{where}.{field}: {first['msg']}") from None
    if spec.contracts and binding.contract is not None and binding.contract not in spec.contracts:
        raise ValueError(
            f"{where}.contract: {name} reads {' or '.join(spec.contracts)}, got {binding.contract!r}"
        )
    if binding.head is not None and spec.head is None and name in BINDINGS:
        raise ValueError(
            f"{where}.head: {name} reads no head (head applies to prompt_guard and per-rule bindings)"
        )
    if binding.labels is not None and name in BINDINGS:
        _label_map_family(where, name, spec.family)
    return binding


def _label_map_family(where: str, name: str, family: str) -> None:
    if family not in LABEL_MAP_FAMILIES:
        raise ValueError(
            f"{where}.labels: {name} reads a {family or 'graph'} model; labels maps the labels of a "
            f"{' or '.join(LABEL_MAP_FAMILIES)} model to signal names"
        )


def catalog_node(catalog: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """`global.model_catalog.<path>` as a dict ({} when absent or not a mapping)."""
    node: Any = catalog
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, dict) else {}


def read_bindings(catalog: Mapping[str, Any]) -> dict[str, ModelBinding]:
    """The bindings set in `global.model_catalog` by binding name (per-rule ones as
    `safety.<rule>` / `classifier.<rule>`). ValueError naming the path (relative to
    global.model_catalog) for a malformed one or one svc-sr cannot serve."""
    out: dict[str, ModelBinding] = {}
    for name, spec in BINDINGS.items():
        section = catalog_node(catalog, spec.path)
        given = {key: section[key] for key in BINDING_KEYS if key in section}
        if given:
            out[name] = _validated(".".join(spec.path), name, spec, given)
    for kind in RULE_KINDS:
        rules = catalog.get(kind)
        if rules is None:
            continue
        if not isinstance(rules, Mapping):
            raise ValueError(f"{kind}: a mapping of rule name to binding, got {type(rules).__name__}")
        for rule, section in rules.items():
            if not isinstance(section, Mapping):
                raise ValueError(f"{kind}.{rule}: a binding {{deployment, contract, head}}")
            extra = sorted(set(section) - set(BINDING_KEYS) - {"on_unscanned"})
            if extra:
                raise ValueError(f"{kind}.{rule}.{extra[0]}: not a binding key ({', '.join(BINDING_KEYS)})")
            name = f"{kind}.{rule}"
            if section.get("on_unscanned", "block") not in ("block", "allow"):
                raise ValueError(f"{name}.on_unscanned: 'block' or 'allow', got {section['on_unscanned']!r}")
            given = {key: section[key] for key in BINDING_KEYS if key in section}
            out[name] = _validated(name, name, spec_of(name), given)
    return out


def check_rule_bindings(
    bindings: Mapping[str, ModelBinding], rules: Mapping[str, Collection[str]]
) -> dict[str, BindingSpec]:
    """The spec of every per-rule binding, from the family of the rule it names (`rules`:
    rule names by family). ValueError with the path for a rule of no family its kind binds
    or a contract that family cannot read."""
    out: dict[str, BindingSpec] = {}
    for name, binding in bindings.items():
        if name in BINDINGS:
            continue
        kind, _, rule = name.partition(".")
        where = f"global.model_catalog.{name}"
        families = [f for f in RULE_KINDS[kind] if rule in rules.get(f, ())]
        if not families:
            raise ValueError(
                f"{where}: no routing.signals rule {rule!r} of {' / '.join(RULE_KINDS[kind])} to bind"
            )
        if len(families) > 1:
            raise ValueError(f"{where}: rule {rule!r} is ambiguous ({', '.join(families)})")
        spec = rule_spec(kind, rule, families[0])
        if binding.labels is not None:
            _label_map_family(where, name, families[0])
        if binding.contract is not None and binding.contract not in spec.contracts:
            raise ValueError(
                f"{where}.contract: a {families[0]} rule reads {' or '.join(spec.contracts)}, "
                f"got {binding.contract!r}"
            )
        out[name] = spec
    return out


def on_unscanned_of(catalog: Mapping[str, Any], binding: str) -> OnUnscanned:
    """`on_unscanned` of a safety binding's module (default `block`)."""
    return "allow" if catalog_node(catalog, spec_of(binding).path).get("on_unscanned") == "allow" else "block"


def check_references(
    model_deployments: Mapping[str, ModelDeployment],
    decision_model: DecisionModelRef | None,
    bindings: Mapping[str, ModelBinding] | None = None,
) -> None:
    """ValueError unless decision_model and every binding name a deployment and shared processes
    share a device (also checked by the router config, app/config/document.py)."""
    if decision_model is not None and decision_model.deployment not in model_deployments:
        raise ValueError(
            f"decision_model.deployment: {decision_model.deployment!r} is not a key of model_deployments"
        )
    for name, binding in (bindings or {}).items():
        if binding.deployment not in model_deployments:
            where = ".".join(("global", "model_catalog", *spec_of(name).path, "deployment"))
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
