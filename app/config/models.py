"""Pydantic v2 models of the canonical v0.3 configuration document.

Key names follow the reference router (vllm-project/semantic-router) so its users'
files load unchanged. Sections we implement are strict (`extra="forbid"`: a typo is a
rejection that names the path); sections of the reference router that svc-sr does not
implement yet are accepted as opaque mappings so a reference file still loads, and
`validate.py` warns about them or rejects rules that would depend on them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from app.config.model_deployments import DecisionModelRef, ModelDeployment, check_references, read_bindings
from app.config.pricing import Pricing
from app.config.reliability import FallbackConfig, ReliabilityConfig


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Open(BaseModel):
    """A section whose unknown keys are kept (reference features svc-sr does not act on)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# ---------------------------------------------------------------- listeners

class Listener(Strict):
    name: str
    address: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)
    timeout: str | None = None


# ---------------------------------------------------------------- providers

class ReasoningFamily(Strict):
    type: Literal["chat_template_kwargs", "reasoning_effort"]
    parameter: str


class ProviderDefaults(Strict):
    default_model: str | None = None
    default_reasoning_effort: Literal["low", "medium", "high"] | None = None
    reasoning_families: dict[str, ReasoningFamily] = Field(default_factory=dict)


class BackendRef(Strict):
    """One endpoint serving a model: `endpoint: host:port` or a full `base_url`."""

    name: str | None = None
    endpoint: str | None = None
    base_url: str | None = None
    protocol: Literal["http", "https"] = "http"
    weight: float = Field(default=1.0, ge=0)
    type: str | None = None
    provider: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    auth_header: str | None = None
    auth_prefix: str | None = None
    extra_headers: dict[str, str] = Field(default_factory=dict)
    api_version: str | None = None
    chat_path: str | None = None

    @model_validator(mode="after")
    def _one_address(self) -> BackendRef:
        if not self.endpoint and not self.base_url:
            raise ValueError("a backend_ref needs `endpoint` (host:port) or `base_url`")
        if self.endpoint and not re.fullmatch(r"[A-Za-z0-9_.\-]+:\d{1,5}", self.endpoint):
            raise ValueError(f"endpoint {self.endpoint!r} must be host:port (IPv6: use base_url)")
        if self.endpoint and not 1 <= int(self.endpoint.rsplit(":", 1)[1]) <= 65535:
            raise ValueError(f"endpoint {self.endpoint!r}: port must be 1 to 65535")
        if self.base_url and not re.match(r"^https?://[^\s/]+", self.base_url):
            raise ValueError(f"base_url {self.base_url!r} must be an http:// or https:// URL")
        return self

    def resolved_base_url(self) -> str:
        if self.base_url:
            return self.base_url.rstrip("/")
        return f"{self.protocol}://{self.endpoint}"


class ProviderModel(Strict):
    name: str = Field(min_length=1)
    reasoning_family: str | None = None
    provider_model_id: str | None = None
    # openai: chat completions upstream; anthropic / messages: a /v1/messages upstream (translated).
    # Anything else is refused here, not discovered as a failed request.
    api_format: Literal["openai", "anthropic", "messages"] = "openai"
    pricing: Pricing | None = None
    external_model_ids: dict[str, str] = Field(default_factory=dict)
    reliability: ReliabilityConfig | None = None
    backend_refs: list[BackendRef] = Field(default_factory=list)

    @field_validator("api_format", mode="before")
    @classmethod
    def _format_any_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class Providers(Strict):
    defaults: ProviderDefaults = Field(default_factory=ProviderDefaults)
    models: list[ProviderModel] = Field(default_factory=list)


# ---------------------------------------------------------------- signals

