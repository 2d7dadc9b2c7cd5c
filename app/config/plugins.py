"""Typed configurations of the decision plugins svc-sr applies.

A decision lists plugins as `{type, configuration}` with an opaque mapping (reference
router layout). The loader validates each configuration against the model below, so a
typo is rejected at load time with its path; the pipeline then calls `parse_plugin()`
to get the typed object instead of reading raw dicts.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.config.routing import PLUGIN_TYPES, REFERENCE_ONLY_PLUGIN_TYPES, Plugin

# RFC 9110 token: what a header name may contain.
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Hop-by-hop and framing headers belong to the transport: rewriting them breaks the
# upstream request instead of annotating it.
PROTECTED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
        "content-encoding",
    }
)


class PluginConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True


class SystemPromptPlugin(PluginConfig):
    """`replace` swaps any system message for this one; `insert` puts it before the existing one."""

    system_prompt: str = Field(min_length=1)
    mode: Literal["insert", "replace"] = "replace"


class HeaderValue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    value: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_header_name(value)

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        if any(ch in value for ch in "\r\n\0"):
            raise ValueError("header values may not contain CR, LF or NUL")
        return value


def _check_header_name(name: str) -> str:
    if not _HEADER_NAME.match(name):
        raise ValueError(f"{name!r} is not a valid HTTP header name")
    if name.lower() in PROTECTED_HEADERS or name.startswith(":"):
        raise ValueError(f"header {name!r} is managed by the transport and cannot be mutated")
    return name


class HeaderMutationPlugin(PluginConfig):
    """Headers added to / overwritten on / removed from the upstream request."""

    add: list[HeaderValue] = Field(default_factory=list)
    update: list[HeaderValue] = Field(default_factory=list)
    delete: list[str] = Field(default_factory=list)

    @field_validator("delete")
    @classmethod
    def _delete(cls, value: list[str]) -> list[str]:
        return [_check_header_name(name) for name in value]

    @model_validator(mode="after")
    def _something(self) -> HeaderMutationPlugin:
        if not (self.add or self.update or self.delete):
            raise ValueError("header_mutation needs at least one of add, update, delete")
        return self


class FastResponsePlugin(PluginConfig):
    """Answer immediately with `message` (no upstream call), e.g. for blocks or greetings."""

    message: str = Field(min_length=1)


class SemanticCacheSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    similarity_threshold: float | None = Field(default=None, ge=0, le=1)


class RequestControls(BaseModel):
    """Which client cache-control directives are honoured (reference key names)."""

    model_config = ConfigDict(extra="forbid")

    header: str = "x-vsr-cache-control"
    allowed: list[Literal["no-cache", "no-store", "bypass", "max-age", "ttl"]] = Field(default_factory=list)


class ResponseCachePlugin(PluginConfig):
    """`response_cache` (and its older alias `semantic-cache`): per-decision cache settings.

    Unset thresholds and TTLs fall back to `global.stores.response_cache`.
    """

    mode: Literal["exact", "semantic", "exact_then_semantic"] = "exact_then_semantic"
    similarity_threshold: float | None = Field(default=None, ge=0, le=1)
    semantic: SemanticCacheSettings = Field(default_factory=SemanticCacheSettings)
    ttl_seconds: int | None = Field(default=None, ge=0)
    scope: Literal["global", "user"] | None = None
    request_controls: RequestControls | None = None

    @property
    def effective_threshold(self) -> float | None:
        """The decision's threshold (`semantic.` wins over the flat key); None = global."""
        if self.semantic.similarity_threshold is not None:
            return self.semantic.similarity_threshold
        return self.similarity_threshold


class PIIPlugin(PluginConfig):
    """Act on requests carrying PII other than `pii_types_allowed` (empty: any PII counts):
    `block` (403), `route` (to the models marked `private`), or `mask` (placeholders to the
    upstream, the originals restored in the answer; docs/security.md "PII actions")."""

    pii_types_allowed: list[str] = Field(default_factory=list)
    action: Literal["block", "route", "mask"] = "block"
    threshold: float | None = Field(default=None, ge=0, le=1)

    @field_validator("pii_types_allowed")
    @classmethod
    def _upper(cls, value: list[str]) -> list[str]:
        return [item.strip().upper() for item in value if item.strip()]


class JailbreakPlugin(PluginConfig):
    threshold: float | None = Field(default=None, ge=0, le=1)


class RouterReplayPlugin(PluginConfig):
    """Record routing decisions for replay; extra reference keys are kept, not interpreted."""

    model_config = ConfigDict(extra="allow")

    max_records: int | None = Field(default=None, ge=0)
    capture_request_body: bool = False
    capture_response_body: bool = False
    max_body_bytes: int | None = Field(default=None, ge=0)


