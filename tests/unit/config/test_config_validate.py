"""Cross-reference rejections (each with its path) and warnings."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from app.config import ConfigError, parse_config
from app.config.document import RouterConfig
from app.config.routing import REFERENCE_ONLY_PLUGIN_TYPES
from app.config.signals import REFERENCE_ONLY_SIGNAL_TYPES
from app.config.validate import MMLU_PRO_CATEGORIES, semantic_issues

ROOT = Path(__file__).resolve().parents[3]
# The keyword/embedding example: its decisions (math, code, general, ...) are the fixtures here.
BASE: dict = yaml.safe_load((ROOT / "configs" / "examples" / "keywords.yaml").read_text())
# Indexes into the default config, by decision name.
D = {d["name"]: i for i, d in enumerate(BASE["routing"]["decisions"])}


def _decision(doc: dict, name: str) -> dict:
    return doc["routing"]["decisions"][D[name]]


def _reject(mutate: Callable[[dict], object]) -> list:
    doc = copy.deepcopy(BASE)
    mutate(doc)
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    return exc.value.issues


def _accept(mutate: Callable[[dict], object]) -> list[str]:
    doc = copy.deepcopy(BASE)
    mutate(doc)
    return parse_config(doc).warnings


REJECTIONS: list[tuple[str, Callable[[dict], object], str, str]] = [
    (
        "unknown modelRef",
        lambda d: _decision(d, "math")["modelRefs"][1].update(model="gpt-5"),
        f"routing.decisions[{D['math']}].modelRefs[1].model",
        "unknown_model",
    ),
    (
        "unknown default model",
        lambda d: d["providers"]["defaults"].update(default_model="gemma-generall"),
        "providers.defaults.default_model",
        "unknown_model",
    ),
    (
        "duplicate decision name",
        lambda d: _decision(d, "general").update(name="code"),
        f"routing.decisions[{D['general']}].name",
        "duplicate_name",
    ),
    (
        "duplicate provider model",
        lambda d: d["providers"]["models"][1].update(name="gemma-general"),
        "providers.models[1].name",
        "duplicate_name",
    ),
    (
        "duplicate keyword signal",
        lambda d: d["routing"]["signals"]["keywords"][2].update(name="urgent"),
        "routing.signals.keywords[2].name",
        "duplicate_name",
    ),
    (
        "duplicate embedding signal",
        lambda d: d["routing"]["signals"]["embeddings"][1].update(name="math_help"),
        "routing.signals.embeddings[1].name",
        "duplicate_name",
    ),
    (
        "duplicate domain signal",
        lambda d: d["routing"]["signals"]["domains"][13].update(name="biology"),
        "routing.signals.domains[13].name",
        "duplicate_name",
    ),
    (
        "unknown condition type",
        lambda d: _decision(d, "code")["rules"]["conditions"][0].update(type="keywords"),
        f"routing.decisions[{D['code']}].rules.conditions[0].type",
        "unknown_signal_type",
    ),
    (
        "reference-only condition type",
        lambda d: _decision(d, "code")["rules"]["conditions"][0].update(type="reask", name="again"),
        f"routing.decisions[{D['code']}].rules.conditions[0].type",
        "unsupported_signal",
    ),
    (
        "complexity condition without its level",
        lambda d: (
            d["routing"]["signals"].update(
                complexity=[
                    {"name": "depth", "hard": {"candidates": ["prove"]}, "easy": {"candidates": ["hi"]}}
                ]
            ),
            _decision(d, "code")["rules"]["conditions"][0].update(type="complexity", name="depth"),
        ),
        f"routing.decisions[{D['code']}].rules.conditions[0].name",
        "unknown_signal",
    ),
    (
        "undefined signal name (nested)",
        lambda d: _decision(d, "greeting")["rules"]["conditions"][1]["conditions"][0].update(
            name="huge_context"
        ),
        f"routing.decisions[{D['greeting']}].rules.conditions[1].conditions[0].name",
        "unknown_signal",
    ),
    (
        "undefined domain name",
        lambda d: _decision(d, "code")["rules"]["conditions"][1].update(type="domain", name="astrology"),
        f"routing.decisions[{D['code']}].rules.conditions[1].name",
        "unknown_signal",
    ),
    (
        "pii condition with no pii signals",
        lambda d: _decision(d, "code")["rules"]["conditions"].append({"type": "pii", "name": "any_pii"}),
        f"routing.decisions[{D['code']}].rules.conditions[2].name",
        "unknown_signal",
    ),
    (
        "unknown plugin type",
        lambda d: _decision(d, "code")["plugins"].append({"type": "teleport"}),
        f"routing.decisions[{D['code']}].plugins[2].type",
        "unknown_plugin",
    ),
    (
        "bad system_prompt mode",
        lambda d: _decision(d, "math")["plugins"][0]["configuration"].update(mode="append"),
        f"routing.decisions[{D['math']}].plugins[0].configuration.mode",
        "literal_error",
    ),
    (
        "system_prompt without text",
        lambda d: _decision(d, "math")["plugins"][0]["configuration"].pop("system_prompt"),
        f"routing.decisions[{D['math']}].plugins[0].configuration.system_prompt",
        "missing",
    ),
    (
        "cache threshold out of range",
        lambda d: _decision(d, "math")["plugins"][1]["configuration"].update(similarity_threshold=1.2),
        f"routing.decisions[{D['math']}].plugins[1].configuration.similarity_threshold",
        "less_than_equal",
    ),
    (
        "cache negative ttl",
        lambda d: _decision(d, "general")["plugins"][0]["configuration"].update(ttl_seconds=-1),
        f"routing.decisions[{D['general']}].plugins[0].configuration.ttl_seconds",
        "greater_than_equal",
    ),
    (
        "typo in a plugin configuration",
        lambda d: _decision(d, "greeting")["plugins"][0]["configuration"].update(mesage="hi"),
        f"routing.decisions[{D['greeting']}].plugins[0].configuration.mesage",
        "extra_forbidden",
    ),
    (
        "header_mutation on a transport header",
        lambda d: _decision(d, "general")["plugins"][1]["configuration"].update(delete=["Content-Length"]),
        f"routing.decisions[{D['general']}].plugins[1].configuration.delete",
        "value_error",
    ),
    (
        "header_mutation bad header name",
        lambda d: _decision(d, "general")["plugins"][1]["configuration"]["add"][0].update(name="X Bad"),
        f"routing.decisions[{D['general']}].plugins[1].configuration.add[0].name",
        "value_error",
    ),
    (
        "request_params zero limit",
        lambda d: _decision(d, "code")["plugins"][1]["configuration"].update(max_n=0),
        f"routing.decisions[{D['code']}].plugins[1].configuration.max_n",
        "greater_than_equal",
    ),
    (
        "two cache plugins in one decision",
        lambda d: _decision(d, "general")["plugins"].append({"type": "response_cache", "configuration": {}}),
        f"routing.decisions[{D['general']}].plugins[2].type",
        "duplicate_plugin",
    ),
    (
        "model without backend_refs",
        lambda d: d["providers"]["models"][1].update(backend_refs=[]),
        "providers.models[1].backend_refs",
        "no_backends",
    ),
    (
        "unknown reasoning family",
        lambda d: d["providers"]["models"][0].update(reasoning_family="llama"),
        "providers.models[0].reasoning_family",
        "unknown_reasoning_family",
    ),
    (
        "negative price",
        lambda d: d["providers"]["models"][1]["pricing"].update(completion_per_1m=-0.1),
        "providers.models[1].pricing.completion_per_1m",
        "greater_than_equal",
    ),
    (
        "context min > max",
        lambda d: d["routing"]["signals"]["context"][0].update(max_tokens="1K"),
        "routing.signals.context[0].min_tokens",
        "invalid_range",
    ),
    (
        "context without bounds",
        lambda d: d["routing"]["signals"]["context"][0].pop("min_tokens"),
        "routing.signals.context[0]",
        "empty_range",
    ),
    (
        "duplicate listener port",
        lambda d: d["listeners"].append({"name": "second", "port": 8801}),
        "listeners[1].port",
        "duplicate_port",
    ),
    (
        "listener on the metrics port",
        lambda d: d["listeners"][0].update(port=9190),
        "listeners[0].port",
        "port_conflict",
    ),
    (
        "unknown signal family",
        lambda d: d["routing"]["signals"].update(keyword=[{"name": "x", "keywords": ["y"]}]),
        "routing.signals.keyword",
        "unknown_family",
    ),
    (
        "invalid regex keyword",
        lambda d: d["routing"]["signals"]["keywords"][0].update(method="regex", keywords=["(unclosed"]),
        "routing.signals.keywords[0].keywords[0]",
        "invalid_regex",
    ),
    (
        "model named like the auto model",
        lambda d: d["providers"]["models"][0].update(name="MoM"),
        "providers.models[0].name",
        "reserved_name",
    ),
    (
        "domain model_scores naming an unknown model",
        lambda d: d["routing"]["signals"]["domains"][0].update(model_scores=[{"model": "nope", "score": 1}]),
        "routing.signals.domains[0].model_scores[0].model",
        "unknown_model",
    ),
    (
        "preferred endpoint not serving the decision",
        lambda d: _decision(d, "code").update(preferred_endpoints=["gpu-farm"]),
        f"routing.decisions[{D['code']}].preferred_endpoints[0]",
        "unknown_endpoint",
    ),
    (
        "bad backend endpoint",
        lambda d: d["providers"]["models"][0]["backend_refs"][0].update(endpoint="127.0.0.1"),
        "providers.models[0].backend_refs[0]",
        "value_error",
    ),
    (
        "bad retry_on",
        lambda d: d["providers"]["models"][0]["reliability"].update(retry_on="sometimes"),
        "providers.models[0].reliability.retry_on",
        "value_error",
    ),
    (
        "unknown api_format",
        lambda d: d["providers"]["models"][0].update(api_format="bedrock"),
        "providers.models[0].api_format",
        "literal_error",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "path", "code"), REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_rejections_name_the_path(case, mutate, path, code) -> None:
    issues = _reject(mutate)
    assert (path, code) in [(issue.path, issue.code) for issue in issues], [str(i) for i in issues]


def test_reference_only_signal_types_say_not_supported() -> None:
    for kind in sorted(REFERENCE_ONLY_SIGNAL_TYPES):
        issues = _reject(
            lambda d, kind=kind: _decision(d, "code")["rules"]["conditions"][0].update(type=kind)
        )
        assert f"signal type {kind!r} is not supported by svc-sr" in issues[0].message


def test_suggestions_for_near_misses() -> None:
    [issue] = _reject(lambda d: _decision(d, "math")["modelRefs"][0].update(model="gemma-expret"))
    assert "did you mean 'gemma-expert'" in issue.message


@pytest.mark.parametrize("category", MMLU_PRO_CATEGORIES)
def test_any_mmlu_category_is_a_valid_domain_condition(category: str) -> None:
    def mutate(doc: dict) -> None:
        doc["routing"]["signals"]["domains"] = []  # not declared: still accepted
        _decision(doc, "code")["rules"]["conditions"].append({"type": "domain", "name": category})

    _accept(mutate)


def test_declared_domain_aliases_are_valid_conditions() -> None:
    def mutate(doc: dict) -> None:
        doc["routing"]["signals"]["domains"] = [{"name": "stem", "mmlu_categories": ["math", "physics"]}]
        _decision(doc, "code")["rules"]["conditions"].append({"type": "domain", "name": "stem"})

    assert _accept(mutate) == []


def test_mmlu_categories_match_the_domain_classifier_labels() -> None:
    from app.models.domain import DOMAIN_CATEGORIES

    assert tuple(MMLU_PRO_CATEGORIES) == tuple(DOMAIN_CATEGORIES)


@pytest.mark.parametrize("plugin", sorted(REFERENCE_ONLY_PLUGIN_TYPES))
def test_reference_only_plugins_warn(plugin: str) -> None:
    warnings = _accept(
        lambda d: _decision(d, "code")["plugins"].append({"type": plugin, "configuration": {"x": 1}})
    )
    assert any(f"plugin {plugin!r} accepted but not applied" in w for w in warnings)


def test_reference_only_signal_family_warns() -> None:
    warnings = _accept(lambda d: d["routing"]["signals"].update(reasks=[{"name": "again"}]))
    assert any(w.startswith("routing.signals.reasks:") for w in warnings)


def test_decision_without_model_refs_warns_and_uses_default() -> None:
    warnings = _accept(lambda d: _decision(d, "code").update(modelRefs=[]))
    assert any(f"routing.decisions[{D['code']}].modelRefs" in w and "default_model" in w for w in warnings)


def test_decision_without_model_refs_and_no_default_is_an_error() -> None:
    def mutate(doc: dict) -> None:
        doc["providers"]["defaults"].pop("default_model")
        _decision(doc, "code").update(modelRefs=[])

    issues = _reject(mutate)
    assert (f"routing.decisions[{D['code']}].modelRefs", "no_model") in [(i.path, i.code) for i in issues]


def test_no_models_at_all_is_an_error() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"version": "v0.3"})
    assert ("providers.models", "no_models") in [(i.path, i.code) for i in exc.value.issues]


def test_use_reasoning_without_family_warns() -> None:
    warnings = _accept(lambda d: _decision(d, "math")["modelRefs"][0].update(use_reasoning=True))
    assert any("use_reasoning has no effect" in w for w in warnings)


def test_domain_that_can_never_match_warns() -> None:
    warnings = _accept(lambda d: d["routing"]["signals"]["domains"].append({"name": "astrology"}))
    assert any("never matches" in w for w in warnings)


def test_semantic_issues_on_a_model_built_in_code() -> None:
    config = RouterConfig.model_validate(BASE)
    errors, warnings = semantic_issues(config)
    assert errors == [] and warnings == []
    broken = config.model_copy(deep=True)
    broken.routing.decisions[0].modelRefs[0].model = "ghost"
    errors, _ = semantic_issues(broken)
    assert [(e.path, e.code) for e in errors] == [
        ("routing.decisions[0].modelRefs[0].model", "unknown_model")
    ]


def test_model_scores_with_odd_values_are_rejected_cleanly() -> None:
    issues = _reject(
        lambda d: d["routing"]["signals"]["domains"][0].update(
            model_scores=[{"model": {"x": 1}, "score": 1}, {"model": "gemma-general", "score": "high"}]
        )
    )
    assert {(i.path, i.code) for i in issues} == {
        ("routing.signals.domains[0].model_scores[0].model", "string_type"),
        ("routing.signals.domains[0].model_scores[1].score", "float_type"),
    }


def test_null_token_bounds_are_unset_not_a_crash() -> None:
    issues = _reject(lambda d: d["routing"]["signals"]["context"][0].update(min_tokens=None, max_tokens=None))
    assert [(i.path, i.code) for i in issues] == [("routing.signals.context[0]", "empty_range")]


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


def test_odd_values_anywhere_give_a_config_or_a_clean_error() -> None:
    import random

    rng = random.Random(2026)
    odd = [None, 0, -1, "x", "", [], {}, [None], {"a": 1}, 1e300, True, "2K", [{"name": 1}]]
    paths = list(_paths(BASE))[1:]
    outcomes = {"ok": 0, "rejected": 0}
    for _ in range(400):
        doc = copy.deepcopy(BASE)
        path = rng.choice(paths)
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = rng.choice(odd)
        try:
            parse_config(doc)
            outcomes["ok"] += 1
        except ConfigError as exc:
            outcomes["rejected"] += 1
            assert exc.issues and all(isinstance(i.path, str) and i.message for i in exc.issues)
    assert outcomes["rejected"] > 0 and outcomes["ok"] > 0


def _bind_guard(artifact: str) -> Callable[[dict], object]:
    def mutate(doc: dict) -> None:
        doc["model_deployments"] = {"guard": {"artifact": artifact}}
        doc.setdefault("global", {})["model_catalog"] = {"modules": {"prompt_guard": {"deployment": "guard"}}}

    return mutate


def test_a_binding_to_a_built_in_of_another_task_is_rejected() -> None:
    issues = _reject(_bind_guard("pii@main"))
    assert [(i.path, i.code) for i in issues] == [
        ("global.model_catalog.modules.prompt_guard.deployment", "binding_contract")
    ]
    assert issues[0].message == "'guard' serves token_spans; the prompt_guard binding reads label_scores"
    _accept(_bind_guard("jailbreak-guard"))
    _accept(_bind_guard("my-org/some-hub-guard"))  # not a built-in: its task is learned when it loads


def test_builtin_model_tasks_match_the_models_served() -> None:
    """app.config restates the built-ins' names and tasks as data (it may not import the
    models); this keeps that table equal to the registry and the srun catalog."""
    from app.config.builtin_models import BUILTIN_ALIASES, BUILTIN_TASKS
    from app.runtime import registry
    from app.srun import catalog

    served = {**registry.BUILTINS, **catalog.SPECS}
    assert {name: str(spec.task) for name, spec in served.items()} == BUILTIN_TASKS
    assert BUILTIN_ALIASES == {**registry.ALIASES, **catalog.ALIASES}
