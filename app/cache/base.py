"""Backend-neutral contract of the semantic response cache.

A backend stores final `chat.completion` dicts keyed by a partition string
(`model|decision[|...]`, built by the router) and an embedding of the cache query.
Lookups never cross partitions. Memory, Redis and Milvus backends all implement
`ResponseCacheStore`, so the router and the `ResponseCache` deployment never care which
one runs (`app/cache/factory.py` builds the configured one). A network backend's outage
surfaces as `CacheUnavailable`, never as a client library's exception.

Scopes: a partition names its model and decision first (`model|decision|ctx:..|tenant:..`),
so a `CacheScope` {model} or {model, decision} covers every partition under it (the context,
tenant and polarity suffixes included); backends store the scope keys of each entry
(`scope_keys`) and clear, count and flush by them. Model and decision names hold no `|`.

Epochs: `flush(scope)` advances the scope's epoch (the global one without a scope) in the
store itself, where every replica reads it, then removes the scope's entries. `epoch(partition)`
is a partition's token: the sum of its global, model and decision epochs, so it grows with
any flush that covers the partition. A caller reads the token before it asks the upstream
and hands it to `store(..., epoch=token)`: a write whose partition was flushed since is
dropped, so an answer produced before a flush never re-populates the flushed scope.
"""

from __future__ import annotations

import hashlib
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


class VectorDimensionMismatch(CacheUnavailable, ValueError):
    """The store holds vectors of another width than the call's (an encoder of another
    dimension wrote them): it cannot take this vector. Callers degrade as for an outage (a
    miss, the write skipped, svc_router_cache_errors_total); a ValueError for callers that
    check the argument."""


class CacheHit(BaseModel):
    response: dict[str, Any]  # the stored chat.completion
    similarity: float
    partition: str
    created_at: float  # wall-clock seconds (time.time) when the entry was stored


class CacheScope(BaseModel):
    """What an invalidate or flush covers: every partition of `model`, or of `model` and
    `decision` ("" is the decision of requests the default model answered)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1, pattern=r"^[^|]*$")
    decision: str | None = Field(default=None, pattern=r"^[^|]*$")

    @property
    def name(self) -> str:
        """`model` or `model|decision`: the scope as the partitions spell it."""
        return self.model if self.decision is None else f"{self.model}|{self.decision}"

    @property
    def key(self) -> str:
        """Where the scope's epoch is kept: unambiguous next to GLOBAL_EPOCH and each other."""
        return f"model:{self.model}" if self.decision is None else f"decision:{self.model}|{self.decision}"

    @classmethod
    def from_key(cls, key: str) -> CacheScope:
        kind, _, name = key.partition(":")
        model, _, decision = name.partition("|")
        return cls(model=model, decision=decision if kind == "decision" else None)


GLOBAL_EPOCH = "global"


def scopes_of(partition: str) -> tuple[CacheScope, CacheScope]:
    """The (model, model+decision) scopes a partition `model|decision[|...]` lies in."""
    model, _, rest = partition.partition("|")
    decision = rest.split("|", 1)[0]
    # Unvalidated: a partition's names are the router's, and this runs on every store.
    return CacheScope.model_construct(model=model), CacheScope.model_construct(model=model, decision=decision)


def scope_tag(scope: CacheScope) -> str:
    """A fixed-width digest of a scope, for stores that filter on it (TAG, VARCHAR)."""
    return hashlib.blake2s(scope.key.encode(), digest_size=16).hexdigest()


class CacheEpochs(BaseModel):
    """Flush counters: the global one and every scope flushed at least once (by scope key)."""

    global_epoch: int = 0
    scopes: dict[str, int] = Field(default_factory=dict)

    def token(self, partition: str) -> int:
        """The partition's epoch token (see the module doc)."""
        model, decision = scopes_of(partition)
        return self.global_epoch + self.scopes.get(model.key, 0) + self.scopes.get(decision.key, 0)

    def by_name(self) -> dict[str, int]:
        """Scope epochs keyed by scope name (`model` or `model|decision`), for views."""
        return {CacheScope.from_key(key).name: epoch for key, epoch in sorted(self.scopes.items())}


class FlushOutcome(BaseModel):
    removed: int
    epoch: int  # the scope's epoch after the flush


class CacheStats(BaseModel):
    entries: int = 0
    hits: int = 0
    misses: int = 0
    hit_ratio: float = 0.0
    evictions: int = 0
    expirations: int = 0
    partitions: int = 0
    epochs: CacheEpochs = Field(default_factory=CacheEpochs)


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
class ResponseCacheStore(Protocol):
    def lookup(self, partition: str, vector: Vector, threshold: float) -> CacheHit | None:
        """Best entry of `partition` with cosine similarity >= threshold, else None."""
        ...

    def store(
        self,
        partition: str,
        vector: Vector,
        response: dict[str, Any],
        ttl_seconds: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        """Store a final chat.completion; ttl_seconds None = backend default, 0 = no expiry.

        epoch: the partition's token (`epoch()`) read before the answer was produced; when a
        flush covering the partition happened since, the write is dropped. Returns whether
        the entry was written."""
        ...

    def stats(self) -> CacheStats: ...

    def clear(self, partition: str | None = None, scope: CacheScope | None = None) -> int:
        """Drop one exact partition, or every partition of `scope`, or (neither) everything;
        returns the number of entries removed."""
        ...

    def count(self, scope: CacheScope | None = None) -> int:
        """How many entries `clear(scope=scope)` would remove now (a dry run)."""
        ...

    def flush(self, scope: CacheScope | None = None) -> FlushOutcome:
        """Advance the scope's epoch (the global one without a scope) in the store, then clear it."""
        ...

    def epoch(self, partition: str) -> int:
        """The partition's epoch token: pass it to store(..., epoch=)."""
        ...

    def epochs(self) -> CacheEpochs:
        """Every epoch: the global one and each flushed scope's."""
        ...

    def configure(self, settings: Any) -> None:
        """Apply max_entries / ttl_seconds / eviction_policy (see CacheTuning.from_settings)."""
        ...
