"""The response-cache storage routes (docs/management-api.md) over an in-memory cache: permissions,
dry runs, scoped invalidation (a scope covers the tenant, context and polarity partitions
under it), flush epochs kept by the cache itself, probing a candidate configuration, 503
without a cache or with its store down. Every backend's scopes and epochs:
tests/stores/test_cache_scopes.py."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from app.cache.admin import LocalCacheAdmin, store_control
from app.cache.base import CacheScope
from app.cache.memory import InMemorySemanticCache
from app.cache.redis_store import RedisSemanticCache
from app.config.cache_stores import RedisCacheSettings
from tests.unit.management.test_management_support import Harness, base_document, error_code, with_auth

PREFIX = "/api/v1/storage/response-cache"
ADMIN, VIEWER = "admin-tok-1111", "viewer-tok-2222"
AUTH = {
    "mode": "bearer",
    "tokens": [
        {"name": "root", "token_env": "T_ADMIN", "role": "admin"},
        {"name": "dash", "token_env": "T_VIEW", "role": "viewer"},
    ],
}
ANSWER = {"object": "chat.completion", "choices": []}


def filled_cache() -> InMemorySemanticCache:
    cache = InMemorySemanticCache(max_entries=0, ttl_seconds=0)
    rng = np.random.default_rng(7)
    for partition in ("big|math", "big|math|tenant:5e1f", "big|code", "small|math"):
        cache.store(partition, rng.standard_normal(8), ANSWER)
    return cache


def harness(cache: InMemorySemanticCache | None = None, auth: bool = False) -> Harness:
    admin = LocalCacheAdmin(store_control(cache if cache is not None else filled_cache()))
    if auth:
        document = with_auth(base_document(), AUTH)
        return Harness(document, environ={"T_ADMIN": ADMIN, "T_VIEW": VIEWER}, cache_admin=admin)
    return Harness(cache_admin=admin)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens


@pytest.mark.slow
async def test_viewer_reads_stats_but_cannot_flush_or_invalidate():
    h = harness(auth=True)
    async with h.client(VIEWER) as viewer, h.client(ADMIN) as admin, h.client() as anonymous:
        stats = await viewer.get(f"{PREFIX}/stats")
        capabilities = await viewer.get(f"{PREFIX}/capabilities")
        health = await viewer.get(f"{PREFIX}/health")
        flush = await viewer.post(f"{PREFIX}/flush", json={})
        invalidate = await viewer.post(f"{PREFIX}/invalidate", json={"dry_run": True})
        unauthenticated = await anonymous.get(f"{PREFIX}/stats")
        flushed = await admin.post(f"{PREFIX}/flush", json={})
    assert stats.status_code == 200 and stats.json()["entries"] == 4
    assert stats.json()["backend"] == "memory" and stats.json()["partitions"] == 4
    assert capabilities.status_code == 200 and capabilities.json()["prefix_invalidation"] is True
    assert capabilities.json()["dry_run_counts_scopes"] is True and capabilities.json()["epochs"] == "process"
    assert health.json() == {"status": "ok", "backend": "memory", "reason": None}
    assert flush.status_code == 403 and error_code(flush) == "FORBIDDEN"
    assert invalidate.status_code == 403
    assert unauthenticated.status_code == 401
    assert flushed.status_code == 200 and flushed.json()["removed"] == 4


@pytest.mark.slow
async def test_dry_run_counts_without_removing():
    cache = filled_cache()
    h = harness(cache)
    async with h.client() as c:
        everything = await c.post(f"{PREFIX}/invalidate", json={"dry_run": True})
        scoped = await c.post(
            f"{PREFIX}/invalidate", json={"scope": {"model": "big", "decision": "math"}, "dry_run": True}
        )
        model = await c.post(f"{PREFIX}/invalidate", json={"scope": {"model": "big"}, "dry_run": True})
    assert everything.json() == {"scope": "global", "dry_run": True, "entries": 4}
    assert scoped.json() == {"scope": "big|math", "dry_run": True, "entries": 2}
    assert model.json() == {"scope": "big", "dry_run": True, "entries": 3}
    assert len(cache) == 4


@pytest.mark.slow
async def test_scoped_invalidate_covers_the_tenant_partition_and_leaves_other_scopes():
    cache = filled_cache()
    h = harness(cache)
    async with h.client() as c:
        removed = await c.post(f"{PREFIX}/invalidate", json={"scope": {"model": "big", "decision": "math"}})
        stats = (await c.get(f"{PREFIX}/stats")).json()
    assert removed.status_code == 200 and removed.json()["entries"] == 2  # big|math and its tenant's
    assert stats["entries"] == 2 and stats["partitions"] == 2
    assert stats["epoch"] == 0 and stats["scope_epochs"] == {}  # an invalidate moves no epoch
    assert cache.clear("big|code") == 1 and cache.clear("small|math") == 1


@pytest.mark.slow
async def test_flush_advances_the_epoch_of_its_scope():
    h = harness()
    async with h.client() as c:
        scoped = await c.post(f"{PREFIX}/flush", json={"scope": {"model": "small", "decision": "math"}})
        first = await c.post(f"{PREFIX}/flush", json={})
        second = await c.post(f"{PREFIX}/flush")
        stats = (await c.get(f"{PREFIX}/stats")).json()
    assert scoped.json() == {"scope": "small|math", "removed": 1, "epoch": 1}
    assert first.json() == {"scope": "global", "removed": 3, "epoch": 1}
    assert second.json() == {"scope": "global", "removed": 0, "epoch": 2}
    assert stats["epoch"] == 2 and stats["scope_epochs"] == {"small|math": 1} and stats["entries"] == 0


@pytest.mark.slow
async def test_epochs_are_the_caches_own_so_a_stale_write_is_dropped():
    cache = filled_cache()
    token = cache.epoch("big|math|tenant:5e1f")  # a request looked the cache up ...
    other_admin = harness(cache)  # ... another Ingress replica's admin flushes the same cache
    async with other_admin.client() as c:
        flushed = await c.post(f"{PREFIX}/flush", json={"scope": {"model": "big"}})
    assert flushed.json() == {"scope": "big", "removed": 3, "epoch": 1}
    assert cache.store("big|math|tenant:5e1f", np.ones(8), ANSWER, epoch=token) is False
    async with harness(cache).client() as c:  # a third replica reads the same epochs
        stats = (await c.get(f"{PREFIX}/stats")).json()
    assert stats["scope_epochs"] == {"big": 1} and stats["entries"] == 1
    assert cache.count(CacheScope(model="big")) == 0


@pytest.mark.slow
async def test_probe_validates_then_reports_an_unreachable_store():
    cache = filled_cache()
    h = harness(cache)
    async with h.client() as c:
        bad = await c.post(f"{PREFIX}/test", json={"backend_type": "cassandra"})
        scope = await c.post(f"{PREFIX}/invalidate", json={"scope": {"decision": "math"}})
        memory = await c.post(f"{PREFIX}/test", json={"backend_type": "memory"})
        redis_settings = {"url": f"redis://127.0.0.1:{closed_port()}/0", "timeout_seconds": 1}
        down = await c.post(f"{PREFIX}/test", json={"backend_type": "redis", "redis": redis_settings})
    assert bad.status_code == 400 and error_code(bad) == "INVALID_INPUT"
    assert "backend_type" in bad.json()["error"]["message"]
    assert scope.status_code == 400 and "model" in scope.json()["error"]["message"]
    assert memory.status_code == 200 and memory.json()["status"] == "ok"
    assert down.status_code == 200, down.text
    assert down.json()["status"] == "unreachable" and down.json()["reachable"] is False
    assert len(cache) == 4  # probes never touch the live cache


@pytest.mark.slow
async def test_without_a_cache_admin_every_route_is_404_feature_disabled():
    h = Harness()
    async with h.client() as c:
        answers = [
            await c.get(f"{PREFIX}/stats"),
            await c.get(f"{PREFIX}/health"),
            await c.post(f"{PREFIX}/flush", json={}),
            await c.post(f"{PREFIX}/test", json={"backend_type": "memory"}),
        ]
    for response in answers:
        assert response.status_code == 404 and error_code(response) == "FEATURE_DISABLED"
        assert "retry-after" not in response.headers  # off is not a passing outage


@pytest.mark.slow
async def test_a_store_that_is_down_answers_503_with_the_error_body():
    settings = RedisCacheSettings(url=f"redis://127.0.0.1:{closed_port()}/0", timeout_seconds=1)
    h = Harness(cache_admin=LocalCacheAdmin(store_control(RedisSemanticCache(settings))))
    async with h.client() as c:
        answers = [
            await c.get(f"{PREFIX}/stats"),
            await c.post(f"{PREFIX}/invalidate", json={"scope": {"model": "big"}, "dry_run": True}),
            await c.post(f"{PREFIX}/invalidate", json={"scope": {"model": "big", "decision": "math"}}),
            await c.post(f"{PREFIX}/flush", json={"scope": {"model": "big"}}),
        ]
        health = await c.get(f"{PREFIX}/health")
    for response in answers:
        assert response.status_code == 503 and error_code(response) == "SERVICE_UNAVAILABLE"
        assert response.headers["retry-after"] == "5"
        assert "response cache unavailable" in response.json()["error"]["message"]
    assert health.status_code == 200 and health.json()["status"] == "unavailable"


@pytest.mark.slow
async def test_a_scope_name_holds_no_partition_separator():
    async with harness().client() as c:
        bad = await c.post(f"{PREFIX}/flush", json={"scope": {"model": "big|math"}})
    assert bad.status_code == 400 and error_code(bad) == "INVALID_INPUT"
