"""Plugins (system_prompt, header_mutation, request_params, cache policy) and reasoning."""

from __future__ import annotations

import pytest

from app.config.global_config import ResponseCacheConfig
from app.config.providers import ProviderDefaults, ProviderModel
from app.config.routing import Decision, ModelRef
from app.pipeline.headers import header_value
from app.pipeline.plugins import (
    CACHE_DIRECTIVES,
    CacheControl,
    CachePolicy,
    DecisionPlugins,
    ReplayPolicy,
    apply_header_mutation,
    apply_request_params,
    apply_system_prompt,
    compile_plugins,
    completion_body,
    effective_cache_policy,
    parse_cache_control,
    refresh_cached_completion,
)
from app.pipeline.reasoning import apply_reasoning

GLOBAL_CACHE = ResponseCacheConfig(enabled=False, similarity_threshold=0.8, ttl_seconds=600)


def compiled(*plugins: dict) -> DecisionPlugins:
    return compile_plugins(Decision.model_validate({"name": "d", "plugins": list(plugins)}), GLOBAL_CACHE)


# ------------------------------------------------------------------ system_prompt


def test_insert_adds_a_system_message_first():
    body = {"messages": [{"role": "user", "content": "hi"}]}
    original = body["messages"]
    assert apply_system_prompt(body, "You are a math expert.", "insert")
    assert body["messages"] == [
        {"role": "system", "content": "You are a math expert."},
        {"role": "user", "content": "hi"},
    ]
    assert original == [{"role": "user", "content": "hi"}]  # the caller's list is untouched


def test_insert_prepends_to_existing_system_message():
    body = {"messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "hi"}]}
    apply_system_prompt(body, "You are a math expert.", "insert")
    assert body["messages"][0] == {"role": "system", "content": "You are a math expert.\n\nAnswer briefly."}
    assert len(body["messages"]) == 2


def test_insert_into_multipart_system_content():
    body = {"messages": [{"role": "system", "content": [{"type": "text", "text": "old"}]}]}
    apply_system_prompt(body, "new", "insert")
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "new"},
        {"type": "text", "text": "old"},
    ]


def test_replace_overwrites_existing_system_message():
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "old"}]}
    apply_system_prompt(body, "new", "replace")
    assert body["messages"] == [{"role": "user", "content": "hi"}, {"role": "system", "content": "new"}]


def test_replace_without_system_message_inserts_one():
    body = {"messages": [{"role": "user", "content": "hi"}]}
    apply_system_prompt(body, "new", "replace")
    assert body["messages"][0] == {"role": "system", "content": "new"}


def test_system_prompt_plugin_compiles_with_mode_and_skips_disabled():
    assert compiled(
        {"type": "system_prompt", "configuration": {"system_prompt": "x", "mode": "replace"}}
    ).system_prompt == ("x", "replace")
    assert (
        compiled(
            {"type": "system_prompt", "configuration": {"system_prompt": "x", "enabled": False}}
        ).system_prompt
        is None
    )
    assert (
        compiled(
            {"type": "system_prompt", "enabled": False, "configuration": {"system_prompt": "x"}}
        ).system_prompt
        is None
    )
    # the canonical plugin model's default mode is `replace`
    assert compiled({"type": "system_prompt", "configuration": {"system_prompt": "x"}}).system_prompt == (
        "x",
        "replace",
    )
    with pytest.raises(ValueError):
        compiled({"type": "system_prompt", "configuration": {"system_prompt": ""}})


def test_invalid_plugin_configuration_names_the_decision():
    with pytest.raises(ValueError, match=r"decisions\[d\]\.plugins\[0\]"):
        compiled({"type": "system_prompt", "configuration": {"system_prompt": "x", "mode": "sideways"}})


# ------------------------------------------------------------------ header_mutation


def test_header_mutation_delete_add_update():
    plugins = compiled(
        {
            "type": "header_mutation",
            "configuration": {
                "add": [{"name": "X-Route-Source", "value": "semantic-router"}],
                "update": [{"name": "x-selected-model", "value": "override"}],
                "delete": ["X-Client-Secret"],
            },
        }
    )
    upstream = {"x-selected-model": "m", "x-request-id": "r"}
    remove: list[str] = []
    apply_header_mutation(plugins, upstream, remove)
    assert upstream == {
        "x-selected-model": "override",
        "x-request-id": "r",
        "x-route-source": "semantic-router",
    }
    assert remove == ["x-client-secret"]


