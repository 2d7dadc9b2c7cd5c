"""Where one candidate model is served: URL, path, auth and extra headers.

URL resolution (`UpstreamTarget.chat_url`):
- `base_url` without a path ("http://host:8000"): chat-style backends are reached at
  "/v1/chat/completions" relative to the host, as in the reference router.
- `base_url` with a path ("http://host:8000/v1", "https://api.example.com/openai/v1"):
  "/chat/completions" is appended to that path (the OpenAI SDK convention).
- `chat_path` set: it is appended to `base_url` as written (it may carry a query
  string, e.g. "/deployments/x/chat/completions?api-version=2024-06-01"); an absolute
  URL ("http://...") replaces base_url entirely.
- A base_url without a scheme ("host:8000") is taken as plain http.

Messages-style targets (`api_format` "anthropic" or "messages", any case) follow the
same rules with "/messages" ("/v1/messages" on a bare host) instead of
"/chat/completions"; `wire_for(target).url(target)` (app/upstream/wire.py) picks one.
"""

from __future__ import annotations

import os
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# "openai": chat completions, relayed as they are. The messages formats (the reference
# router spells it "anthropic") are translated from/to chat once, in app/upstream/wire.py.
CHAT_API_FORMATS = frozenset({"openai"})
MESSAGES_API_FORMATS = frozenset({"anthropic", "messages"})
SUPPORTED_API_FORMATS = CHAT_API_FORMATS | MESSAGES_API_FORMATS
DEFAULT_CHAT_PATH = "/chat/completions"
HOST_ONLY_CHAT_PATH = "/v1/chat/completions"
DEFAULT_MESSAGES_PATH = "/messages"
HOST_ONLY_MESSAGES_PATH = "/v1/messages"
ANTHROPIC_VERSION = "2023-06-01"

WireFormat = Literal["chat", "messages"]


class UpstreamTarget(BaseModel):
    """One candidate model on one backend (a replica when several share `model`).

    `weight` is informational for the client: the caller orders replicas (selection
    applies weights); retries go to the next untried replica of the same model.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1, description="The configured (router-side) model name.")
    provider_model_id: str | None = Field(None, description="Name sent upstream; default: `model`.")
    base_url: str = Field(min_length=1)
    chat_path: str | None = None
    extra_headers: dict[str, str] = Field(default_factory=dict)
    api_key_env: str | None = Field(None, description="Env var holding the key, read at call time.")
    api_format: str = "openai"
    weight: float = Field(1.0, ge=0.0)

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        url = value.strip()
        if "://" not in url:
            url = "http://" + url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"base_url {value!r}: scheme must be http or https")
        if not parts.hostname:
            raise ValueError(f"base_url {value!r}: missing host")
        return url.rstrip("/")

    @field_validator("api_format")
    @classmethod
    def _normalize_format(cls, value: str) -> str:
        return value.strip().lower() or "openai"

    @model_validator(mode="before")
    @classmethod
    def _default_provider_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("provider_model_id") and data.get("model"):
            data = {**data, "provider_model_id": data["model"]}
        return data

    @property
    def upstream_model(self) -> str:
        """The model name written into the forwarded body."""
        return self.provider_model_id or self.model

    @property
    def wire_format(self) -> WireFormat:
        """The protocol spoken upstream: "messages" for the messages formats, else "chat"."""
        return "messages" if self.api_format in MESSAGES_API_FORMATS else "chat"

    @property
    def chat_url(self) -> str:
        return self._url(DEFAULT_CHAT_PATH, HOST_ONLY_CHAT_PATH)

    @property
    def messages_url(self) -> str:
        return self._url(DEFAULT_MESSAGES_PATH, HOST_ONLY_MESSAGES_PATH)

    def _url(self, with_path: str, host_only: str) -> str:
        if self.chat_path:
            if "://" in self.chat_path:
                return self.chat_path
            return f"{self.base_url}/{self.chat_path.lstrip('/')}"
        has_path = urlsplit(self.base_url).path not in ("", "/")
        return self.base_url + (with_path if has_path else host_only)

    @property
    def label(self) -> str:
        """Loggable identity: model and host, never credentials or query strings."""
        parts = urlsplit(self.base_url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return f"{self.model}@{host}"

    def auth_headers(self) -> dict[str, str]:
        """Credentials for this target's protocol, only when `api_key_env` is set.

        chat: `Authorization: Bearer <key>` (when the variable is non-empty).
        messages: `anthropic-version` plus `x-api-key: <key>` (when non-empty);
        `extra_headers` may override either (e.g. a newer anthropic-version).
        """
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env, "").strip()
        if self.wire_format == "messages":
            return {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}
        return {"Authorization": f"Bearer {key}"} if key else {}
