"""The response-cache storage API's state (docs/management-api.md): capabilities, health, stats,
probing a candidate configuration, invalidating a scope and flushing with an epoch.

`ResponseCacheAdmin` is what the routes (app/api/routes/response_cache.py) call; `LocalCacheAdmin` is its
one implementation, over a `CacheControl` (the live cache's stats and clear): an app.cache
backend in this process (`store_control`), or the ResponseCache deployment's handle
(deployments/handles.py). No Ray and no HTTP here.

Scopes (app.cache.base.CacheScope): {"model"} covers every partition of that model,
{"model", "decision"} every partition of that model and decision, the context, tenant and
polarity partitions under it (`model|decision|ctx:..|tenant:..|neg:..`) included; no scope
means everything. Every backend counts a scope (a dry run) and clears it.

Epochs: a flush advances the scope's epoch (or the global one) inside the store: Redis and
Milvus keep it next to the entries, so every replica sees it and it survives a restart
(`epochs: "shared"`); the memory backend keeps it in the ResponseCache replica, which every
caller shares, until that replica restarts (`"process"`). A write whose epoch token predates
a flush of its partition is dropped by the store (app/cache/base.py), so a request that looked
up before the flush cannot re-populate the flushed scope.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from app.cache.base import CacheScope, CacheStats, CacheUnavailable, FlushOutcome, ResponseCacheStore
from app.cache.calls import AsyncCache
from app.cache.factory import backend_name, probe_store
from app.config.global_config import ResponseCacheConfig

GLOBAL_SCOPE = "global"
BACKEND_TYPES = ["memory", "redis", "milvus", "hybrid"]
# Backends whose epochs live in a shared store (the rest: in the ResponseCache replica).
SHARED_EPOCHS = {"redis", "milvus", "hybrid"}
# A probe never waits longer than this beyond the store's own timeout (building a Milvus
# Lite store can take a few seconds).
PROBE_MARGIN_S = 10.0


class InvalidateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: CacheScope | None = None  # None: every partition
    dry_run: bool = False  # count what the scope holds, remove nothing


class FlushRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: CacheScope | None = None  # None: the global cache


class CacheCapabilities(BaseModel):
    backend: str
    backend_types: list[str]
    scopes: list[str]  # "global", "model", "decision"
    prefix_invalidation: bool  # a scope covers the context/tenant/polarity partitions under it
    dry_run: bool
    dry_run_counts_scopes: bool  # whether a scoped dry run can count its entries
    epochs: Literal["shared", "process"]  # in the store, or in the ResponseCache replica


class CacheHealth(BaseModel):
    status: Literal["ok", "unavailable"]
    backend: str | None = None
    reason: str | None = None


class CacheStatsView(BaseModel):
    backend: str
    entries: int
    hits: int
    misses: int
    hit_ratio: float
    evictions: int
    expirations: int
    partitions: int
    epoch: int  # the global epoch
    scope_epochs: dict[str, int]  # by scope name (`model` or `model|decision`), flushed ones only


class ProbeResult(BaseModel):
    backend_type: str
    status: Literal["ok", "unreachable", "failed"]
    reachable: bool
    latency_ms: float | None = None
    reason: str | None = None


class InvalidateResult(BaseModel):
    scope: str  # "global" or the scope name
    dry_run: bool
    entries: int  # removed, or (dry run) what the scope holds


class FlushResult(BaseModel):
    scope: str
    removed: int
    epoch: int


class CacheControl(Protocol):
    """The live cache as the admin needs it."""

    async def stats(self) -> dict[str, Any]:
        """CacheStats fields plus "backend" (its backend_type)."""
        ...

    async def count(self, scope: CacheScope | None = None) -> int: ...

    async def clear(self, scope: CacheScope | None = None) -> int: ...

    async def flush(self, scope: CacheScope | None = None) -> FlushOutcome: ...

    async def probe(self, settings: ResponseCacheConfig) -> None:
        """app/cache/factory.py `probe_store` where the cache's stores are owned: raises what the
        candidate store raised."""
        ...


class ResponseCacheAdmin(Protocol):
    async def capabilities(self) -> dict[str, Any]: ...

    async def health(self) -> dict[str, Any]: ...

    async def stats(self) -> dict[str, Any]: ...

    async def test(self, settings: ResponseCacheConfig) -> dict[str, Any]: ...

    async def invalidate(self, scope: CacheScope | None, dry_run: bool) -> dict[str, Any]: ...

    async def flush(self, scope: CacheScope | None) -> dict[str, Any]: ...


class _StoreControl:
    def __init__(self, backend: ResponseCacheStore, state_dir: Path | None) -> None:
        self._cache = AsyncCache(backend)
        self._state_dir = state_dir

    async def stats(self) -> dict[str, Any]:
        stats = await self._cache.stats()
        return {**stats.model_dump(), "backend": backend_name(self._cache.backend)}

    async def count(self, scope: CacheScope | None = None) -> int:
        return await self._cache.count(scope)

    async def clear(self, scope: CacheScope | None = None) -> int:
        return await self._cache.clear(scope=scope)

    async def flush(self, scope: CacheScope | None = None) -> FlushOutcome:
        return await self._cache.flush(scope)

    async def probe(self, settings: ResponseCacheConfig) -> None:
        await asyncio.to_thread(probe_store, settings, self._state_dir)


def store_control(backend: ResponseCacheStore, state_dir: Path | None = None) -> CacheControl:
    """CacheControl over a backend in this process (network backends' calls in a thread);
    `state_dir`: where a probed Milvus Lite candidate lives."""
    return _StoreControl(backend, state_dir)


class LocalCacheAdmin:
    """ResponseCacheAdmin over `control`. Live-cache outages raise CacheUnavailable (the
    routes answer 503); `test` probes a throwaway backend where the control's cache lives,
    never its entries."""

    def __init__(self, control: CacheControl) -> None:
        self._control = control

    async def capabilities(self) -> dict[str, Any]:
        backend = str((await self._control.stats()).get("backend", "unknown"))
        return CacheCapabilities(
            backend=backend,
            backend_types=BACKEND_TYPES,
            scopes=[GLOBAL_SCOPE, "model", "decision"],
            prefix_invalidation=True,
            dry_run=True,
            dry_run_counts_scopes=True,
            epochs="shared" if backend in SHARED_EPOCHS else "process",
        ).model_dump()

    async def health(self) -> dict[str, Any]:
        try:
            stats = await self._control.stats()
        except CacheUnavailable as exc:
            return CacheHealth(status="unavailable", reason=str(exc)).model_dump()
        return CacheHealth(status="ok", backend=str(stats.get("backend", "unknown"))).model_dump()

    async def stats(self) -> dict[str, Any]:
        raw = await self._control.stats()
        stats = CacheStats.model_validate(raw)
        view = {**stats.model_dump(exclude={"epochs"}), "backend": raw.get("backend", "unknown")}
        epochs = {"epoch": stats.epochs.global_epoch, "scope_epochs": stats.epochs.by_name()}
        return CacheStatsView.model_validate({**view, **epochs}).model_dump()

    async def test(self, settings: ResponseCacheConfig) -> dict[str, Any]:
        timeout = max(settings.redis.timeout_seconds, settings.milvus.timeout_seconds) + PROBE_MARGIN_S
        started = time.perf_counter()
        try:
            await asyncio.wait_for(self._control.probe(settings), timeout)
        except (CacheUnavailable, TimeoutError, OSError) as exc:
            return self._probe_result(settings, "unreachable", reason=str(exc) or type(exc).__name__)
        except Exception as exc:  # a store that answered but refused the probe (bad index, auth...)
            return self._probe_result(settings, "failed", reason=f"{type(exc).__name__}: {exc}")
        latency_ms = (time.perf_counter() - started) * 1000
        return self._probe_result(settings, "ok", latency_ms=latency_ms)

    @staticmethod
    def _probe_result(
        settings: ResponseCacheConfig,
        status: Literal["ok", "unreachable", "failed"],
        reason: str | None = None,
        latency_ms: float | None = None,
    ) -> dict[str, Any]:
        return ProbeResult(
            backend_type=settings.backend_type,
            status=status,
            reachable=status != "unreachable",
            latency_ms=latency_ms,
            reason=reason,
        ).model_dump()

    async def invalidate(self, scope: CacheScope | None, dry_run: bool) -> dict[str, Any]:
        """Remove (or, dry run, count) the scope's entries; no epoch moves (see flush)."""
        entries = await (self._control.count(scope) if dry_run else self._control.clear(scope))
        return InvalidateResult(scope=scope_name(scope), dry_run=dry_run, entries=entries).model_dump()

    async def flush(self, scope: CacheScope | None) -> dict[str, Any]:
        outcome = await self._control.flush(scope)
        return FlushResult(scope=scope_name(scope), removed=outcome.removed, epoch=outcome.epoch).model_dump()


def scope_name(scope: CacheScope | None) -> str:
    """How results and the audit log name a scope: "global", `model` or `model|decision`."""
    return GLOBAL_SCOPE if scope is None else scope.name
