"""The `global:` section: router settings, stores, services and the model catalog."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from app.common.body_limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_DEPTH,
    HARD_MAX_DEPTH,
    MAX_BODY_BYTES_LIMIT,
    MIN_MAX_DEPTH,
)
from app.config.cache_stores import HnswSettings, MilvusCacheSettings, RedisCacheSettings
from app.config.external_models import parse_external_models
from app.config.model_base import Open, Strict
from app.config.model_deployments import read_bindings
from app.config.reliability import FallbackConfig
from app.config.storage import VectorStoreConfig


class SessionAffinity(Strict):
    """`global.router.session_affinity`: keep an agent's session on one model (docs/routing-quality.md
    "Agent traffic"). Off by default. A session is named by `x-session-id`, else the body's
    `user`, else (with `fingerprint`) a hash of the system prompt and the first ask. A session
    is locked to its model while a tool call is pending, kept on a turn that matches no
    decision, and otherwise switches only when the switch's expected gain (`switch_value` times
    the new decision's confidence, plus what this turn and each of `horizon_turns` later turns
    save on the new model: cached prompt and an `answer_tokens` answer, priced as turns are
    paid) beats its price (the prompt the new model has not cached at its prefix-cache
    checkout price, cache_write_per_1m minus cached_input_per_1m). `step_down`: a turn that
    matches no decision may move to a cheaper default model on the saving alone
    (docs/configuration.md "Session-aware routing")."""

    enabled: bool = False
    fingerprint: bool = True
    switch_value: float = Field(default=0.002, ge=0, description="USD a switch is worth at confidence 1")
    answer_tokens: int = Field(default=200, ge=0, le=1_000_000, description="an answer's size, for pricing")
    horizon_turns: float = Field(
        default=0.0, ge=0, le=1000, description="later turns a switch is expected to serve, for its saving"
    )
    step_down: bool = Field(
        default=False, description="a turn that matches no decision may move the session to a cheaper default"
    )
    ttl_seconds: int = Field(default=3600, ge=1, le=30 * 86400)
    timeout_ms: float = Field(default=50.0, gt=0, le=5000, description="a slower store: per-turn routing")


class RouterSettings(Open):
    auto_model_name: str = "MoM"
    auto_model_names: list[str] = Field(default_factory=lambda: ["auto"])
    include_config_models_in_list: bool = True
    clear_route_cache: bool = True
    enabled: bool = True
    # Router-wide cross-model fallback; a decision's `fallback:` is layered over it.
    fallback: FallbackConfig | None = None
    session_affinity: SessionAffinity = Field(default_factory=SessionAffinity)


class ResponseCacheConfig(Open, HnswSettings):
    """`global.stores.response_cache`: the cache's capacity, its backend, and where stores live.

    `backend_type` picks the backend (app/cache/factory.py); `redis` / `milvus` are read only
    by that backend, and by `hybrid`, a bounded in-memory tier per replica over the store of
    record `hybrid_store` names (Milvus by default, as the reference router's hybrid). The
    in-memory HNSW keys (use_hnsw, hnsw_m, hnsw_ef_construction, max_memory_entries) come
    flat from HnswSettings, as the reference router spells them.
    """

    enabled: bool = False
    backend_type: Literal["memory", "milvus", "redis", "hybrid"] = "memory"
    hybrid_store: Literal["milvus", "redis"] = "milvus"  # svc-sr extension: the hybrid's store of record
    similarity_threshold: float = Field(default=0.8, ge=0, le=1)
    max_entries: int = Field(default=1000, ge=0)
    ttl_seconds: int = Field(default=3600, ge=0)
    eviction_policy: Literal["fifo", "lru", "lfu"] = "fifo"
    embedding_model: str | None = None
    redis: RedisCacheSettings = Field(default_factory=RedisCacheSettings)
    milvus: MilvusCacheSettings = Field(default_factory=MilvusCacheSettings)


class Stores(Open):
    response_cache: ResponseCacheConfig = Field(default_factory=ResponseCacheConfig)
    vector_store: VectorStoreConfig = Field(default_factory=VectorStoreConfig)


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


class TracingExporter(Open):
    """Where spans go: OTLP over HTTP (protobuf) to `endpoint` (the collector's base URL or its
    full `/v1/traces` URL); `stdout` prints them (debugging)."""

    type: Literal["otlp", "stdout"] = "otlp"
    endpoint: str = "http://127.0.0.1:4318"
    insecure: bool = True  # the reference key; plain http:// is what an http URL means here
    timeout_s: float = Field(default=10.0, gt=0)


class TracingSampling(Open):
    """`always_on`, `always_off`, or `probabilistic` at `rate`; a client's sampled traceparent
    is followed either way (parent-based)."""

    type: Literal["always_on", "always_off", "probabilistic"] = "always_on"
    rate: float = Field(default=1.0, ge=0, le=1)


class TracingResource(Open):
    service_name: str = "svc-sr"
    service_version: str | None = None
    deployment_environment: str | None = None


class TracingConfig(Open):
    """OpenTelemetry traces of the data plane (docs/security.md "Tracing"); a change needs a restart."""

    enabled: bool = False
    provider: Literal["opentelemetry"] = "opentelemetry"
    exporter: TracingExporter = Field(default_factory=TracingExporter)
    sampling: TracingSampling = Field(default_factory=TracingSampling)
    resource: TracingResource = Field(default_factory=TracingResource)


class Observability(Open):
    metrics: MetricsService = Field(default_factory=MetricsService)
    tracing: TracingConfig = Field(default_factory=TracingConfig)


class DataPlaneLimits(Open):
    """svc-sr extension: limits of every request body the API reads, on both front doors (the
    Ingress, Envoy's ext_proc bridge) and the management API (docs/management-api.md, "Limits"):
    a bigger body answers 413, a JSON body nested deeper 400."""

    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024, le=MAX_BODY_BYTES_LIMIT)
    max_json_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=MIN_MAX_DEPTH, le=HARD_MAX_DEPTH)


class ExtProcService(Open):
    """svc-sr extension: the ext_proc bridge Envoy calls (gRPC on 50051, as the contract fixes)."""

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


class ResponseApiConfig(Open):
    """`global.services.response_api` (reference key names): the Responses API store behind
    GET|DELETE /v1/responses/{id}, /v1/responses/{id}/input_items and `previous_response_id`.

    `store_backend`: `auto` keeps responses in the management store's Redis when the management
    store is on Redis (every Ingress replica on every node can continue a conversation), else
    in the Ingress replica's memory; `memory` always in the replica's memory; `redis` the
    management store's Redis (memory, with a warning, when the management store is a file).
    `ttl_seconds`: how long a stored response can be read or continued; `max_responses`: the
    most kept, the oldest dropped first (app/exchange/responses/store.py).
    """

    enabled: bool = True
    store_backend: Literal["auto", "memory", "redis"] = "auto"
    ttl_seconds: int = Field(default=86400, ge=1)
    max_responses: int = Field(default=1000, ge=1)


class RateLimitRule(Strict):
    """A token bucket: `requests_per_minute` refill, at most `burst` at once (default: the rate)."""

    requests_per_minute: int = Field(ge=1)
    burst: int | None = Field(default=None, ge=1)

    @property
    def capacity(self) -> int:
        return self.burst or self.requests_per_minute


class RateLimitConfig(Open):
    """`global.services.ratelimit`: the data plane's request rate limits (app/api/rate_limit.py).

    `per_key`: one bucket per API key (`Authorization: Bearer` or `x-api-key`; callers without
    a key share the bucket `anonymous`). `routes`: one bucket per data-plane route template
    (e.g. `/v1/chat/completions`, `/v1/responses/{response_id}`) shared by every caller. A
    request takes a token from each bucket that applies; an empty one answers 429
    RATE_LIMIT_EXCEEDED with Retry-After. Buckets live where the Responses store lives
    (`backend` as `response_api.store_backend`): shared on Redis, else per replica.
    """

    enabled: bool = False
    backend: Literal["auto", "memory", "redis"] = "auto"
    per_key: RateLimitRule | None = None
    routes: dict[str, RateLimitRule] = Field(default_factory=dict)

    @field_validator("routes")
    @classmethod
    def _route_paths(cls, routes: dict[str, RateLimitRule]) -> dict[str, RateLimitRule]:
        for path in routes:
            if not path.startswith("/"):
                raise ValueError(f"route {path!r}: a path starting with '/', e.g. /v1/chat/completions")
        return routes


class Budget(Strict):
    """A spend limit in USD per calendar period (UTC): a key's or a team's."""

    usd: float = Field(gt=0)
    period: Literal["day", "week", "month"] = "month"


class ApiKeysConfig(Open):
    """svc-sr extension `global.services.api_keys`: how issued API keys are enforced
    (docs/security.md "Keys and budgets"; the keys themselves live in the management store).

    `step_down_at`: the fraction of a budget spent past which a request is routed only to
    models cheaper than the one its decision picked; `teams`: the budget of each team of keys
    (a key names its team); `cache_seconds`: how long a replica trusts a key it looked up
    (a revoked key answers 401 within this, on every replica)."""

    step_down_at: float = Field(default=0.8, gt=0, lt=1)
    teams: dict[str, Budget] = Field(default_factory=dict)
    cache_seconds: float = Field(default=0.5, ge=0, le=1)


class Services(Open):
    response_api: ResponseApiConfig = Field(default_factory=ResponseApiConfig)
    ratelimit: RateLimitConfig = Field(default_factory=RateLimitConfig)
    api_keys: ApiKeysConfig = Field(default_factory=ApiKeysConfig)
    management_api: ManagementApi = Field(default_factory=ManagementApi)
    observability: Observability = Field(default_factory=Observability)
    data_plane: DataPlaneLimits = Field(default_factory=DataPlaneLimits)
    ext_proc: ExtProcService = Field(default_factory=ExtProcService)
    envoy: EnvoyService = Field(default_factory=EnvoyService)


# Where `on_unscanned` (docs/security.md) may be set, under global.model_catalog.
ON_UNSCANNED_MODULES = (("modules", "prompt_guard"), ("modules", "classifier", "pii"))


class GlobalConfig(Open):
    router: RouterSettings = Field(default_factory=RouterSettings)
    services: Services = Field(default_factory=Services)
    stores: Stores = Field(default_factory=Stores)
    # Reference-layout model settings, kept as data; the keys svc-sr acts on are checked below:
    # `signal_timeout_ms` (deadline of model-runtime signals), `bundle_window_ms` (how long a
    # stage's questions to one deployment wait to go as one bundle), `on_unscanned` of the prompt
    # guard and the PII classifier, and the bindings (`deployment`, `contract`, `head`) of
    # modules.classifier.domain / .pii and modules.prompt_guard (docs/model-runtime.md
    # "Router-managed runtimes"; app/config/model_deployments.py BINDINGS).
    model_catalog: dict[str, Any] = Field(default_factory=dict)
    integrations: dict[str, Any] = Field(default_factory=dict)

    @field_validator("model_catalog")
    @classmethod
    def _runtime_keys(cls, catalog: dict[str, Any]) -> dict[str, Any]:
        timeout = catalog.get("signal_timeout_ms")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1):
            raise ValueError(f"signal_timeout_ms: a positive integer of milliseconds, got {timeout!r}")
        window = catalog.get("bundle_window_ms")
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int | float) or not 0 <= window <= 50
        ):
            raise ValueError(f"bundle_window_ms: milliseconds from 0 to 50, got {window!r}")
        for path in ON_UNSCANNED_MODULES:
            node: Any = catalog
            for key in path:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict) and node.get("on_unscanned", "block") not in ("block", "allow"):
                raise ValueError(
                    f"{'.'.join(path)}.on_unscanned: 'block' or 'allow', got {node['on_unscanned']!r}"
                )
        read_bindings(catalog)
        parse_external_models(catalog)
        return catalog