class KeywordSignal(Strict):
    name: str
    operator: Literal["AND", "OR", "NOR"] = "OR"
    method: Literal["regex", "exact", "bm25", "ngram", "fuzzy"] | None = None
    keywords: list[str] = Field(min_length=1)
    case_sensitive: bool = False
    bm25_threshold: float | None = None
    ngram_threshold: float | None = None
    ngram_arity: int | None = None
    fuzzy_match: bool | None = None
    fuzzy_threshold: float | None = None

    @field_validator("operator", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class EmbeddingSignal(Strict):
    name: str
    threshold: float = Field(default=0.75, ge=0, le=1)
    candidates: list[str] = Field(min_length=1)
    aggregation_method: Literal["mean", "avg", "max", "any"] = "max"
    query_modality: Literal["text"] = "text"
    model: str | None = None
    dimension: int | None = None


class DomainSignal(Strict):
    name: str
    description: str | None = None
    mmlu_categories: list[str] = Field(default_factory=list)
    model_scores: list[dict[str, Any]] = Field(default_factory=list)
    threshold: float | None = Field(default=None, ge=0, le=1)


_TOKEN_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_token_count(value: int | str | None) -> int | None:
    """`32K` -> 32768, `1M` -> 1048576, ints unchanged (reference router's suffixes)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a token count (e.g. 4096, 32K)")
    if value is None or isinstance(value, int):
        return value
    match = _TOKEN_COUNT.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a token count (e.g. 4096, 32K)")
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


# Accepts 4096 or "32K"; the JSON Schema says so, since the before-validator converts.
TokenCount = Annotated[
    Annotated[int, Field(ge=0)] | None,
    BeforeValidator(parse_token_count),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*[kKmM]?\s*$"},
                {"type": "null"},
            ]
        }
    ),
]


class ContextSignal(Strict):
    name: str
    min_tokens: TokenCount = None
    max_tokens: TokenCount = None


class JailbreakSignal(Strict):
    name: str
    method: Literal["classifier", "contrastive", "hybrid"] = "classifier"
    threshold: float = Field(default=0.5, ge=0, le=1)
    include_history: bool = False
    jailbreak_patterns: list[str] = Field(default_factory=list)
    benign_patterns: list[str] = Field(default_factory=list)


class PIISignal(Strict):
    name: str
    threshold: float = Field(default=0.5, ge=0, le=1)
    pii_types_allowed: list[str] = Field(default_factory=list)
    include_history: bool = False


class Signals(Open):
    """Signal rules by family. Families svc-sr evaluates are typed; the reference
    router's other families (fact_check, language, complexity, ...) are kept as data
    and may not be referenced by a decision (validate.py says so)."""

    keywords: list[KeywordSignal] = Field(default_factory=list)
    embeddings: list[EmbeddingSignal] = Field(default_factory=list)
    domains: list[DomainSignal] = Field(default_factory=list)
    context: list[ContextSignal] = Field(default_factory=list)
    jailbreak: list[JailbreakSignal] = Field(default_factory=list)
    pii: list[PIISignal] = Field(default_factory=list)


# condition `type` -> the Signals attribute holding rules of that type
SIGNAL_FAMILIES: dict[str, str] = {
    "keyword": "keywords",
    "embedding": "embeddings",
    "domain": "domains",
    "context": "context",
    "jailbreak": "jailbreak",
    "pii": "pii",
}

# Condition types of the reference router that svc-sr does not evaluate (yet).
REFERENCE_ONLY_SIGNAL_TYPES = frozenset(
    {
        "fact_check", "user_feedback", "reask", "preference", "language", "structure",
        "complexity", "modality", "authz", "kb", "conversation", "event", "metadata",
        "classifier", "projection",
    }
)


# ---------------------------------------------------------------- decisions

class Condition(Strict):
    """A rule node: a leaf `{type, name}` or a subtree `{operator, conditions}`."""

    type: str | None = None
    name: str | None = None
    operator: Literal["AND", "OR", "NOT"] | None = None
    conditions: list[Condition] = Field(default_factory=list)
    label: str | None = None
    on_error: Literal["match", "no_match"] | None = None

    @field_validator("operator", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _leaf_or_tree(self) -> Condition:
        is_leaf = self.type is not None or self.name is not None
        is_tree = self.operator is not None
        if is_leaf and is_tree:
            raise ValueError("a condition is either a leaf {type, name} or a tree {operator, conditions}")
        if is_leaf and not (self.type and self.name):
            raise ValueError("a leaf condition needs both `type` and `name`")
        if is_tree and self.operator == "NOT" and len(self.conditions) != 1:
            raise ValueError("NOT takes exactly one condition")
        if is_tree and not self.conditions:
            raise ValueError(f"{self.operator} needs at least one condition")
        return self

    @property
    def is_leaf(self) -> bool:
        return self.type is not None


class ModelRef(Strict):
    model: str
    use_reasoning: bool | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    reasoning_description: str | None = None
    lora_name: str | None = None
    weight: float | None = Field(default=None, ge=0)


class Algorithm(Open):
    type: Literal["static", "weighted"] = "static"


PLUGIN_TYPES = frozenset(
    {
        "system_prompt", "header_mutation", "fast_response", "semantic-cache", "response_cache",
        "pii", "jailbreak", "router_replay", "request_params",
    }
)
REFERENCE_ONLY_PLUGIN_TYPES = frozenset(
    {
        "tools", "tool_selection", "context_compression", "rag", "memory", "hallucination",
        "response_jailbreak", "image_gen", "shadow_dispatch",
    }
)


class Plugin(Strict):
    type: str
    configuration: dict[str, Any] = Field(default_factory=dict)
    enabled: bool | None = None


class Decision(Strict):
    name: str = Field(min_length=1)
    description: str | None = None
    priority: int = 0
    tier: int = Field(default=0, ge=0)
    rules: Condition | None = None
    modelRefs: list[ModelRef] = Field(default_factory=list)
    preferred_endpoints: list[str] = Field(default_factory=list)
    plugins: list[Plugin] = Field(default_factory=list)
    algorithm: Algorithm = Field(default_factory=Algorithm)
    reliability: ReliabilityConfig | None = None
    fallback: FallbackConfig | None = None


class Routing(Strict):
    strategy: Literal["priority", "confidence"] = "priority"
    modelCards: list[dict[str, Any]] = Field(default_factory=list)
    signals: Signals = Field(default_factory=Signals)
    projections: dict[str, Any] = Field(default_factory=dict)
    decisions: list[Decision] = Field(default_factory=list)


# ---------------------------------------------------------------- global

class RouterSettings(Open):
    auto_model_name: str = "MoM"
    auto_model_names: list[str] = Field(default_factory=lambda: ["auto"])
    include_config_models_in_list: bool = True
    clear_route_cache: bool = True
    enabled: bool = True
    # Router-wide cross-model fallback; a decision's `fallback:` is layered over it.
    fallback: FallbackConfig | None = None


class ResponseCacheConfig(Open):
    enabled: bool = False
    backend_type: Literal["memory", "milvus", "redis", "hybrid"] = "memory"
    similarity_threshold: float = Field(default=0.8, ge=0, le=1)
    max_entries: int = Field(default=1000, ge=0)
    ttl_seconds: int = Field(default=3600, ge=0)
    eviction_policy: Literal["fifo", "lru", "lfu"] = "fifo"
    embedding_model: str | None = None
    use_hnsw: bool = False


class Stores(Open):
    response_cache: ResponseCacheConfig = Field(default_factory=ResponseCacheConfig)


class AuthConfig(Open):
    mode: Literal["none", "bearer"] = "none"


class ManagementApi(Open):
    bind_address: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    auth: AuthConfig = Field(default_factory=AuthConfig)


class MetricsService(Open):
    enabled: bool = True
    bind_address: str = "127.0.0.1"
    port: int = Field(default=9190, ge=1, le=65535)


class Observability(Open):
    metrics: MetricsService = Field(default_factory=MetricsService)


class DataPlaneLimits(Open):
    """svc-sr extension: limits of the standalone data plane."""

    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)


class ExtProcService(Open):
    """svc-sr extension: the ext_proc bridge Envoy calls (spec 1: gRPC on 50051)."""

    bind_address: str = "127.0.0.1"
    port: int = Field(default=50051, ge=1, le=65535)
    # open: a request the bridge fails on (or cannot reach) goes on unrouted; closed: 503.
    failure_mode: Literal["open", "closed"] = "closed"
    message_timeout_ms: int = Field(default=10000, ge=10)


class EnvoyService(Open):
    """svc-sr extension: the Envoy that `svc-sr serve` generates and supervises."""

    enabled: bool = True
    admin_port: int = Field(default=9901, ge=1, le=65535)
    route_timeout_s: int = Field(default=600, ge=1)  # whole answer, streams included


class Services(Open):
    management_api: ManagementApi = Field(default_factory=ManagementApi)
    observability: Observability = Field(default_factory=Observability)
    data_plane: DataPlaneLimits = Field(default_factory=DataPlaneLimits)
    ext_proc: ExtProcService = Field(default_factory=ExtProcService)
    envoy: EnvoyService = Field(default_factory=EnvoyService)


# Where spec 2's `on_unscanned` may be set, under global.model_catalog.
ON_UNSCANNED_MODULES = (("modules", "prompt_guard"), ("modules", "classifier", "pii"))


class GlobalConfig(Open):
    router: RouterSettings = Field(default_factory=RouterSettings)
    services: Services = Field(default_factory=Services)
    stores: Stores = Field(default_factory=Stores)
    # Reference-layout model settings, kept as data; the keys svc-sr acts on are checked below:
    # `signal_timeout_ms` (deadline of model-runtime signals), `on_unscanned` of the prompt
    # guard and the PII classifier, and the bindings (`deployment`, `contract`, `head`) of
    # modules.classifier.domain / .pii and modules.prompt_guard (spec 2 "Router settings for
    # managed runtimes"; app/config/model_deployments.py BINDINGS).
    model_catalog: dict[str, Any] = Field(default_factory=dict)
    integrations: dict[str, Any] = Field(default_factory=dict)

    @field_validator("model_catalog")
    @classmethod
    def _runtime_keys(cls, catalog: dict[str, Any]) -> dict[str, Any]:
        timeout = catalog.get("signal_timeout_ms")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1):
            raise ValueError(f"signal_timeout_ms: a positive integer of milliseconds, got {timeout!r}")
        for path in ON_UNSCANNED_MODULES:
            node: Any = catalog
            for key in path:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict) and node.get("on_unscanned", "block") not in ("block", "allow"):
                raise ValueError(f"{'.'.join(path)}.on_unscanned: 'block' or 'allow', got {node['on_unscanned']!r}")
        read_bindings(catalog)
        return catalog


# ---------------------------------------------------------------- document

class RouterConfig(Strict):
    """The canonical v0.3 document."""

    version: Literal["v0.3"] = "v0.3"
    listeners: list[Listener] = Field(default_factory=list)
    providers: Providers = Field(default_factory=Providers)
    routing: Routing = Field(default_factory=Routing)
    global_: GlobalConfig = Field(default_factory=GlobalConfig, alias="global")
    entrypoints: list[dict[str, Any]] = Field(default_factory=list)
    recipes: list[dict[str, Any]] = Field(default_factory=list)
    # Model-runtime deployments (spec 2): provider model_runtime, managed by the router
    # (`svc-srun run` over a Unix socket) or attached through `endpoint`; docs/model-runtime.md.
    model_deployments: dict[str, ModelDeployment] = Field(default_factory=dict)
    # The deployment answering /v1/decisions and /v1/systemone (absent: the built-in decision model).
    decision_model: DecisionModelRef | None = None

    @model_validator(mode="after")
    def _runtime_refs(self) -> RouterConfig:
        check_references(self.model_deployments, self.decision_model, read_bindings(self.global_.model_catalog))
        return self

    # ---- lookups used by the pipeline
    def model(self, name: str) -> ProviderModel | None:
        for model in self.providers.models:
            if model.name == name or name in model.external_model_ids.values():
                return model
        return None

    @property
    def auto_model_names(self) -> set[str]:
        settings = self.global_.router
        return {settings.auto_model_name, "MoM", "auto", *settings.auto_model_names}

    @property
    def default_model(self) -> str | None:
        return self.providers.defaults.default_model

    def to_document(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


Condition.model_rebuild()