class RequestParamsPlugin(PluginConfig):
    """Guard rails on client request parameters before forwarding."""

    blocked_params: list[str] = Field(default_factory=list)
    max_tokens_limit: int | None = Field(default=None, ge=1)
    max_n: int | None = Field(default=None, ge=1)
    strip_unknown: bool = False


class ToolsPlugin(PluginConfig):
    """`tools`: a static policy on the request's `tools[]`, by function name. A non-empty
    `allow` keeps only those names; `deny` removes names (deny wins over allow)."""

    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)


class ToolSelectionPlugin(PluginConfig):
    """`tool_selection`: keep the request's own tools that its last user turn needs, by cosine
    similarity of the router's sentence vectors (query vs each tool's `name: description`):
    the `top_k` best at or above `similarity_threshold`. When none reaches the threshold,
    `fallback_to_empty` false keeps every tool, true keeps none (reference key names)."""

    top_k: int = Field(default=3, ge=1, le=128)
    similarity_threshold: float = Field(default=0.25, ge=0, le=1)
    fallback_to_empty: bool = False


class ContextCompressionPlugin(PluginConfig):
    """Fit the forwarded messages into `max_tokens` (app/pipeline/compression.py): every
    system message (with `keep_system`) and the last `keep_last_turns` turns stay; the oldest
    other turns are dropped, whole (a tool call never loses its result), until the rest fits.
    `summarize` puts one system message in their place, the lead sentences of the dropped
    turns (extractive, no model call), at most `summary_max_tokens` long."""

    max_tokens: int = Field(ge=16, le=10_000_000, description="token budget of the forwarded messages")
    keep_system: bool = True
    keep_last_turns: int = Field(
        default=4, ge=1, le=10_000, description="a turn: a user message and its replies"
    )
    strategy: Literal["drop", "summarize"] = "drop"
    summary_max_tokens: int = Field(default=256, ge=16, le=100_000)


class MemoryPlugin(PluginConfig):
    """Long-term memory (app/pipeline/memory/): recall the scope's relevant memories into the
    request as a system message, and remember durable facts of the user's turn after the answer."""

    scope: Literal["user", "session"] = "user"
    recall_top_k: int = Field(default=5, ge=0, le=50)
    # cosine similarity of a memory to the request text for it to be recalled
    recall_threshold: float = Field(default=0.25, ge=-1, le=1)
    max_memories: int = Field(default=200, ge=1, le=10_000)  # per scope, the oldest dropped first
    # a new fact this similar to a kept one is the same fact (not stored again)
    dedupe_threshold: float = Field(default=0.9, ge=0, le=1)
    extract: bool = True  # remember facts of the user's turns (false: recall only)
    inject_as: Literal["system"] = "system"


# A knowledge base's name, as /api/v1/storage/knowledge-bases accepts it (kb_data.KB_NAME;
# app/config imports nothing outside itself, so the pattern is repeated, and a test pins it).
KB_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
KbName = Annotated[str, Field(min_length=1, max_length=64, pattern=KB_NAME_PATTERN)]


class RagPlugin(PluginConfig):
    """Retrieval-augmented generation (app/pipeline/rag.py): the request's last user turn
    searched in the named vector store(s) and/or knowledge base(s), the passages injected
    within `max_context_tokens` (MiniLM WordPiece tokens, as context_compression counts).

    A knowledge base's entries are scored by cosine similarity to the request's vector (the
    kb signal's encoder and vectors); each source kind keeps its best `top_k`, and when both
    kinds are named the two lists are interleaved by rank (docs/storage.md "rag plugin")."""

    # a vector store's id, or its name (/api/v1/storage/vector-stores; the newest of that name)
    vector_store_id: str | None = Field(default=None, min_length=1, max_length=256)
    vector_store_ids: list[str] = Field(default_factory=list, max_length=16)
    # a knowledge base of /api/v1/storage/knowledge-bases: its entries' texts are the passages
    knowledge_base: KbName | None = None
    knowledge_bases: list[KbName] = Field(default_factory=list, max_length=16)
    top_k: int = Field(default=4, ge=1, le=50)
    # a vector-store chunk's ranker score (hybrid, hybrid_rerank: 0..1 fused; vector: cosine; bm25: BM25)
    score_threshold: float = Field(default=0.0, ge=0)
    # a knowledge-base entry's cosine similarity to the request
    knowledge_base_threshold: float = Field(default=0.0, ge=-1, le=1)
    ranker: Literal["hybrid", "vector", "bm25", "hybrid_rerank"] = "hybrid"
    inject_as: Literal["system", "context_block"] = "system"
    max_context_tokens: int = Field(default=1024, ge=16, le=1_000_000)
    cache_ttl_seconds: float = Field(default=300.0, ge=0, le=86_400, description="0: no result cache")
    on_error: Literal["skip", "fail"] = "skip"

    @model_validator(mode="after")
    def _a_source(self) -> RagPlugin:
        if not self.store_ids and not self.kb_names:
            raise ValueError(
                "rag needs a source: `vector_store_id`, `vector_store_ids`, `knowledge_base` "
                "or `knowledge_bases`"
            )
        return self

    @property
    def store_ids(self) -> list[str]:
        ids = ([self.vector_store_id] if self.vector_store_id else []) + self.vector_store_ids
        return list(dict.fromkeys(ids))

    @property
    def kb_names(self) -> list[str]:
        names = ([self.knowledge_base] if self.knowledge_base else []) + self.knowledge_bases
        return list(dict.fromkeys(names))