def test_transport_headers_are_never_mutated():
    with pytest.raises(ValueError):  # rejected in the file...
        compiled({"type": "header_mutation", "configuration": {"delete": ["Host"]}})
    plugins = DecisionPlugins(header_add=[("content-length", "1"), (":path", "/x")], header_delete=["host"])
    upstream: dict[str, str] = {}
    remove: list[str] = []
    apply_header_mutation(plugins, upstream, remove)  # ...and skipped for configs built in code
    assert upstream == {} and remove == []


def test_header_added_after_delete_is_not_removed():
    plugins = compiled(
        {
            "type": "header_mutation",
            "configuration": {"delete": ["x-tenant"], "add": [{"name": "x-tenant", "value": "ours"}]},
        }
    )
    upstream: dict[str, str] = {}
    remove: list[str] = []
    apply_header_mutation(plugins, upstream, remove)
    assert upstream == {"x-tenant": "ours"} and remove == []


def test_header_values_are_made_printable():
    assert header_value("mathé\r\nx") == "math???x"


# ------------------------------------------------------------------ fast_response


def test_fast_response_compiles_message():
    plugins = compiled({"type": "fast_response", "configuration": {"message": "Blocked."}})
    assert plugins.fast_response == "Blocked."
    body = completion_body("MoM", "Blocked.")
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Blocked."}
    assert body["choices"][0]["finish_reason"] == "stop"


def test_refresh_cached_completion_gives_fresh_identity():
    cached = {"id": "chatcmpl-old", "created": 1, "model": "x", "choices": [], "routing_metadata": {}}
    fresh = refresh_cached_completion(cached, "small")
    assert fresh["id"] != "chatcmpl-old" and fresh["created"] > 1 and fresh["model"] == "small"
    assert "routing_metadata" not in fresh and cached["id"] == "chatcmpl-old"


# ------------------------------------------------------------------ cache policy


def test_cache_plugin_threshold_precedence():
    semantic = compiled(
        {
            "type": "semantic-cache",
            "configuration": {
                "similarity_threshold": 0.7,
                "semantic": {"similarity_threshold": 0.95},
                "ttl_seconds": 5,
            },
        }
    )
    assert semantic.cache == CachePolicy(True, 0.95, 5)
    flat = compiled(
        {"type": "response_cache", "configuration": {"enabled": True, "similarity_threshold": 0.75}}
    )
    assert flat.cache == CachePolicy(True, 0.75, 600)
    bare = compiled({"type": "semantic-cache", "configuration": {}})
    assert bare.cache == CachePolicy(True, 0.8, 600)


def test_exact_cache_mode_needs_near_identical_text():
    plugins = compiled(
        {"type": "response_cache", "configuration": {"mode": "exact", "similarity_threshold": 0.5}}
    )
    assert plugins.cache is not None and plugins.cache.threshold >= 0.999


def test_cache_request_controls():
    plugins = compiled(
        {
            "type": "response_cache",
            "configuration": {"request_controls": {"header": "X-My-Cache", "allowed": ["no-store", "ttl"]}},
        }
    )
    assert plugins.cache is not None
    assert plugins.cache.control_header == "x-my-cache"
    assert plugins.cache.allowed == frozenset({"no-store", "ttl"})
    assert compiled({"type": "response_cache", "configuration": {}}).cache.allowed == CACHE_DIRECTIVES


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, CacheControl()),
        ("no-cache", CacheControl(lookup=False)),
        ("No-Store", CacheControl(store=False)),
        ("bypass", CacheControl(lookup=False, store=False)),
        ("max-age=60, ttl=5", CacheControl(max_age_s=60.0, ttl_seconds=5)),
        ("max-age=soon, whatever", CacheControl()),
    ],
)
def test_parse_cache_control(value, expected):
    assert parse_cache_control(value) == expected


def test_cache_control_ignores_directives_not_allowed():
    assert parse_cache_control("no-cache, ttl=9", frozenset({"ttl"})) == CacheControl(ttl_seconds=9)


def test_disabled_cache_plugin_overrides_global_cache():
    global_on = ResponseCacheConfig(enabled=True, similarity_threshold=0.9, ttl_seconds=60)
    off = compile_plugins(
        Decision.model_validate(
            {"name": "d", "plugins": [{"type": "semantic-cache", "configuration": {"enabled": False}}]}
        ),
        global_on,
    )
    assert effective_cache_policy(off, global_on).enabled is False
    assert effective_cache_policy(DecisionPlugins(), global_on) == CachePolicy(True, 0.9, 60)
    assert effective_cache_policy(None, GLOBAL_CACHE).enabled is False


