"""Loader: files and text in, RouterConfig or ConfigError (with paths) out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config import ConfigError, LoadedConfig, load_config, parse_config, to_yaml
from app.config.document import RouterConfig
from app.config.loader import MAX_NODES, config_hash
from app.config.signals import ContextSignal, parse_token_count
from app.models.domain import DOMAIN_CATEGORIES
from app.pipeline.plugins import compile_guards
from app.pipeline.signals.harmful import prompt_guard_harmful_rule
from app.pipeline.signals.jailbreak import prompt_guard_rule

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "configs" / "config.yaml"
EXAMPLES = sorted((ROOT / "configs" / "examples").glob("*.yaml"))
DATA = ROOT / "tests" / "data" / "configs"


def _issues(exc: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    return {issue.path: issue.code for issue in exc.value.issues}


# ---------------------------------------------------------------- the shipped configs


def test_default_config_loads_without_warnings() -> None:
    loaded = load_config(DEFAULT)
    assert isinstance(loaded, LoadedConfig)
    assert loaded.legacy is False
    assert loaded.warnings == []
    assert len(loaded.source_hash) == 64
    config = loaded.config
    assert config.default_model == "gemma-general"
    assert [m.name for m in config.providers.models] == ["gemma-general", "gemma-expert"]
    for model in config.providers.models:
        assert model.provider_model_id == "gemma-3-270m"
        assert [ref.resolved_base_url() for ref in model.backend_refs] == ["http://127.0.0.1:18082"]
        assert model.pricing is not None
    prices = {m.name: m.pricing.prompt_per_1m for m in config.providers.models}
    assert prices["gemma-general"] != prices["gemma-expert"]
    assert set(config.providers.defaults.reasoning_families) >= {"qwen3", "gpt-oss", "deepseek"}
    assert config.routing.signals.context[0].min_tokens == 2048
    # The 14 MMLU-Pro categories, each in exactly one declared domain group.
    grouped = [c for domain in config.routing.signals.domains for c in domain.mmlu_categories]
    assert sorted(grouped) == sorted(DOMAIN_CATEGORIES)
    decisions = {d.name: d for d in config.routing.decisions}
    assert {"greeting", "math", "code", "long_context", "general"} <= set(decisions)
    assert "fast_response" in [p.type for p in decisions["greeting"].plugins]
    assert {"system_prompt", "semantic-cache"} <= {p.type for p in decisions["math"].plugins}
    assert {"semantic-cache", "header_mutation"} <= {p.type for p in decisions["general"].plugins}
    cache = config.global_.stores.response_cache
    assert (
        cache.enabled,
        cache.backend_type,
        cache.similarity_threshold,
        cache.ttl_seconds,
        cache.max_entries,
    ) == (True, "memory", 0.9, 3600, 1000)
    assert config.global_.router.auto_model_name == "MoM"
    assert config.global_.services.management_api.port == 8080
    assert config.global_.services.observability.metrics.port == 9190
    assert [(lis.name, lis.address, lis.port) for lis in config.listeners] == [("http", "127.0.0.1", 8801)]


def _condition_types(cond: Any) -> set[str]:
    if cond is None:
        return set()
    return {cond.type} if cond.is_leaf else set().union(*(_condition_types(c) for c in cond.conditions))


STRUCTURED_PII = {
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "US_SSN",
    "IBAN_CODE",
    "IP_ADDRESS",
    "STREET_ADDRESS",
    "US_DRIVER_LICENSE",
}


def test_the_default_config_is_safe_and_routes_by_domain() -> None:
    """Safe by default (issue 22): the global prompt guard blocks jailbreaks and harmful
    requests, every decision's pii plugin denies the structured identifiers, and the decisions
    route on the domain classifier. The blocks themselves are tested end to end in
    tests/integration/test_default_config.py."""
    config = load_config(DEFAULT).config
    assert prompt_guard_rule(config) is not None
    assert prompt_guard_harmful_rule(config) is not None
    for decision in config.routing.decisions:
        rules = dict(compile_guards(decision))
        assert "pii" in rules, decision.name
        allowed = set(rules["pii"].pii_types_allowed)
        assert allowed and not (allowed & STRUCTURED_PII), (decision.name, allowed)
    used = set().union(*(_condition_types(d.rules) for d in config.routing.decisions))
    assert "domain" in used


def test_the_keywords_example_needs_no_classifier_and_no_guard() -> None:
    """configs/examples/keywords.yaml: the light configuration (no domain classifier, no safety
    models), for a machine that should load only the encoder."""
    config = load_config(ROOT / "configs" / "examples" / "keywords.yaml").config
    used = set().union(*(_condition_types(d.rules) for d in config.routing.decisions))
    assert "domain" not in used
    assert {"keyword", "embedding", "context"} <= used
    assert prompt_guard_rule(config) is None
    assert not any(compile_guards(d) for d in config.routing.decisions)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_load(path: Path) -> None:
    loaded = load_config(path)
    assert loaded.config.providers.models


def test_domains_example_routes_on_domains() -> None:
    config = load_config(ROOT / "configs" / "examples" / "domains.yaml").config
    leaves = [c for d in config.routing.decisions for c in (d.rules.conditions if d.rules else [])]
    assert any(c.type == "domain" for c in leaves)


# ---------------------------------------------------------------- parse stage


def test_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(DATA / "bad-syntax.yaml")
    [issue] = exc.value.issues
    assert issue.stage == "parse"
    assert issue.code == "yaml_syntax"
    assert "line 6" in issue.message
    assert str(DATA / "bad-syntax.yaml") in str(exc.value)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", "empty"),
        ("  \n# just a comment\n", "empty"),
        ("- a\n- b\n", "not_a_mapping"),
        ("just text", "not_a_mapping"),
        ("42", "not_a_mapping"),
        ("version: v0.3\nlisteners: []\nlisteners: []\n", "duplicate_key"),
        ("version: v0.3\n\tlisteners: []\n", "yaml_syntax"),
        ('{"version": "v0.3",, }', "json_syntax"),
        ("a: &a [1, *a]\n", "recursive_alias"),
    ],
)
def test_parse_errors(text: str, code: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text)
    assert [(i.stage, i.code) for i in exc.value.issues] == [("parse", code)]


def test_duplicate_key_reports_line() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config("version: v0.3\nproviders:\n  models: []\n  models: []\n")
    assert "line 4" in exc.value.issues[0].message


def test_yaml_merge_keys_may_be_overridden() -> None:
    text = (
        DATA / "minimal.yaml"
    ).read_text() + "listeners:\n  - &l {name: a, port: 9001}\n  - <<: *l\n    name: b\n    port: 9002\n"
    config = parse_config(text).config
    assert [(lis.name, lis.port) for lis in config.listeners] == [("a", 9001), ("b", 9002)]


def test_alias_bomb_is_refused() -> None:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 8):
        refs = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"l{level}: &l{level} [{refs}]")
    with pytest.raises(ConfigError) as exc:
        parse_config("\n".join(lines))
    assert exc.value.issues[0].code == "too_large"
    assert str(MAX_NODES) in exc.value.issues[0].message


def test_missing_file_and_bad_encoding(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path / "nope.yaml")
    assert exc.value.issues[0].code == "unreadable"
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as exc:
        load_config(bad)
    assert exc.value.issues[0].code == "not_utf8"


def test_non_mapping_python_input() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config([1, 2])  # type: ignore[arg-type]
    assert exc.value.issues[0].code == "not_a_mapping"


def test_json_text_and_bytes_are_accepted() -> None:
    document = yaml.safe_load((DATA / "minimal.yaml").read_text())
    from_json = parse_config(json.dumps(document))
    from_bytes = parse_config((DATA / "minimal.yaml").read_bytes())
    from_dict = parse_config(document)
    assert from_json.source_hash == from_bytes.source_hash == from_dict.source_hash


def test_environment_variables_are_not_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVC_SR_TEST_HOST", "evil.example")
    text = (DATA / "minimal.yaml").read_text().replace("127.0.0.1:18082", "${SVC_SR_TEST_HOST}:80")
    with pytest.raises(ConfigError) as exc:  # the literal text is not a host:port
        parse_config(text)
    assert "${SVC_SR_TEST_HOST}" in str(exc.value)
    assert "evil.example" not in str(exc.value)
    document = yaml.safe_load(DEFAULT.read_text())
    [prompt] = [p for p in document["routing"]["decisions"][2]["plugins"] if p["type"] == "system_prompt"]
    prompt["configuration"]["system_prompt"] = "$SVC_SR_TEST_HOST"
    loaded = parse_config(document)
    [plugin] = [p for p in loaded.config.routing.decisions[2].plugins if p.type == "system_prompt"]
    assert plugin.configuration["system_prompt"] == "$SVC_SR_TEST_HOST"


def test_parse_config_does_not_mutate_its_input() -> None:
    document = yaml.safe_load(DEFAULT.read_text())
    snapshot = json.dumps(document, sort_keys=True)
    parse_config(document)
    assert json.dumps(document, sort_keys=True) == snapshot


# ---------------------------------------------------------------- schema stage paths


def test_every_issue_is_reported_with_its_path() -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(DATA / "invalid-many.yaml")
    issues = _issues(exc)
    assert issues == {
        "listeners[1].port": "duplicate_port",
        "providers.defaults.default_model": "unknown_model",
        "routing.decisions[0].rules.conditions[0].name": "unknown_signal",
        "routing.decisions[0].modelRefs[0].model": "unknown_model",
        "routing.decisions[1].name": "duplicate_name",
        "routing.decisions[1].plugins[0].type": "unknown_plugin",
    }
    assert all(issue.stage == "validate" for issue in exc.value.issues)
    text = str(exc.value)
    assert "6 issues" in text
    for path in issues:
        assert path in text


def test_schema_errors_use_the_global_alias() -> None:
    document = yaml.safe_load((DATA / "minimal.yaml").read_text())
    document["global"] = {"stores": {"response_cache": {"similarity_threshold": 1.5}}}
    with pytest.raises(ConfigError) as exc:
        parse_config(document)
    assert _issues(exc) == {"global.stores.response_cache.similarity_threshold": "less_than_equal"}
    document["global_"] = document.pop("global")  # python field name also accepted; path still `global`
    with pytest.raises(ConfigError) as exc:
        parse_config(document)
    assert list(_issues(exc)) == ["global.stores.response_cache.similarity_threshold"]


def test_unknown_key_suggests_the_right_one() -> None:
    document = yaml.safe_load(DEFAULT.read_text())
    document["routing"]["decisions"][1]["modelRef"] = document["routing"]["decisions"][1].pop("modelRefs")
    with pytest.raises(ConfigError) as exc:
        parse_config(document)
    [issue] = exc.value.issues
    assert issue.path == "routing.decisions[1].modelRef"
    assert issue.code == "extra_forbidden"
    assert "modelRefs" in issue.message


def test_flat_key_in_a_canonical_document_is_explained() -> None:
    document = yaml.safe_load((DATA / "minimal.yaml").read_text())
    document["keyword_rules"] = []
    with pytest.raises(ConfigError) as exc:
        parse_config(document)
    [issue] = exc.value.issues
    assert issue.path == "keyword_rules"
    assert "routing.signals.keywords" in issue.message


def test_wrong_version_is_rejected() -> None:
    document = yaml.safe_load((DATA / "minimal.yaml").read_text())
    document["version"] = "v0.2"
    with pytest.raises(ConfigError) as exc:
        parse_config(document)
    assert list(_issues(exc)) == ["version"]


def test_condition_shape_errors_have_paths() -> None:
    document = yaml.safe_load(DEFAULT.read_text())
    document["routing"]["decisions"][0]["rules"] = {"operator": "NOT", "conditions": []}
    document["routing"]["decisions"][1]["rules"] = {
        "operator": "XOR",
        "conditions": [{"type": "keyword", "name": "urgent"}],
    }
    with pytest.raises(ConfigError) as exc:
        parse_config(document)
    assert set(_issues(exc)) == {"routing.decisions[0].rules", "routing.decisions[1].rules.operator"}


# ---------------------------------------------------------------- hashing / round trip


@pytest.mark.parametrize(
    "path", [DEFAULT, *EXAMPLES, DATA / "minimal.yaml", DATA / "pre-decision.yaml"], ids=lambda p: p.name
)
@pytest.mark.slow
def test_round_trip_keeps_the_hash(path: Path) -> None:
    loaded = load_config(path)
    again = parse_config(loaded.config.to_document())
    assert again.source_hash == loaded.source_hash
    assert again.legacy is False
    compact = parse_config(to_yaml(loaded.config))
    full = parse_config(to_yaml(loaded.config, compact=False))
    assert compact.source_hash == full.source_hash == loaded.source_hash


def test_hash_ignores_layout_but_not_content() -> None:
    text = DEFAULT.read_text()
    document = yaml.safe_load(text)
    reordered = dict(reversed(list(document.items())))
    assert parse_config(reordered).source_hash == parse_config(text).source_hash
    document["routing"]["decisions"][0]["priority"] += 1
    assert parse_config(document).source_hash != parse_config(text).source_hash
    assert config_hash(load_config(DEFAULT).config) == load_config(DEFAULT).source_hash


def test_legacy_source_hash_equals_its_migrated_document() -> None:
    legacy = load_config(ROOT / "configs" / "examples" / "legacy-flat.yaml")
    migrated = parse_config(to_yaml(legacy.config))
    assert legacy.legacy is True and migrated.legacy is False
    assert legacy.source_hash == migrated.source_hash


# ---------------------------------------------------------------- token counts


@pytest.mark.parametrize(
    ("value", "tokens"),
    [
        (4096, 4096),
        ("4096", 4096),
        ("2K", 2048),
        ("32k", 32768),
        ("1M", 1048576),
        ("1.5K", 1536),
        (" 8 K ", 8192),
        (None, None),
    ],
)
def test_token_count_suffixes(value, tokens) -> None:
    assert parse_token_count(value) == tokens


@pytest.mark.parametrize("value", ["lots", "2G", "-5", "K", True])
def test_bad_token_counts(value) -> None:
    with pytest.raises(ValueError):
        parse_token_count(value)


def test_token_count_in_a_config_reports_its_path() -> None:
    assert ContextSignal(name="c", max_tokens="32K").max_tokens == 32768
    document = yaml.safe_load(DEFAULT.read_text())
    document["routing"]["signals"]["context"][0]["min_tokens"] = "many"
    with pytest.raises(ConfigError) as exc:
        parse_config(document)
    [issue] = exc.value.issues
    assert issue.path == "routing.signals.context[0].min_tokens"
    assert "token count" in issue.message


def test_router_config_defaults_are_loadable() -> None:
    # A RouterConfig built in code dumps to a document the loader reads back identically
    # (once it has something to route to).
    config = RouterConfig.model_validate(yaml.safe_load((DATA / "minimal.yaml").read_text()))
    assert parse_config(config.to_document()).config == config
