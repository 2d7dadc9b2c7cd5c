"""Per-decision plugins, compiled once per config and applied per request.

Order (reference router, `processor_req_body*.go`): `fast_response` (immediate answer),
response cache (lookup; immediate answer on a hit), then the request mutations:
`system_prompt`, `header_mutation`, reasoning toggle (`reasoning.py`),
`request_params`, the `tools` policy and `tool_selection` (tools.py), then `context_compression`
(compression.py: the budget counts what is forwarded, the injected system prompt included), then
`memory` recall (app/pipeline/memory/). A plugin with `enabled: false` (on the plugin or inside its
`configuration`) is skipped. `pii` and `jailbreak` are not request mutations:
`compile_guards` turns them into guard rules (a PIISignal / JailbreakSignal named
`plugin:<decision>`) that the pipeline checks once the decision is chosen, blocking with
403 before any other plugin answers. `response_jailbreak` and `hallucination` check the
answer: route() puts them on the plan (`answer_checks`), the front door asks the Router's
`check_answer` once the answer is whole (app/pipeline/answers, app/exchange/answer_checks.py). `router_replay` is compiled into a `ReplayPolicy`:
route() gives the request a replay id (x-vsr-replay-id), complete() records it (replay.py).

Configurations are the typed models of `app.config.plugins` (`parse_plugin`), compiled
once per config version into `DecisionPlugins`, so a request never re-validates them.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, fields
from typing import Any

from app.config.global_config import ResponseCacheConfig
from app.config.plugins import (
    PROTECTED_HEADERS,
    ContextCompressionPlugin,
    HallucinationPlugin,
    MemoryPlugin,
    RagPlugin,
    ResponseJailbreakPlugin,
    parse_plugin,
)
from app.config.routing import Decision, Plugin
from app.config.signals import HarmfulSignal, JailbreakSignal, PIISignal
from app.pipeline import compression
from app.pipeline.tools import ToolPolicy, ToolSelectionPolicy

CACHE_TYPES = frozenset({"semantic-cache", "response_cache"})
EXACT_MODE_THRESHOLD = 0.999  # "exact" cache mode: the same text embeds to cosine ~1.0
CACHE_CONTROL_HEADER = "x-vsr-cache-control"
CACHE_DIRECTIVES = frozenset({"no-cache", "no-store", "bypass", "max-age", "ttl"})

# Parameters of the OpenAI chat-completions request: `request_params.strip_unknown` keeps only these.
KNOWN_CHAT_PARAMS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "user",
        "seed",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
        "chat_template_kwargs",
        "modalities",
        "audio",
        "prediction",
        "service_tier",
        "store",
        "metadata",
        "functions",
        "function_call",
    }
)


def plugin_settings(plugin: Plugin) -> dict[str, Any] | None:
    """Validated configuration of a plugin as a dict, `enabled` folded in (None: a type
    svc-sr accepts but does not apply). Raises ValueError on an invalid configuration
    (the loader rejects such files first; this guards configs built in code)."""
    parsed = parse_plugin(plugin)
    return None if parsed is None else parsed.model_dump()


# ------------------------------------------------------------------ compiled per decision


@dataclass(frozen=True)
class CachePolicy:
    enabled: bool
    threshold: float = 0.8
    ttl_seconds: int = 3600
    control_header: str = CACHE_CONTROL_HEADER  # request_controls.header
    allowed: frozenset[str] = CACHE_DIRECTIVES  # request_controls.allowed (unset/empty: all)


@dataclass(frozen=True)
class CacheControl:
    """A client's cache directives for one request (reference `request_controls`)."""

    lookup: bool = True
    store: bool = True
    max_age_s: float | None = None  # accept only entries younger than this
    ttl_seconds: int | None = None  # lifetime of the entry this answer writes


def parse_cache_control(value: str | None, allowed: frozenset[str] = CACHE_DIRECTIVES) -> CacheControl:
    """`no-cache` (skip lookup), `no-store` (skip write), `bypass` (both), `max-age=N`,
    `ttl=N`, comma-separated; directives not in `allowed` and malformed ones are ignored."""
    if not value:
        return CacheControl()
    lookup = store = True
    max_age: float | None = None
    ttl: int | None = None
    for token in value.split(","):
        name, _, arg = token.strip().lower().partition("=")
        if name not in allowed:
            continue
        if name == "no-cache":
            lookup = False
        elif name == "no-store":
            store = False
        elif name == "bypass":
            lookup = store = False
        elif arg.strip().isdigit():
            if name == "max-age":
                max_age = float(arg)
            else:
                ttl = int(arg)
    return CacheControl(lookup, store, max_age, ttl)


@dataclass(frozen=True)
class ReplayPolicy:
    """`router_replay`: record the decision's requests; bodies only when asked (bounded)."""

    capture_request_body: bool = False
    capture_response_body: bool = False
    max_body_bytes: int | None = None