# ------------------------------------------------------------------ request_params


def test_request_params_strip_and_clamp():
    plugins = compiled(
        {
            "type": "request_params",
            "configuration": {
                "blocked_params": ["logprobs", "top_logprobs"],
                "max_tokens_limit": 512,
                "max_n": 1,
            },
        }
    )
    body = {
        "model": "m",
        "messages": [],
        "logprobs": True,
        "top_logprobs": 5,
        "max_tokens": 4096,
        "n": 3,
        "max_completion_tokens": 100,
    }
    changed = apply_request_params(body, plugins.request_params or {})
    assert body == {"model": "m", "messages": [], "max_tokens": 512, "n": 1, "max_completion_tokens": 100}
    assert set(changed) == {"-logprobs", "-top_logprobs", "max_tokens", "n"}


def test_request_params_strip_unknown_keeps_openai_fields():
    body = {"model": "m", "messages": [], "temperature": 0.2, "x_custom": 1}
    apply_request_params(body, {"strip_unknown": True})
    assert body == {"model": "m", "messages": [], "temperature": 0.2}


def test_request_params_never_strips_model_or_messages():
    body = {"model": "m", "messages": []}
    apply_request_params(body, {"blocked_params": ["model", "messages"]})
    assert body == {"model": "m", "messages": []}


def test_unhandled_plugin_types_are_ignored():
    plugins = compiled({"type": "pii", "configuration": {"enabled": True}})
    assert plugins == DecisionPlugins()


def test_router_replay_compiles_to_a_replay_policy():
    plugins = compiled(
        {"type": "router_replay", "configuration": {"capture_request_body": True, "max_body_bytes": 100}}
    )
    assert plugins.replay == ReplayPolicy(
        capture_request_body=True, capture_response_body=False, max_body_bytes=100
    )
    assert compiled({"type": "router_replay", "configuration": {"enabled": False}}).replay is None


# ------------------------------------------------------------------ reasoning

DEFAULTS = ProviderDefaults.model_validate(
    {
        "default_reasoning_effort": "high",
        "reasoning_families": {
            "qwen3": {"type": "chat_template_kwargs", "parameter": "enable_thinking"},
            "deepseek": {"type": "chat_template_kwargs", "parameter": "thinking"},
            "gpt-oss": {"type": "reasoning_effort", "parameter": "reasoning_effort"},
        },
    }
)


def model(family: str | None) -> ProviderModel:
    return ProviderModel(name="m", reasoning_family=family)


@pytest.mark.parametrize(("family", "param"), [("qwen3", "enable_thinking"), ("deepseek", "thinking")])
@pytest.mark.parametrize("on", [True, False])
def test_chat_template_kwargs_families(family, param, on):
    body = {"chat_template_kwargs": {"other": 1}}
    record = apply_reasoning(body, model(family), ModelRef(model="m", use_reasoning=on), DEFAULTS)
    assert body["chat_template_kwargs"] == {"other": 1, param: on}
    assert record["enabled"] is on and record["family"] == family and record["applied"]


def test_reasoning_effort_family_uses_ref_effort_then_default():
    body: dict = {}
    record = apply_reasoning(
        body, model("gpt-oss"), ModelRef(model="m", use_reasoning=True, reasoning_effort="low"), DEFAULTS
    )
    assert body == {"reasoning_effort": "low"} and record["effort"] == "low"
    body = {}
    apply_reasoning(body, model("gpt-oss"), ModelRef(model="m", use_reasoning=True), DEFAULTS)
    assert body == {"reasoning_effort": "high"}


def test_reasoning_effort_family_off_leaves_body_alone():
    body = {"reasoning_effort": "medium"}
    record = apply_reasoning(body, model("gpt-oss"), ModelRef(model="m", use_reasoning=False), DEFAULTS)
    assert body == {"reasoning_effort": "medium"} and record["enabled"] is False


@pytest.mark.parametrize(
    ("family", "ref"),
    [
        ("mystery", ModelRef(model="m", use_reasoning=True)),  # unknown family
        (None, ModelRef(model="m", use_reasoning=True)),  # model without family
        ("qwen3", ModelRef(model="m")),  # use_reasoning unset
        ("qwen3", None),  # default model: no modelRef
    ],
)
def test_no_reasoning_change(family, ref):
    body = {"messages": []}
    apply_reasoning(body, model(family), ref, DEFAULTS)
    assert body == {"messages": []}
