"""`global.model_catalog.external[]` (docs/configuration.md): LLMs asked as a classifier
or a guard. `{name, model_role: classification|guardrail, llm_model_name, llm_endpoint
{address, port, protocol}, llm_timeout_seconds}`.

svc-sr's additions: `llm_endpoint` may be left out when `llm_model_name` names a
`providers.models` entry served in the cluster (`llm_config`): the judge then calls that
vLLM deployment by handle. `base_url` (instead of address/port, for a path such as /v1),
`api_key_env`, `max_tokens` and `system_prompt` tune the call.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from app.config.model_base import Strict


class LLMEndpoint(Strict):
    address: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    protocol: Literal["http", "https"] = "http"
    base_url: str | None = None

    @model_validator(mode="after")
    def _one_address(self) -> LLMEndpoint:
        if not self.base_url and not (self.address and self.port):
            raise ValueError("llm_endpoint needs address and port, or base_url")
        return self

    def url(self) -> str:
        return (self.base_url or f"{self.protocol}://{self.address}:{self.port}").rstrip("/")


class ExternalModel(Strict):
    name: str = Field(min_length=1)
    model_role: Literal["classification", "guardrail"]
    llm_model_name: str = Field(min_length=1)
    llm_endpoint: LLMEndpoint | None = None
    llm_timeout_seconds: int = Field(default=30, ge=1)
    api_key_env: str | None = None
    max_tokens: int = Field(default=32, ge=1, le=4096)
    system_prompt: str | None = None


def parse_external_models(catalog: dict[str, Any]) -> list[ExternalModel]:
    """The catalog's `external` list, validated (ValueError names the entry)."""
    entries = catalog.get("external") or []
    if not isinstance(entries, list):
        raise ValueError("external: a list of external models")
    models = []
    for index, entry in enumerate(entries):
        try:
            models.append(ExternalModel.model_validate(entry))
        except ValueError as exc:
            raise ValueError(f"external[{index}]: {exc}") from None
    names = [m.name for m in models]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"external: duplicate model name(s) {duplicates}")
    return models


def external_model(catalog: dict[str, Any], role: str) -> ExternalModel | None:
    """The first external model with `role` (config order), None when there is none."""
    return next((m for m in parse_external_models(catalog) if m.model_role == role), None)
