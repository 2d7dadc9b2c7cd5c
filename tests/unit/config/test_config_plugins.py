"""Typed plugin configurations (`parse_plugin`)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config.plugins import (
    PLUGIN_MODELS,
    FastResponsePlugin,
    HeaderMutationPlugin,
    JailbreakPlugin,
    PIIPlugin,
    RequestParamsPlugin,
    ResponseCachePlugin,
    RouterReplayPlugin,
    SystemPromptPlugin,
    UnknownPluginError,
    parse_plugin,
)
from app.config.routing import PLUGIN_TYPES, REFERENCE_ONLY_PLUGIN_TYPES, Plugin


def _plugin(type_: str, enabled: bool | None = None, **configuration) -> Plugin:
    return Plugin(type=type_, configuration=configuration, enabled=enabled)


def test_every_applied_type_has_a_model() -> None:
    assert set(PLUGIN_MODELS) == set(PLUGIN_TYPES)
    assert not set(PLUGIN_MODELS) & REFERENCE_ONLY_PLUGIN_TYPES


def test_system_prompt() -> None:
    parsed = parse_plugin(_plugin("system_prompt", system_prompt="Be brief."))
    assert isinstance(parsed, SystemPromptPlugin)
    assert (parsed.system_prompt, parsed.mode, parsed.enabled) == ("Be brief.", "replace", True)
    assert parse_plugin(_plugin("system_prompt", system_prompt="x", mode="insert")).mode == "insert"
    with pytest.raises(ValidationError):
        parse_plugin(_plugin("system_prompt", system_prompt=""))


def test_plugin_level_enabled_overrides_configuration() -> None:
    plugin = Plugin(
        type="system_prompt", enabled=False, configuration={"system_prompt": "x", "enabled": True}
    )
    assert parse_plugin(plugin).enabled is False
    assert parse_plugin(_plugin("jailbreak")).enabled is True  # a listed plugin is on by default


@pytest.mark.parametrize("type_", ["semantic-cache", "response_cache"])
def test_response_cache_aliases(type_: str) -> None:
    parsed = parse_plugin(_plugin(type_, similarity_threshold=0.8, ttl_seconds=60))
    assert isinstance(parsed, ResponseCachePlugin)
    assert parsed.effective_threshold == 0.8
    assert parsed.ttl_seconds == 60
    assert parsed.mode == "exact_then_semantic"
    nested = parse_plugin(_plugin(type_, similarity_threshold=0.8, semantic={"similarity_threshold": 0.95}))
    assert nested.effective_threshold == 0.95  # the v0.3 nested key wins
    assert parse_plugin(_plugin(type_)).effective_threshold is None  # global applies


@pytest.mark.parametrize(
    "configuration",
    [
        {"similarity_threshold": -0.1},
        {"similarity_threshold": 1.01},
        {"ttl_seconds": -5},
        {"mode": "fuzzy"},
        {"semantic": {"similarity_threshold": 2}},
        {"scope": "tenant"},
        {"threshold": 0.9},
    ],
)
def test_response_cache_rejects(configuration: dict) -> None:
    with pytest.raises(ValidationError):
        parse_plugin(_plugin("response_cache", **configuration))


def test_header_mutation() -> None:
    parsed = parse_plugin(
        _plugin(
            "header_mutation",
            add=[{"name": "X-A", "value": "1"}],
            update=[{"name": "X-B", "value": "2"}],
            delete=["X-C"],
        )
    )
    assert isinstance(parsed, HeaderMutationPlugin)
    assert [(h.name, h.value) for h in parsed.add] == [("X-A", "1")]
    assert parsed.delete == ["X-C"]


@pytest.mark.parametrize(
    "configuration",
    [
        {},
        {"add": [{"name": "X-A"}]},
        {"add": [{"name": "Bad Header", "value": "1"}]},
        {"add": [{"name": "X-A", "value": "a\r\nInjected: 1"}]},
        {"update": [{"name": "Host", "value": "evil"}]},
        {"delete": ["transfer-encoding"]},
        {"delete": [":authority"]},
    ],
)
def test_header_mutation_rejects(configuration: dict) -> None:
    with pytest.raises(ValidationError):
        parse_plugin(_plugin("header_mutation", **configuration))


def test_fast_response_pii_jailbreak_params_replay() -> None:
    assert isinstance(parse_plugin(_plugin("fast_response", message="Hi")), FastResponsePlugin)
    with pytest.raises(ValidationError):
        parse_plugin(_plugin("fast_response"))
    pii = parse_plugin(_plugin("pii", pii_types_allowed=["email_address", " PERSON "]))
    assert isinstance(pii, PIIPlugin) and pii.pii_types_allowed == ["EMAIL_ADDRESS", "PERSON"]
    jail = parse_plugin(_plugin("jailbreak", threshold=0.7))
    assert isinstance(jail, JailbreakPlugin) and jail.threshold == 0.7
    with pytest.raises(ValidationError):
        parse_plugin(_plugin("jailbreak", threshold=7))
    params = parse_plugin(
        _plugin(
            "request_params", blocked_params=["logit_bias"], max_tokens_limit=512, max_n=1, strip_unknown=True
        )
    )
    assert isinstance(params, RequestParamsPlugin) and params.max_tokens_limit == 512
    with pytest.raises(ValidationError):
        parse_plugin(_plugin("request_params", max_tokens_limit=0))
    replay = parse_plugin(_plugin("router_replay", max_records=100, storage="memory"))
    assert isinstance(replay, RouterReplayPlugin) and replay.max_records == 100
    assert replay.model_extra == {"storage": "memory"}  # reference keys kept, not interpreted


def test_reference_only_types_return_none_and_unknown_types_raise() -> None:
    for type_ in REFERENCE_ONLY_PLUGIN_TYPES:
        assert parse_plugin(_plugin(type_, anything=1)) is None
    with pytest.raises(UnknownPluginError):
        parse_plugin(_plugin("teleport"))