@dataclass
class DecisionPlugins:
    fast_response: str | None = None
    cache: CachePolicy | None = None  # None: the decision does not configure a cache plugin
    system_prompt: tuple[str, str] | None = None  # (text, mode)
    header_add: list[tuple[str, str]] = field(default_factory=list)
    header_update: list[tuple[str, str]] = field(default_factory=list)
    header_delete: list[str] = field(default_factory=list)
    request_params: dict[str, Any] | None = None
    replay: ReplayPolicy | None = None
    tools: ToolPolicy | None = None  # `tools`: static allow/deny of the request's tools
    tool_selection: ToolSelectionPolicy | None = None  # `tool_selection`: semantic top_k
    compression: ContextCompressionPlugin | None = None
    rag: RagPlugin | None = None  # retrieval into the request (app/pipeline/rag.py)
    memory: MemoryPlugin | None = None  # recall into the request, remember after (app/pipeline/memory)
    # response-side plugins: checked on the answer (app/pipeline/answers)
    response_jailbreak: ResponseJailbreakPlugin | None = None
    hallucination: HallucinationPlugin | None = None
    # the `pii` plugin's action on a request it flags: block (403), route (private models), mask
    pii_action: str = "block"


def guard_rule_name(decision: str) -> str:
    return f"plugin:{decision}"


# Plugin types whose typed configuration the compiled decision keeps as parsed: type -> field.
TYPED_FIELDS: dict[str, str] = {
    "context_compression": "compression",
    "memory": "memory",
    "rag": "rag",
    "response_jailbreak": "response_jailbreak",
    "hallucination": "hallucination",
}
assert set(TYPED_FIELDS.values()) <= {f.name for f in fields(DecisionPlugins)}
# Types that count tokens (the compression budget, rag's budget): the tokenizer loads with the
# config, not on a request.
TOKENIZER_TYPES = frozenset({"context_compression", "rag"})


def compile_plugins(decision: Decision, global_cache: ResponseCacheConfig) -> DecisionPlugins:
    """Each plugin parsed once; of a type, the last enabled one wins."""
    out = DecisionPlugins()
    for index, plugin in enumerate(decision.plugins):
        try:
            parsed = parse_plugin(plugin)
        except ValueError as exc:
            raise ValueError(
                f"routing.decisions[{decision.name}].plugins[{index}] ({plugin.type}): {exc}"
            ) from exc
        if parsed is None:
            continue
        kind = plugin.type
        if kind in CACHE_TYPES:
            # an explicitly disabled cache plugin turns the global cache off for this decision
            out.cache = (
                _cache_policy(parsed.model_dump(), global_cache) if parsed.enabled else CachePolicy(False)
            )
        elif not parsed.enabled:
            continue
        elif kind in TYPED_FIELDS:
            setattr(out, TYPED_FIELDS[kind], parsed)
            if kind in TOKENIZER_TYPES:
                compression.warm_up()
        else:
            _compile_one(out, kind, parsed.model_dump())
    return out


def _compile_one(out: DecisionPlugins, kind: str, settings: dict[str, Any]) -> None:
    """An enabled plugin's settings into `out` (cache, guards and TYPED_FIELDS are compiled elsewhere)."""
    if kind == "fast_response":
        out.fast_response = str(settings.get("message") or "")
    elif kind == "system_prompt":
        text = settings.get("system_prompt") or ""
        if text:
            out.system_prompt = (text, settings.get("mode") or "insert")
    elif kind == "header_mutation":
        out.header_add += [(_hname(h), str(h.get("value", ""))) for h in settings.get("add") or []]
        out.header_update += [(_hname(h), str(h.get("value", ""))) for h in settings.get("update") or []]
        out.header_delete += [str(n).lower() for n in settings.get("delete") or []]
    elif kind == "pii":
        out.pii_action = str(settings.get("action") or "block")
    elif kind == "request_params":
        out.request_params = settings
    elif kind == "tools":
        out.tools = ToolPolicy(frozenset(settings["allow"]), frozenset(settings["deny"]))
    elif kind == "tool_selection":
        out.tool_selection = ToolSelectionPolicy(
            settings["top_k"], settings["similarity_threshold"], settings["fallback_to_empty"]
        )
    elif kind == "router_replay":
        out.replay = ReplayPolicy(
            bool(settings.get("capture_request_body")),
            bool(settings.get("capture_response_body")),
            settings.get("max_body_bytes"),
        )


GuardRule = tuple[str, PIISignal | JailbreakSignal | HarmfulSignal]  # (signal family, rule)


