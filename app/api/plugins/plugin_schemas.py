"""Wire shapes of the plugins API (docs/plugins.md): registry descriptors, bindings, previews.

The logic lives in plugins_registry.py (descriptors), plugin_bindings.py (bindings of the
active config) and plugin_previews.py (the preview dispatcher); routes/plugins.py serves them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.common.api_docs import Absent, no_default

PluginPhase = Literal["request", "response", "storage", "observability"]
OperationName = Literal["preview", "probe", "bindings", "storage", "observability"]
PreviewMode = Literal["preview", "probe"]


class PluginOperation(BaseModel):
    name: OperationName
    method: Literal["GET", "POST"]
    url: str = Field(description="where the operation is served (storage/observability: another API)")


class PluginDescriptor(BaseModel):
    type: str
    description: str
    phase: PluginPhase = Field(description="where in a request's life the plugin acts")
    applied: bool = Field(description="svc-sr applies it; false: accepted in configs, not applied")
    alias_of: str | None = Field(default=None, description="the type this one is another name of")
    schema_url: str = Field(description="the descriptor holding the typed configuration's JSON schema")
    bindings_url: str
    binding_required: bool = Field(description="previews need binding {recipe, decision}")
    operations: list[PluginOperation]


class PluginDetail(PluginDescriptor):
    configuration_schema: dict[str, Any] = Field(
        description="JSON schema of `configuration` (untyped types: any object, not interpreted)"
    )


class PluginList(BaseModel):
    plugins: list[PluginDescriptor]


class PluginDependency(BaseModel):
    name: str
    kind: Literal["model", "service", "store"]
    config_path: str | None = Field(default=None, description="where the configuration sets it up")
    configured: bool
    available: bool | None = Field(
        default=None, description="null: not inspected at runtime (configuration only)"
    )


class PluginBindingView(BaseModel):
    recipe: str
    decision: str
    plugin_index: int = Field(description="position in the decision's plugins[]")
    type: str = Field(description="the type as configured (an alias stays as written)")
    declared_enabled: bool = Field(description="`enabled` as configured (plugin or configuration)")
    applied: bool
    reachability: Literal["configured", "disabled", "not_applied", "dependency_unconfigured"]
    dependencies: list[PluginDependency]
    dependencies_available: bool | None = Field(
        default=None, description="every dependency configured and answering; null: not inspected"
    )
    runtime_inspected: bool = Field(default=False, description="false: derived from the configuration only")


class PluginBindingList(BaseModel):
    type: str
    recipe: str | None = None
    decision: str | None = None
    bindings: list[PluginBindingView] = Field(description="empty: not configured in that scope")
    runtime_inspected: bool = False


class PreviewBinding(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipe: str = Field(default="default", min_length=1, max_length=128)
    decision: str = Field(min_length=1)


class SampleRequest(BaseModel):
    """A chat request as a client would send it (other parameters kept)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] | Absent = Field(default=None, json_schema_extra=no_default)


class AnswerConditions(BaseModel):
    """What a detector would have said, for a preview of the policy alone (no model call)."""

    model_config = ConfigDict(extra="forbid")
    score: float | Absent = Field(
        default=None, ge=0, le=1, description="response_jailbreak: the guard's risk on the answer"
    )
    unsupported_sentences: int | Absent = Field(
        default=None,
        ge=0,
        le=10_000,
        description="hallucination: answer sentences the context does not support",
    )
    support: float | Absent = Field(
        default=None, ge=0, le=1, description="hallucination: the lowest sentence support"
    )


class PluginPreviewRequest(BaseModel):
    """Exactly one of `configuration` (a typed candidate) and `binding` (the active one)."""

    model_config = ConfigDict(extra="forbid")
    configuration: dict[str, Any] | Absent = Field(
        default=None,
        description="candidate configuration of the plugin type",
        json_schema_extra=no_default,
    )
    binding: PreviewBinding | Absent = Field(
        default=None, description="the active plugin of {recipe, decision}", json_schema_extra=no_default
    )
    request: SampleRequest = Field(default_factory=SampleRequest)
    headers: dict[str, str] = Field(
        default_factory=dict, description="upstream request headers (header_mutation)"
    )
    supplied_context: list[str] | Absent = Field(
        default=None,
        description="rag: documents to inject instead of a retrieval",
        json_schema_extra=no_default,
    )
    answer: str | Absent = Field(
        default=None,
        max_length=200_000,
        description="hallucination / response_jailbreak probe: the answer text the detectors check",
        json_schema_extra=no_default,
    )
    conditions: AnswerConditions | Absent = Field(
        default=None,
        description="hallucination / response_jailbreak preview: the detector outcome to apply the policy to",
        json_schema_extra=no_default,
    )
    mode: PreviewMode = Field(default="preview", description="`probe` calls models/services; explicit only")

    @model_validator(mode="after")
    def _one_source(self) -> PluginPreviewRequest:
        if (self.configuration is None) == (self.binding is None):
            raise ValueError(
                "give exactly one of `configuration` (a candidate) and `binding` {recipe, decision}"
            )
        return self


class PluginPreviewResponse(BaseModel):
    type: str
    mode: PreviewMode
    persisted: bool = Field(default=False, description="false: no plugin data or conversation state written")
    backend_calls: int = Field(description="backend and model calls this preview made")
    source: Literal["candidate", "binding"]
    binding: PreviewBinding | None = None
    enabled: bool = Field(description="the configuration's `enabled` (a disabled plugin is previewed anyway)")
    applied: bool = Field(description="svc-sr applies this type on requests")
    selection_status: str | None = None
    selection_method: str | None = None
    selected_model: str | None = None
    result: dict[str, Any] = Field(description="the type's preview (see the typed *Preview shapes)")


# ------------------------------------------------------------ typed results (PluginPreviewResponse.result)


class SystemPromptPreview(BaseModel):
    messages: list[dict[str, Any]]
    injected: bool
    mode: Literal["insert", "replace"]


class RequestParamsPreview(BaseModel):
    request: dict[str, Any]
    changed: list[str] = Field(description="`-name`: removed; `name`: clamped")


class HeaderMutationPreview(BaseModel):
    headers: dict[str, str] = Field(description="upstream request headers after the mutation")
    removed: list[str]


class FastResponsePreview(BaseModel):
    response: dict[str, Any] = Field(description="the chat.completion the router would answer")


class RagChunkUsed(BaseModel):
    """A probe's passage: a vector-store chunk or a knowledge-base entry (app/pipeline/rag.py)."""

    source: Literal["vector_store", "knowledge_base"] = "vector_store"
    score: float
    vector_store_id: str | None = None
    file_id: str | None = None
    chunk_id: str | None = None
    knowledge_base: str | None = None
    entry_id: str | None = None
    index: int | None = None  # the entry's position in its base
    label: str | None = None


# a probe's real search: of vector stores, knowledge bases, or both (mixed)
RagRetrieval = Literal["supplied_context", "vector_store", "knowledge_base", "mixed"]


class RagPreview(BaseModel):
    injected_context: str
    messages: list[dict[str, Any]]
    retrieval: RagRetrieval
    chunks: list[RagChunkUsed] = Field(default_factory=list)  # the probe's chunks, best first
    tokens: int | None = None  # the probe's injected passages, MiniLM WordPiece tokens


class ToolsPreview(BaseModel):
    offered: list[str]
    kept: list[str]
    removed_by_policy: list[str]
    scores: dict[str, float]
    method: str = Field(description="none | static | semantic | semantic_fallback | requires_probe")
    tools_selected: int = Field(description="the x-tools-selected value")
