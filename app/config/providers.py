"""The `providers:` section: the models svc-sr routes to and the endpoints serving them."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from app.config.llm_serving import LLMServingConfig
from app.config.model_base import Strict
from app.config.pricing import Pricing
from app.config.reliability import ReliabilityConfig


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
    # Served by vLLM inside the Serve application (app/config/llm_serving.py); backend_refs,
    # when present, are its HTTP fallback.
    llm_config: LLMServingConfig | None = None
    # Trusted with personal data: where a `pii` plugin with `action: route` sends a request.
    private: bool = False

    @model_validator(mode="after")
    def _in_cluster_speaks_chat(self) -> ProviderModel:
        if self.llm_config is not None and self.api_format != "openai":
            raise ValueError("a model with llm_config is served by vLLM: api_format must be openai")
        return self

    @field_validator("api_format", mode="before")
    @classmethod
    def _format_any_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class Providers(Strict):
    defaults: ProviderDefaults = Field(default_factory=ProviderDefaults)
    models: list[ProviderModel] = Field(default_factory=list)