def compile_guards(decision: Decision) -> list[GuardRule]:
    """The decision's enabled `jailbreak` then `pii` plugins as guard rules (legacy v0.1
    order). An unset threshold stays unset, so the evaluator's global default applies."""
    jailbreak: JailbreakSignal | None = None
    pii: PIISignal | None = None
    for plugin in decision.plugins:
        if plugin.type not in ("pii", "jailbreak"):
            continue
        settings = plugin_settings(plugin) or {}
        if settings.get("enabled") is False:
            continue
        fields: dict[str, Any] = {"name": guard_rule_name(decision.name)}
        if settings.get("threshold") is not None:
            fields["threshold"] = settings["threshold"]
        if plugin.type == "pii":
            if settings.get("action") in ("mask", "route"):
                # what is masked or kept private must be found wherever the upstream reads it
                fields.update(include_history=True, read=["conversation", "tool_results"])
            pii = PIISignal(**fields, pii_types_allowed=settings.get("pii_types_allowed") or [])
        else:
            jailbreak = JailbreakSignal(**fields)
    return [(family, rule) for family, rule in (("jailbreak", jailbreak), ("pii", pii)) if rule is not None]


def _hname(pair: Any) -> str:
    return str(pair.get("name") if isinstance(pair, dict) else pair).lower()


def _cache_policy(settings: dict[str, Any], global_cache: ResponseCacheConfig) -> CachePolicy:
    semantic = settings.get("semantic") or {}
    threshold = (
        semantic.get("similarity_threshold")
        if isinstance(semantic, dict) and semantic.get("similarity_threshold") is not None
        else settings.get("similarity_threshold")
    )
    if threshold is None:
        threshold = global_cache.similarity_threshold
    if settings.get("mode") == "exact":
        threshold = max(float(threshold), EXACT_MODE_THRESHOLD)
    ttl = settings.get("ttl_seconds")
    controls = settings.get("request_controls") or {}
    return CachePolicy(
        True,
        float(threshold),
        int(global_cache.ttl_seconds if ttl is None else ttl),
        str(controls.get("header") or CACHE_CONTROL_HEADER).lower(),
        frozenset(controls.get("allowed") or CACHE_DIRECTIVES),
    )


def effective_cache_policy(plugins: DecisionPlugins | None, global_cache: ResponseCacheConfig) -> CachePolicy:
    """A decision's cache plugin wins; otherwise the global `response_cache` settings."""
    if plugins is not None and plugins.cache is not None:
        return plugins.cache
    return CachePolicy(global_cache.enabled, global_cache.similarity_threshold, global_cache.ttl_seconds)


# ------------------------------------------------------------------ request mutations


def completion_body(model: str | None, content: str, finish_reason: str = "stop") -> dict[str, Any]:
    """An OpenAI `chat.completion` answered by the router itself."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model or "MoM",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def refresh_cached_completion(cached: dict[str, Any], model: str | None) -> dict[str, Any]:
    """A cached chat.completion re-issued as a new answer: fresh id/created, served model."""
    body = dict(cached)
    body["id"] = f"chatcmpl-{uuid.uuid4().hex}"
    body["created"] = int(time.time())
    body["object"] = "chat.completion"
    if model:
        body["model"] = model
    body.pop("routing_metadata", None)
    return body


def apply_system_prompt(body: dict[str, Any], text: str, mode: str) -> bool:
    """insert: prepend to the existing system message (or add one first);
    replace: overwrite the existing system message's content (or add one)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    messages = list(messages)  # never mutate the caller's list
    body["messages"] = messages
    for index, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            updated = dict(message)
            if mode == "replace":
                updated["content"] = text
            else:
                existing = updated.get("content")
                if isinstance(existing, list):
                    updated["content"] = [{"type": "text", "text": text}, *existing]
                elif existing:
                    updated["content"] = f"{text}\n\n{existing}"
                else:
                    updated["content"] = text
            messages[index] = updated
            return True
    messages.insert(0, {"role": "system", "content": text})
    return True


def apply_header_mutation(plugins: DecisionPlugins, upstream: dict[str, str], remove: list[str]) -> None:
    """delete, then add, then update (so a file can drop a client header and set its own)."""
    for name in plugins.header_delete:
        if name in PROTECTED_HEADERS or name.startswith(":"):
            continue
        upstream.pop(name, None)
        if name not in remove:
            remove.append(name)
    for name, value in [*plugins.header_add, *plugins.header_update]:
        if name in PROTECTED_HEADERS or name.startswith(":"):
            continue
        upstream[name] = value
        if name in remove:
            remove.remove(name)


def apply_request_params(body: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """Strip blocked (and optionally unknown) params, clamp max_tokens and n. Returns what changed."""
    changed: list[str] = []
    for name in settings.get("blocked_params") or []:
        if name in body and name not in ("model", "messages"):
            body.pop(name)
            changed.append(f"-{name}")
    if settings.get("strip_unknown"):
        for name in [k for k in body if k not in KNOWN_CHAT_PARAMS]:
            body.pop(name)
            changed.append(f"-{name}")
    limit = settings.get("max_tokens_limit")
    if limit:
        for key in ("max_tokens", "max_completion_tokens"):
            value = body.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > limit:
                body[key] = limit
                changed.append(key)
    max_n = settings.get("max_n")
    n = body.get("n")
    if max_n and isinstance(n, int) and not isinstance(n, bool) and n > max_n:
        body["n"] = max_n
        changed.append("n")
    return changed
