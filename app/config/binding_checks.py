"""Checks of the routing bindings (docs/model-runtime.md "Routing bindings"): what each bound
deployment serves, and a bound model's labels against the signal names they stand for
(docs/model-runtime.md "Bindings to your own models").

A `domain_classifier` (or `classifier.<rule>` of a domain rule) or `pii_classifier` binding may
name a model of the user's own, whose labels are its config's (`id2label`). The binding's
`labels` map renames them: `{model label: signal name}`, a label left out keeps its own name.
Two checks, each naming the path to fix:
- here, from the document alone: every name a `labels` entry maps to is one the config declares
  (a domain rule's category, or the fallback category);
- with the model's labels in hand (app/runtime/bound_models.py reads them from its directory):
  every key of `labels` is one of the model's labels, and every model label maps to a declared
  name, so no answer of the model is a label nothing reads.
PII entity types are open (a model may find types the built-in detector does not), so a pii
binding's names are not checked against a list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.config.builtin_models import builtin_task
from app.config.document import RouterConfig
from app.config.errors import ConfigIssue
from app.config.model_deployments import BINDINGS, BindingSpec, ModelBinding, catalog_node, read_bindings

DEFAULT_FALLBACK = "other"
CODE = "binding_labels"


def domain_fallback(catalog: Mapping[str, Any]) -> str:
    """`modules.classifier.domain.fallback_category` (default `other`): the category a weak
    classification becomes."""
    fallback = catalog_node(catalog, ("modules", "classifier", "domain")).get("fallback_category")
    return fallback if isinstance(fallback, str) and fallback else DEFAULT_FALLBACK


def binding_issues(config: RouterConfig) -> tuple[list[ConfigIssue], list[str]]:
    """(errors, warnings). Runtime deployments are consumed by decision_model and the routing
    bindings; a bound built-in must answer what its binding reads (a guard bound to the PII
    detector would never flag a jailbreak); a label map names declared signal names."""
    bindings = read_bindings(config.global_.model_catalog)
    rule_specs = config.rule_binding_specs()
    used = {b.deployment for b in bindings.values()}
    if config.decision_model is not None:
        used.add(config.decision_model.deployment)
    warnings = [
        f"model_deployments.{name}: accepted but not applied: neither decision_model nor a binding "
        "(global.model_catalog.modules.*, safety.<rule>, classifier.<rule>) names it"
        for name in config.model_deployments
        if name not in used
    ]
    errors = []
    for name, binding in bindings.items():
        spec = rule_specs.get(name) or BINDINGS[name]
        task = builtin_task(config.model_deployments[binding.deployment].artifact)
        wanted = binding.contract or spec.contracts[0]
        if task is not None and task != wanted:
            errors.append(
                ConfigIssue(
                    path=f"{binding_path(spec)}.deployment",
                    message=f"{binding.deployment!r} serves {task}; the {name} binding reads {wanted}",
                    code="binding_contract",
                    stage="validate",
                )
            )
    if "prompt_guard" in bindings:
        warnings += [
            f"routing.signals.jailbreak[{index}]: method and pattern lists are not applied: "
            "the bound prompt_guard deployment's score decides"
            for index, rule in enumerate(config.routing.signals.jailbreak)
            if rule.method != "classifier" or rule.jailbreak_patterns or rule.benign_patterns
        ]
    return errors + label_map_issues(config), warnings


def custom_domain_model(config: RouterConfig) -> bool:
    """`domain_classifier` is bound to a model that is not a built-in (its own category set)."""
    binding = read_bindings(config.global_.model_catalog).get("domain_classifier")
    return binding is not None and builtin_task(config.model_deployments[binding.deployment].artifact) is None


def binding_path(spec: BindingSpec) -> str:
    return ".".join(("global", "model_catalog", *spec.path))


def label_bindings(config: RouterConfig) -> list[tuple[str, ModelBinding, BindingSpec]]:
    """(name, binding, spec) of every binding whose model's labels the config reads by name."""
    rule_specs = config.rule_binding_specs()
    out = []
    for name, binding in read_bindings(config.global_.model_catalog).items():
        spec = rule_specs.get(name) or BINDINGS[name]
        if spec.family in ("domain", "pii"):
            out.append((name, binding, spec))
    return out


def declared_names(config: RouterConfig, name: str, spec: BindingSpec) -> frozenset[str] | None:
    """Lower-cased names a label of this binding may stand for; None: any (PII entity types)."""
    if spec.family != "domain":
        return None
    rules = config.routing.signals.domains
    if name not in BINDINGS:  # classifier.<rule>: that rule only
        rules = [r for r in rules if r.name == spec.path[-1]]
    fallback = domain_fallback(config.global_.model_catalog).strip().lower()
    return frozenset({fallback}).union(*(rule.categories() for rule in rules))


def _unknown(target: str, declared: frozenset[str]) -> str:
    return (
        f"{target!r} is no domain rule's category nor the fallback category "
        f"(declared: {', '.join(sorted(declared))})"
    )


def label_map_issues(config: RouterConfig) -> list[ConfigIssue]:
    """Each `labels` entry that maps to a name the config does not declare."""
    issues = []
    for name, binding, spec in label_bindings(config):
        declared = declared_names(config, name, spec)
        for label, target in (binding.labels or {}).items():
            if declared is not None and target.strip().lower() not in declared:
                issues.append(
                    ConfigIssue(
                        path=f"{binding_path(spec)}.labels.{label}",
                        message=_unknown(target, declared),
                        code=CODE,
                        stage="validate",
                    )
                )
    return issues


def model_label_issues(
    config: RouterConfig, name: str, model_labels: Sequence[str], source: str
) -> list[ConfigIssue]:
    """The binding `name`'s label map against its model's labels (`source`: where they were
    read, for the message): a mapped label the model lacks, a model label that maps to nothing
    declared."""
    (binding, spec) = next((b, s) for n, b, s in label_bindings(config) if n == name)
    path = f"{binding_path(spec)}.labels"
    mapping = binding.labels or {}
    issues = [
        ConfigIssue(
            path=f"{path}.{label}",
            message=f"the model at {source} has no label {label!r} (its labels: {', '.join(model_labels)})",
            code=CODE,
            stage="validate",
        )
        for label in mapping
        if label not in model_labels
    ]
    declared = declared_names(config, name, spec)
    if declared is None:
        return issues
    for label in model_labels:
        if label not in mapping and label.strip().lower() not in declared:
            issues.append(
                ConfigIssue(
                    path=f"{path}.{label}",
                    message=f"the model at {source} answers {label!r}, which maps to nothing the config "
                    f"declares: {_unknown(label, declared)}; map it in labels",
                    code=CODE,
                    stage="validate",
                )
            )
    return issues
