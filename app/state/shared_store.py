"""Where the management state lives: `file` (one node's state directory, the default) or
`redis` (shared by every Ingress replica on every node).

The location is a deployment argument (GraphArgs.management_store, or the
SVC_SR_MANAGEMENT_STORE_URL environment variable), never part of the configuration
document: the store holds that document, so a PATCH must not be able to move it.

`StoreUnavailable` is what every shared-store operation raises when the store is down or
slower than `timeout_seconds`: management writes answer 503 with nothing written, reads
keep serving the last state this replica saw.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    import redis

STORE_URL_ENV = "SVC_SR_MANAGEMENT_STORE_URL"


class StoreUnavailable(RuntimeError):
    """The shared management store did not answer (down, unreachable or too slow)."""


class ManagementStoreSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["file", "redis"] = "file"
    # redis://[user:pass@]host:port/db (rediss:// for TLS); required for backend redis.
    url: str | None = None
    # Every key of one application starts with this; default "svc_sr:mgmt:<app name>:".
    key_prefix: str | None = Field(default=None, min_length=1)
    # A store slower than this counts as down (writes 503, reads serve the last state seen).
    timeout_seconds: float = Field(default=2.0, gt=0, le=60)

    @model_validator(mode="after")
    def _redis_needs_url(self) -> ManagementStoreSettings:
        if self.backend == "redis" and not self.url:
            raise ValueError("management_store.url is required for backend redis")
        return self

    def prefix_for(self, app_name: str) -> str:
        return self.key_prefix or f"svc_sr:mgmt:{app_name}:"


def store_settings(
    configured: ManagementStoreSettings | Mapping[str, object] | None,
    environ: Mapping[str, str] | None = None,
) -> ManagementStoreSettings:
    """GraphArgs.management_store, else SVC_SR_MANAGEMENT_STORE_URL (redis), else the file store."""
    if isinstance(configured, ManagementStoreSettings):
        return configured
    if configured:
        return ManagementStoreSettings.model_validate(configured)
    url = (os.environ if environ is None else environ).get(STORE_URL_ENV)
    if url:
        return ManagementStoreSettings(backend="redis", url=url)
    return ManagementStoreSettings()


def redis_client(settings: ManagementStoreSettings) -> redis.Redis:
    """One client that fails within the timeout and never retries (the caller degrades)."""
    from app.cache.redis_store import redis_client as cache_redis_client
    from app.config.cache_stores import RedisCacheSettings

    return cache_redis_client(RedisCacheSettings(url=settings.url, timeout_seconds=settings.timeout_seconds))


@contextlib.contextmanager
def store_errors(what: str) -> Iterator[None]:
    """Any Redis error or timeout inside becomes `StoreUnavailable` (the callers degrade)."""
    import redis

    try:
        yield
    except (redis.RedisError, OSError) as exc:
        raise StoreUnavailable(f"management store: {what} failed: {exc}") from exc
