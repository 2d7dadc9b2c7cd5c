"""Backend-neutral contract of the semantic response cache.

A backend stores final `chat.completion` dicts keyed by a partition string
(`model|decision[|...]`, built by the router) and an embedding of the cache query.
Lookups never cross partitions. Memory, Redis and Milvus backends all implement
`ResponseCacheBackend`, so the router and the `ResponseCache` deployment never care which
one runs (`app/cache/factory.py` builds the configured one). A network backend's outage
surfaces as `CacheUnavailable`, never as a client library's exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

EvictionPolicy = Literal["fifo", "lru", "lfu"]
# A query vector: an encoder row, or the list a DeploymentHandle call carries it as.
Vector = np.ndarray | Sequence[float]


class CacheUnavailable(RuntimeError):
    """A shared store (Redis, Milvus) is down, slow past its timeout, or answered an error.

    Network backends raise it instead of the client library's exceptions, always within
    their configured timeout; callers count the lookup as a miss (and skip the write), so a
    cache outage never fails a request.
    """


class CacheHit(BaseModel):
    response: dict[str, Any]  # the stored chat.completion
    similarity: float
    partition: str
    created_at: float  # wall-clock seconds (time.time) when the entry was stored


class CacheStats(BaseModel):
    entries: int = 0
    hits: int = 0
    misses: int = 0
    hit_ratio: float = 0.0
    evictions: int = 0
    expirations: int = 0
    partitions: int = 0


class CacheTuning(BaseModel):
    """The capacity knobs every backend honours; other response_cache keys are ignored here."""

    model_config = ConfigDict(extra="ignore")

    max_entries: int = Field(default=1000, ge=0)  # 0 = unbounded
    ttl_seconds: int = Field(default=3600, ge=0)  # 0 = no expiry
    eviction_policy: EvictionPolicy = "fifo"

    @classmethod
    def from_settings(cls, settings: Any, current: CacheTuning | None = None) -> CacheTuning:
        """Accept a mapping, a pydantic settings object (e.g. ResponseCacheConfig) or a CacheTuning.

        A mapping may be partial: keys it lacks keep their `current` values. A settings
        object is taken whole (its own defaults apply). Raises pydantic.ValidationError
        (a ValueError) on bad values, TypeError on other types.
        """
        if isinstance(settings, CacheTuning):
            return settings
        if isinstance(settings, BaseModel):
            return cls.model_validate(settings.model_dump())
        if isinstance(settings, Mapping):
            base = current.model_dump() if current is not None else {}
            return cls.model_validate({**base, **settings})
        raise TypeError(
            f"cache settings must be a mapping or a pydantic model, got {type(settings).__name__}"
        )


@runtime_checkable
class ResponseCacheBackend(Protocol):
    def lookup(self, partition: str, vector: Vector, threshold: float) -> CacheHit | None:
        """Best entry of `partition` with cosine similarity >= threshold, else None."""
        ...

    def store(
        self, partition: str, vector: Vector, response: dict[str, Any], ttl_seconds: int | None = None
    ) -> None:
        """Store a final chat.completion; ttl_seconds None = backend default, 0 = no expiry."""
        ...

    def stats(self) -> CacheStats: ...

    def clear(self, partition: str | None = None) -> int:
        """Drop one partition (or everything); returns the number of entries removed."""
        ...

    def configure(self, settings: Any) -> None:
        """Apply max_entries / ttl_seconds / eviction_policy (see CacheTuning.from_settings)."""
        ...