AnswerAction = Literal["header", "annotate", "block"]


class ResponseJailbreakPlugin(PluginConfig):
    """Check the ANSWER with the prompt guard (jailbreak) and the harmful-content classifier.

    `threshold` unset: the guard's default (`prompt_guard.threshold`, else 0.5). `action`:
    `header` adds x-vsr-response-warnings, `annotate` also appends a visible notice,
    `block` replaces the answer with a 403 security_violation (docs/hallucination.md)."""

    threshold: float | None = Field(default=None, ge=0, le=1)
    action: AnswerAction = "header"
    harmful: bool = True  # also run the harmful-content classifier on the answer


class HallucinationPlugin(PluginConfig):
    """Flag answer sentences the request's context does not support (app/pipeline/answers).

    A sentence's support mixes its best embedding similarity to a context sentence and the
    share of its content words/numbers found in the context; under `threshold` it is
    unsupported. Runs only when the request carried context (system/developer/tool
    messages, or a user message of at least `min_context_chars`), and with
    `require_fact_check` only when a fact_check signal `needs_fact_check` matched."""

    model_config = ConfigDict(extra="allow")  # reference keys (e.g. model ids) are kept, not used

    threshold: float = Field(default=0.5, ge=0, le=1)
    action: AnswerAction = "header"
    min_unsupported: int = Field(default=1, ge=1)  # flagged sentences before the answer is flagged
    min_context_chars: int = Field(default=200, ge=0)
    require_fact_check: bool = False
    # false: lexical overlap alone (~0.1 ms an answer instead of one encoder pass per sentence)
    use_embeddings: bool = True


PLUGIN_MODELS: dict[str, type[PluginConfig]] = {
    "system_prompt": SystemPromptPlugin,
    "header_mutation": HeaderMutationPlugin,
    "fast_response": FastResponsePlugin,
    "semantic-cache": ResponseCachePlugin,
    "response_cache": ResponseCachePlugin,
    "pii": PIIPlugin,
    "jailbreak": JailbreakPlugin,
    "router_replay": RouterReplayPlugin,
    "request_params": RequestParamsPlugin,
    "tools": ToolsPlugin,
    "tool_selection": ToolSelectionPlugin,
    "context_compression": ContextCompressionPlugin,
    "memory": MemoryPlugin,
    "response_jailbreak": ResponseJailbreakPlugin,
    "hallucination": HallucinationPlugin,
    "rag": RagPlugin,
}
assert set(PLUGIN_MODELS) == set(PLUGIN_TYPES), "every applied plugin type needs a model"

# Types that mean the same thing; two of them in one decision is a conflict.
PLUGIN_KIND: dict[str, str] = {"semantic-cache": "response_cache"}


class UnknownPluginError(ValueError):
    pass


def plugin_payload(plugin: Plugin) -> dict:
    """The configuration mapping, with the plugin-level `enabled:` folded in (it wins)."""
    payload = dict(plugin.configuration)
    if plugin.enabled is not None:
        payload["enabled"] = plugin.enabled
    return payload


def parse_plugin(plugin: Plugin) -> PluginConfig | None:
    """Typed configuration of `plugin`.

    Returns None for reference-router plugin types svc-sr accepts but does not apply
    (the loader warned about them). Raises UnknownPluginError for any other type and
    pydantic.ValidationError for a bad configuration; neither happens for a config
    that went through the loader.
    """
    model = PLUGIN_MODELS.get(plugin.type)
    if model is None:
        if plugin.type in REFERENCE_ONLY_PLUGIN_TYPES:
            return None
        raise UnknownPluginError(f"unknown plugin type {plugin.type!r}")
    return model.model_validate(plugin_payload(plugin))
