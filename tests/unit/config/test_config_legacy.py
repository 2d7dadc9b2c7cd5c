"""Flat (v0.1) layout -> canonical v0.3 conversion."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from app.config import ConfigError, load_config, parse_config
from app.config.legacy import LEGACY_KEY_HOME, LEGACY_KEYS, is_legacy, migrate_legacy
from app.config.plugins import parse_plugin
from tests.fakes.configs import keyword_routing

ROOT = Path(__file__).resolve().parents[3]
LEGACY_EXAMPLE = ROOT / "configs" / "examples" / "legacy-flat.yaml"
PRE_DECISION = ROOT / "tests" / "data" / "configs" / "pre-decision.yaml"


def _legacy() -> dict:
    return yaml.safe_load(LEGACY_EXAMPLE.read_text())


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"vllm_endpoints": []}, True),
        ({"decisions": [], "default_model": "a"}, True),
        ({"semantic_cache": {"enabled": True}}, True),
        ({"version": "v0.3", "providers": {}}, False),
        ({"routing": {}, "decisions": []}, False),  # mixed: judged as canonical (and rejected there)
        ({"version": "v0.3", "decisions": []}, False),
        ({"foo": 1}, False),
        ([], False),
    ],
)
def test_is_legacy(doc, expected) -> None:
    assert is_legacy(doc) is expected


def test_every_legacy_key_has_a_documented_home() -> None:
    assert LEGACY_KEYS - {"mom_registry"} <= set(LEGACY_KEY_HOME)


def test_reference_example_converts_to_the_canonical_structure() -> None:
    document, warnings = migrate_legacy(_legacy())
    assert document["version"] == "v0.3"
    providers = document["providers"]
    assert providers["defaults"]["default_model"] == "qwen3-8b"
    assert providers["defaults"]["default_reasoning_effort"] == "high"
    assert providers["defaults"]["reasoning_families"]["qwen3"] == {
        "type": "chat_template_kwargs",
        "parameter": "enable_thinking",
    }
    models = {m["name"]: m for m in providers["models"]}
    assert set(models) == {"qwen3-8b", "qwen3-32b"}
    assert models["qwen3-32b"]["backend_refs"] == [
        {"name": "local", "endpoint": "127.0.0.1:18082", "weight": 1}
    ]
    assert models["qwen3-32b"]["pricing"] == {
        "currency": "USD",
        "prompt_per_1m": 1.2,
        "completion_per_1m": 3.4,
    }
    assert models["qwen3-8b"]["reasoning_family"] == "qwen3"

    routing = document["routing"]
    assert routing["strategy"] == "priority"
    assert routing["signals"]["keywords"][0]["name"] == "urgent_request"
    assert [d["name"] for d in routing["signals"]["domains"]] == ["math", "other"]
    assert routing["signals"]["domains"][0]["mmlu_categories"] == ["math"]
    assert [d["name"] for d in routing["decisions"]] == ["math_decision", "general_decision"]
    assert routing["decisions"][0]["plugins"][1]["type"] == "pii"
    assert routing["decisions"][1]["plugins"][0]["type"] == "semantic-cache"

    glob = document["global"]
    assert glob["stores"]["response_cache"]["similarity_threshold"] == 0.8
    assert glob["stores"]["response_cache"]["hnsw_m"] == 16
    modules = glob["model_catalog"]["modules"]
    assert modules["prompt_guard"]["threshold"] == 0.7
    assert modules["classifier"]["domain"]["model_id"] == "models/mom-domain-classifier"
    assert modules["classifier"]["pii"]["threshold"] == 0.9
    assert glob["model_catalog"]["embeddings"]["semantic"]["qwen3_model_path"] == "models/mom-embedding-pro"
    assert glob["services"]["observability"]["metrics"]["enabled"] is True
    # The warnings say what moved where.
    assert any("semantic_cache" in w and "global.stores.response_cache" in w for w in warnings)
    assert any("classifier.category_model" in w for w in warnings)


def test_legacy_file_loads_as_a_valid_config() -> None:
    loaded = load_config(LEGACY_EXAMPLE)
    assert loaded.legacy is True
    assert loaded.warnings[0].startswith("legacy flat layout")
    config = loaded.config
    assert config.model("qwen3-32b").backend_refs[0].resolved_base_url() == "http://127.0.0.1:18082"
    assert config.model("qwen3-32b").provider_model_id == "gemma-3-270m"
    cache = parse_plugin(config.routing.decisions[1].plugins[0])
    assert cache.effective_threshold == 0.75
    assert config.global_.stores.response_cache.enabled is True


def test_migration_does_not_mutate_its_input() -> None:
    doc = _legacy()
    snapshot = copy.deepcopy(doc)
    migrate_legacy(doc)
    assert doc == snapshot


def test_pre_decision_categories_synthesize_decisions() -> None:
    loaded = load_config(PRE_DECISION)
    config = loaded.config
    decisions = {d.name: d for d in config.routing.decisions}
    assert set(decisions) == {"math", "history", "other"}
    math = decisions["math"]
    assert [(r.model, r.use_reasoning) for r in math.modelRefs] == [("qwen3-30b", True)]
    assert math.rules.conditions[0].type == "domain" and math.rules.conditions[0].name == "math"
    assert parse_plugin(math.plugins[0]).system_prompt == "You are a math tutor."
    history = decisions["history"]
    assert [r.model for r in history.modelRefs] == ["phi4"]
    cache = parse_plugin(history.plugins[0])
    assert cache.enabled and cache.effective_threshold == 0.85
    assert any("synthesized 3 decision" in w for w in loaded.warnings)
    # model_scores stay on the domain signal.
    assert config.routing.signals.domains[0].model_scores[1]["model"] == "qwen3-30b"


def test_endpoints_are_assigned_by_preference_then_models_list() -> None:
    config = load_config(PRE_DECISION).config
    refs = {m.name: [r.name for r in m.backend_refs] for m in config.providers.models}
    # phi4: no preferred_endpoints, listed by gpu1 -> gpu1 only.
    assert refs == {"phi4": ["gpu1"], "qwen3-30b": ["gpu0"]}


def test_model_without_preference_uses_endpoints_without_models_list() -> None:
    doc = {
        "vllm_endpoints": [
            {"name": "a", "address": "10.0.0.1", "port": 8000},
            {"name": "b", "address": "10.0.0.2", "port": 8000},
        ],
        "model_config": {"m": {}},
        "default_model": "m",
    }
    document, warnings = migrate_legacy(doc)
    assert [r["endpoint"] for r in document["providers"]["models"][0]["backend_refs"]] == [
        "10.0.0.1:8000",
        "10.0.0.2:8000",
    ]
    assert any("every endpoint" in w for w in warnings)


@pytest.mark.parametrize(
    ("endpoint", "ref"),
    [
        ({"address": "10.1.2.3", "port": 8000}, {"endpoint": "10.1.2.3:8000"}),
        (
            {"address": "https://api.example.com", "port": 443},
            {"endpoint": "api.example.com:443", "protocol": "https"},
        ),
        ({"address": "http://gpu:9000/v1"}, {"base_url": "http://gpu:9000/v1"}),
        ({"address": "::1", "port": 8001}, {"base_url": "http://[::1]:8001"}),
    ],
)
def test_endpoint_address_forms(endpoint, ref) -> None:
    doc = {
        "vllm_endpoints": [{"name": "e", **endpoint}],
        "model_config": {"m": {"preferred_endpoints": ["e"]}},
    }
    document, _ = migrate_legacy(doc)
    got = document["providers"]["models"][0]["backend_refs"][0]
    assert {k: v for k, v in got.items() if k != "name"} == ref
    parse_config({**doc, "default_model": "m"})  # and it validates


def test_older_rule_spellings_are_renamed() -> None:
    doc = {
        "vllm_endpoints": [{"name": "e", "address": "h", "port": 1}],
        "model_config": {"m": {"preferred_endpoints": ["e"]}},
        "default_model": "m",
        "keyword_rules": [{"category": "urgent", "operator": "or", "keywords": ["asap"]}],
        "embedding_rules": [{"name": "hi", "keywords": ["hello"], "aggregation_method": "avg"}],
        "context_rules": [{"name": "long", "min_tokens": "8K"}],
    }
    config = parse_config(doc).config
    assert config.routing.signals.keywords[0].name == "urgent"
    assert config.routing.signals.keywords[0].operator == "OR"
    assert config.routing.signals.embeddings[0].candidates == ["hello"]
    assert config.routing.signals.embeddings[0].aggregation_method == "mean"
    assert config.routing.signals.context[0].min_tokens == 8192


def test_unsupported_legacy_keys_are_warned_not_silent() -> None:
    doc = _legacy()
    doc["mom_registry"] = {"models/x": "org/x"}
    doc["totally_unknown"] = 1
    doc["model_config"]["qwen3-8b"]["pii_policy"] = {"allow_by_default": False}
    doc["model_config"]["qwen3-8b"]["loras"] = [{"name": "math-lora"}]
    doc["vllm_endpoints"][0]["health_check_path"] = "/health"
    doc["bert_model"] = {"model_id": "sentence-transformers/all-MiniLM-L12-v2", "threshold": 0.6}
    loaded = parse_config(doc)
    text = "\n".join(loaded.warnings)
    for needle in ("mom_registry", "totally_unknown", "pii_policy", "health_check_path", "bert_model"):
        assert needle in text
    assert loaded.config.routing.modelCards == [{"name": "qwen3-8b", "loras": [{"name": "math-lora"}]}]
    semantic = loaded.config.global_.model_catalog["embeddings"]["semantic"]
    assert semantic["bert_model_path"] == "sentence-transformers/all-MiniLM-L12-v2"


def test_access_key_becomes_backend_api_key_with_a_warning() -> None:
    doc = _legacy()
    doc["model_config"]["qwen3-8b"]["access_key"] = "sk-test"
    loaded = parse_config(doc)
    assert loaded.config.model("qwen3-8b").backend_refs[0].api_key == "sk-test"
    assert any("api_key_env" in w for w in loaded.warnings)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.update(vllm_endpoints={"name": "x"}), "vllm_endpoints"),
        (lambda d: d["vllm_endpoints"].append("oops"), "vllm_endpoints[1]"),
        (lambda d: d["vllm_endpoints"][0].pop("address"), "vllm_endpoints[0].address"),
        (lambda d: d["vllm_endpoints"][0].update(port="http"), "vllm_endpoints[0].port"),
        (
            lambda d: d["model_config"]["qwen3-8b"].update(preferred_endpoints=["gpu9"]),
            "model_config.qwen3-8b.preferred_endpoints[0]",
        ),
        (lambda d: d.update(keyword_rules=[5]), "keyword_rules[0]"),
        (lambda d: d.update(decisions={"a": 1}), "decisions"),
    ],
)
def test_malformed_flat_documents_are_rejected_with_flat_paths(mutate, path) -> None:
    doc = _legacy()
    mutate(doc)
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    assert path in [issue.path for issue in exc.value.issues]


def test_canonical_errors_in_flat_files_name_the_flat_location() -> None:
    doc = _legacy()
    doc["decisions"][1]["modelRefs"][0]["model"] = "qwen3-9b"
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    [issue] = exc.value.issues
    assert issue.path == "routing.decisions[1].modelRefs[0].model"
    assert "decisions[1].modelRefs[0].model" in issue.message.split("flat layout:")[1]
    doc = _legacy()
    doc["model_config"]["qwen3-32b"]["pricing"]["completion_per_1m"] = -1
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    [issue] = exc.value.issues
    assert issue.path == "providers.models[1].pricing.completion_per_1m"
    assert "model_config.qwen3-32b.pricing.completion_per_1m" in issue.message


def test_migrated_document_is_json_serialisable() -> None:
    document, _ = migrate_legacy(yaml.safe_load(PRE_DECISION.read_text()))
    json.dumps(document)


# ---------------------------------------------------------------- one converter, its deprecation


def _deprecations(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "svc_sr.config" and "deprecated" in r.getMessage()
    ]


def test_loading_a_flat_file_logs_one_deprecation_naming_the_command(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="svc_sr.config")
    load_config(LEGACY_EXAMPLE)
    [message] = _deprecations(caplog)
    assert f"svc-sr config migrate {LEGACY_EXAMPLE}" in message
    load_config(LEGACY_EXAMPLE)
    assert len(_deprecations(caplog)) == 2  # once per load, not once per process


def test_a_flat_mapping_without_a_file_names_the_command_with_a_placeholder(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="svc_sr.config")
    parse_config(_legacy(), source="request body")
    [message] = _deprecations(caplog)
    assert message.startswith("request body: ")
    assert "`svc-sr config migrate FILE`" in message


@pytest.mark.parametrize(
    "path", [ROOT / "configs" / "config.yaml", ROOT / "configs" / "examples" / "keywords.yaml"]
)
def test_canonical_files_log_no_deprecation(caplog, path) -> None:
    caplog.set_level(logging.DEBUG, logger="svc_sr.config")
    loaded = load_config(path)
    assert loaded.legacy is False
    assert _deprecations(caplog) == []
    assert not any("flat layout" in w for w in loaded.warnings)


def test_the_loader_and_the_cli_command_share_the_converter(monkeypatch, tmp_path) -> None:
    from app.cli.main import cli
    from app.config import legacy

    calls = []
    real = legacy.migrate
    monkeypatch.setattr(legacy, "migrate", lambda doc: calls.append(doc) or real(doc))
    load_config(LEGACY_EXAMPLE)
    out = tmp_path / "v03.yaml"
    result = CliRunner().invoke(cli, ["config", "migrate", str(LEGACY_EXAMPLE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert len(calls) == 2
    migrated = load_config(out)
    assert migrated.legacy is False
    assert migrated.source_hash == load_config(LEGACY_EXAMPLE).source_hash


def test_config_migrate_prints_the_v03_document_and_the_conversion_warnings() -> None:
    from app.cli.main import cli

    result = CliRunner().invoke(cli, ["config", "migrate", str(LEGACY_EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["version"] == "v0.3"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings[0] == "warning: legacy flat layout (v0.1, deprecated) converted to v0.3"
    assert any("semantic_cache: moved to global.stores.response_cache" in w for w in warnings)


def test_a_flat_key_in_a_canonical_document_is_rejected_with_its_v03_home() -> None:
    doc = {"version": "v0.3", "providers": {"models": []}, "semantic_cache": {"enabled": True}}
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    [issue] = exc.value.issues
    assert issue.path == "semantic_cache"
    assert "global.stores.response_cache" in issue.message and "mixing both layouts" in issue.message


def test_the_loader_names_no_flat_key() -> None:
    source = (ROOT / "app" / "config" / "loader.py").read_text()
    assert [key for key in LEGACY_KEYS if f'"{key}"' in source or f"'{key}'" in source] == []


def test_the_old_read_part_names_load_as_the_new_ones() -> None:
    document = keyword_routing("http://127.0.0.1:9/v1", [("money", 10, ["tax"], "m")], "general")
    document["routing"]["signals"]["keywords"][0]["read"] = ["ask", "tools", "system"]
    document["global"] = {"model_catalog": {"modules": {"prompt_guard": {"read": ["conversation", "tools"]}}}}
    before = copy.deepcopy(document)
    loaded = parse_config(document)
    assert loaded.config.routing.signals.keywords[0].read == ["latest_ask", "tool_results", "system"]
    assert document == before  # converted on a copy
    renamed = [w for w in loaded.warnings if "read part renamed" in w]
    assert renamed == [
        "routing.signals.keywords[0].read: read part renamed (ask -> latest_ask, tools -> tool_results)",
        "global.model_catalog.modules.prompt_guard.read: read part renamed (tools -> tool_results)",
    ]
    # the new names load as they are, with no warning; an unknown part is still an error
    document["routing"]["signals"]["keywords"][0]["read"] = ["latest_ask", "tool_results"]
    document["global"]["model_catalog"]["modules"]["prompt_guard"]["read"] = ["tool_results"]
    assert not [w for w in parse_config(document).warnings if "read part" in w]
    document["routing"]["signals"]["keywords"][0]["read"] = ["everything"]
    with pytest.raises(ConfigError, match="read"):
        parse_config(document)
