"""The response-cache storage routes (spec 1 "Storage") over an in-memory cache: permissions,
dry runs, scoped invalidation, flush epochs, probing a candidate configuration, 503 without
a cache."""

from __future__ import annotations

import socket

import numpy as np

from app.cache.memory import InMemorySemanticCache
from app.management.cache_admin import LocalCacheAdmin, backend_control
from tests.unit.test_management_support import Harness, base_document, error_code, with_auth

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
    for partition in ("big|math", "big|math", "big|code", "small|math"):
        cache.store(partition, rng.standard_normal(8), ANSWER)
    return cache


def harness(cache: InMemorySemanticCache | None = None, auth: bool = False) -> Harness:
    admin = LocalCacheAdmin(backend_control(cache if cache is not None else filled_cache()))
    if auth:
        document = with_auth(base_document(), AUTH)
        return Harness(document, environ={"T_ADMIN": ADMIN, "T_VIEW": VIEWER}, cache_admin=admin)
    return Harness(cache_admin=admin)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens


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
    assert stats.json()["backend"] == "memory" and stats.json()["partitions"] == 3
    assert capabilities.status_code == 200 and capabilities.json()["prefix_invalidation"] is False
    assert health.json() == {"status": "ok", "backend": "memory", "reason": None}
    assert flush.status_code == 403 and error_code(flush) == "FORBIDDEN"
    assert invalidate.status_code == 403
    assert unauthenticated.status_code == 401
    assert flushed.status_code == 200 and flushed.json()["removed"] == 4


async def test_dry_run_counts_without_removing():
    cache = filled_cache()
    h = harness(cache)
    async with h.client() as c:
        everything = await c.post(f"{PREFIX}/invalidate", json={"dry_run": True})
        scoped = await c.post(
            f"{PREFIX}/invalidate", json={"scope": {"model": "big", "decision": "math"}, "dry_run": True}
        )
    assert everything.json() == {"scope": "global", "dry_run": True, "entries": 4}
    assert scoped.json() == {"scope": "big|math", "dry_run": True, "entries": None}
    assert len(cache) == 4


async def test_scoped_invalidate_leaves_other_scopes():
    cache = filled_cache()
    h = harness(cache)
    async with h.client() as c:
        removed = await c.post(f"{PREFIX}/invalidate", json={"scope": {"model": "big", "decision": "math"}})
        stats = (await c.get(f"{PREFIX}/stats")).json()
    assert removed.status_code == 200 and removed.json()["entries"] == 2
    assert stats["entries"] == 2 and stats["partitions"] == 2
    assert cache.clear("big|code") == 1 and cache.clear("small|math") == 1


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
    assert stats["epochs"] == {"small|math": 1, "global": 2} and stats["entries"] == 0


async def test_probe_validates_then_reports_an_unreachable_store():
    cache = filled_cache()
    h = harness(cache)
    async with h.client() as c:
        bad = await c.post(f"{PREFIX}/test", json={"backend_type": "cassandra"})
        scope = await c.post(f"{PREFIX}/invalidate", json={"scope": {"model": "big"}})
        memory = await c.post(f"{PREFIX}/test", json={"backend_type": "memory"})
        redis_settings = {"url": f"redis://127.0.0.1:{closed_port()}/0", "timeout_seconds": 1}
        down = await c.post(f"{PREFIX}/test", json={"backend_type": "redis", "redis": redis_settings})
    assert bad.status_code == 400 and error_code(bad) == "INVALID_INPUT"
    assert "backend_type" in bad.json()["error"]["message"]
    assert scope.status_code == 400 and "decision" in scope.json()["error"]["message"]
    assert memory.status_code == 200 and memory.json()["status"] == "ok"
    assert down.status_code == 200, down.text
    assert down.json()["status"] == "unreachable" and down.json()["reachable"] is False
    assert len(cache) == 4  # probes never touch the live cache


async def test_without_a_cache_admin_every_route_is_503():
    h = Harness()
    async with h.client() as c:
        answers = [
            await c.get(f"{PREFIX}/stats"),
            await c.get(f"{PREFIX}/health"),
            await c.post(f"{PREFIX}/flush", json={}),
            await c.post(f"{PREFIX}/test", json={"backend_type": "memory"}),
        ]
    for response in answers:
        assert response.status_code == 503 and error_code(response) == "SERVICE_UNAVAILABLE"
        assert response.headers["retry-after"] == "5"
