"""Context recovery (app/pipeline/memory/recovery.py, POST /api/v1/storage/context-recovery/invalidate):
an invalidation mark in the memory store (in-process and Redis, the session's real server)
stops recall of the scope's older memories (newer ones recalled), advances the scope's
response-cache partition so its older cached answers are never served, leaves other scopes
alone and deletes nothing; a dry run writes nothing; 400 on a bad body, 503 without a store
or with one that is down, cache.invalidate to call it, audited."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from app.cache import InMemorySemanticCache
from app.config.loader import parse_config
from app.pipeline import PipelineServices, RouterPipeline, cache_calls
from app.pipeline.memory import recovery
from app.pipeline.memory.plugin import PREAMBLE, recall, remember
from app.pipeline.memory.redis_store import RedisMemoryStore
from app.pipeline.memory.store import (
    InMemoryMemoryStore,
    Memory,
    MemoryScope,
    MemorySource,
    MemoryStore,
    new_memory_id,
)
from app.pipeline.phases.cache import cache_partition
from app.pipeline.plan import CompletionReport, RoutePlan
from app.state.shared_store import ManagementStoreSettings, redis_client
from tests.fakes.embedding import hashed_embed
from tests.unit.cli import test_cli_config as cli_support
from tests.unit.management.test_management_support import Harness, base_document, error_code, with_auth
from tests.unit.pipeline.test_memory_plugin import ANSWER
from tests.unit.pipeline.test_memory_plugin import document as memory_document

PATH = "/api/v1/storage/context-recovery/invalidate"
ADA = MemoryScope(kind="user", id="ada")
BOB = MemoryScope(kind="user", id="bob")
ADA_SESSION = MemoryScope(kind="session", id="ada")
BEFORE, MARK, AFTER = "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", "2026-01-01T00:00:02.000Z"
OPERATOR, READER, ADMIN = "operator-tok-1111", "reader-tok-2222", "admin-tok-3333"
AUTH = {
    "mode": "bearer",
    "tokens": [
        {"name": "oncall", "token_env": "T_OP", "role": "operator"},
        {"name": "reader", "token_env": "T_READ", "permissions": ["data.read", "cache.read"]},
        {"name": "root", "token_env": "T_ADMIN", "role": "admin"},
    ],
}


async def embed(texts: list[str]) -> np.ndarray:
    return hashed_embed(texts)


def memory(scope: MemoryScope, text: str, created_at: str) -> Memory:
    vector = [float(x) for x in hashed_embed([text])[0]]
    return Memory(
        id=new_memory_id(), scope=scope, text=text, category="about", created_at=created_at, vector=vector
    )


def redis_store(url: str) -> RedisMemoryStore:
    return RedisMemoryStore(
        redis_client(ManagementStoreSettings(backend="redis", url=url)), f"svc_sr:test:{uuid.uuid4().hex}:"
    )


def down_store() -> RedisMemoryStore:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = ManagementStoreSettings(
        backend="redis", url=f"redis://127.0.0.1:{port}/0", timeout_seconds=0.5
    )
    return RedisMemoryStore(redis_client(settings), "svc_sr:test:down:")


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[MemoryStore]:
    if request.param == "memory":
        yield InMemoryMemoryStore()
        return
    yield redis_store(request.getfixturevalue("redis_url"))


async def recalled(store: MemoryStore, scope: MemoryScope, query: str = "the user") -> list[str]:
    async def vector() -> np.ndarray:
        return hashed_embed([query])[0]

    return sorted(m.text for m in await recall(store, scope, vector, 10, -1.0))


# ------------------------------------------------------------------ the mark and recall


async def test_the_mark_counts_up_per_scope_and_never_goes_back(store: MemoryStore) -> None:
    assert (await store.mark(ADA)).generation == 0 and (await store.mark(ADA)).invalidated_at is None
    first = await store.invalidate(ADA, MARK, "compromised")
    assert (first.generation, first.invalidated_at, first.reason) == (1, MARK, "compromised")
    second = await store.invalidate(ADA, BEFORE, None)  # another replica's clock, behind
    assert second.generation == 2 and second.invalidated_at == MARK
    read = await store.mark(ADA)
    assert (read.generation, read.invalidated_at, read.reason) == (2, MARK, None)
    for other in (BOB, ADA_SESSION):  # same id, other kind; other id
        assert (await store.mark(other)).generation == 0
    await store.add(memory(ADA, "The user's name is Ada.", AFTER), 10)
    await store.delete_scope(ADA)
    assert (await store.mark(ADA)).generation == 2  # a mark outlives the memories


async def test_recall_uses_only_memories_written_after_the_mark(store: MemoryStore) -> None:
    old = memory(ADA, "The user's name is Ada.", BEFORE)
    bobs = memory(BOB, "The user's name is Bob.", BEFORE)
    for item in (old, bobs):
        await store.add(item, 10)
    assert await recalled(store, ADA) == ["The user's name is Ada."]
    await store.invalidate(ADA, MARK, None)
    assert await recalled(store, ADA) == []
    await store.add(memory(ADA, "The user prefers tea.", AFTER), 10)
    assert await recalled(store, ADA) == ["The user prefers tea."]
    assert await recalled(store, BOB) == ["The user's name is Bob."]  # user:b untouched
    assert [m.id for m in await store.list_scope(ADA)][0] == old.id  # kept, listable
    assert await store.get(old.id) is not None


async def test_remember_relearns_an_excluded_fact_and_drops_a_stale_write(store: MemoryStore) -> None:
    await store.add(memory(ADA, "The user's name is Ada.", BEFORE), 10)
    source = MemorySource(request_id="r1")
    common: dict[str, Any] = {"max_memories": 10, "dedupe_threshold": 0.9, "source": source}
    await store.invalidate(ADA, MARK, None)
    # routed before the invalidation (generation 0): the poisoned turn is not kept
    assert await remember(store, embed, ADA, "my name is Mallory", generation=0, **common) == (0, 0)
    # the excluded fact is no duplicate any more: learned again, recalled
    assert await remember(store, embed, ADA, "my name is Ada", generation=1, **common) == (1, 0)
    assert await recalled(store, ADA) == ["The user's name is Ada."]
    assert len(await store.list_scope(ADA)) == 2


# ------------------------------------------------------------------ the response cache


def pipeline(store: MemoryStore, cache: InMemorySemanticCache) -> RouterPipeline:
    doc = memory_document(recall_threshold=0.0)
    doc["global"] = {"stores": {"response_cache": {"enabled": True, "similarity_threshold": 0.9}}}
    calls = cache_calls(cache)
    services = PipelineServices(
        embed=embed,
        memories=store,
        cache_lookup=calls.lookup,
        cache_store=calls.store,
        cache_epoch=calls.epoch,
    )
    return RouterPipeline(parse_config(doc).config, services)


async def ask(p: RouterPipeline, user: str, text: str = "what should I cook tonight?") -> RoutePlan:
    body = {"model": "MoM", "messages": [{"role": "user", "content": text}]}
    plan = await p.route(body, {"x-user-id": user})
    if plan.immediate is None:
        await p.complete(plan, CompletionReport(status=200, response=ANSWER))
        await p.services.memory_tasks.drain()
    return plan


async def test_the_scopes_cached_answers_are_never_served_after_it(store: MemoryStore) -> None:
    p = pipeline(store, InMemorySemanticCache())
    for user in ("ada", "bob"):
        first = await ask(p, user)
        assert first.response_headers["x-cache-status"] == "miss"
        assert (await ask(p, user)).response_headers["x-cache-status"] == "hit"
    result = await recovery.invalidate(store, ADA, dry_run=False, reason=None)
    after = await ask(p, "ada")
    assert after.immediate is None and after.response_headers["x-cache-status"] == "miss"
    assert after.cache_write is not None and after.cache_write.partition.endswith(
        result.cache_partition.suffix
    )
    assert (
        first.cache_write is not None
        and result.cache_partition.previous_suffix not in after.cache_write.partition
    )
    assert (await ask(p, "ada")).response_headers["x-cache-status"] == "hit"  # the new generation caches
    assert (await ask(p, "bob")).response_headers["x-cache-status"] == "hit"  # user:b untouched


async def test_recall_in_the_pipeline_skips_memories_from_before(store: MemoryStore) -> None:
    p = pipeline(store, InMemorySemanticCache())
    await ask(p, "ada", "my name is Ada")
    assert await recalled(store, ADA) == ["The user's name is Ada."]
    await recovery.invalidate(store, ADA, dry_run=False, reason="gdpr")
    plan = await ask(p, "ada", "what is my name?")
    assert plan.response_headers["x-vsr-memories-recalled"] == "0"
    assert not any(PREAMBLE in str(m.get("content")) for m in plan.body["messages"])
    assert plan.recovery_mark is not None and plan.recovery_mark.generation == 1


async def test_an_unreadable_mark_bypasses_the_cache() -> None:
    """Fail closed: the scope may have been invalidated, so no cached answer is served."""
    cache = InMemorySemanticCache()
    p = pipeline(down_store(), cache)
    plan = await p.route(
        {"model": "MoM", "messages": [{"role": "user", "content": "hi"}]}, {"x-user-id": "ada"}
    )
    assert plan.response_headers["x-cache-status"] == "bypass" and plan.cache_write is None
    assert plan.response_headers["x-vsr-memory-status"] == "unavailable"


def test_generation_zero_keeps_the_partition_and_a_generation_changes_it() -> None:
    body = {"messages": [{"role": "user", "content": "q"}]}
    plain = cache_partition("m", "d", body, {}, "user:ada")
    assert plain == cache_partition("m", "d", body, {}, "user:ada", 0)
    assert plain.endswith(recovery.memory_partition_suffix("user:ada"))
    one, two = (cache_partition("m", "d", body, {}, "user:ada", g) for g in (1, 2))
    assert len({plain, one, two}) == 3
    assert cache_partition("m", "d", body, {}, "user:bob", 1) != one


# ------------------------------------------------------------------ the route


def harness(store: MemoryStore | None, auth: bool = False) -> Harness:
    if auth:
        environ = {"T_OP": OPERATOR, "T_READ": READER, "T_ADMIN": ADMIN}
        return Harness(with_auth(base_document(), AUTH), environ=environ, memory_store=store)
    return Harness(memory_store=store)


@pytest.mark.slow
async def test_invalidate_dry_run_then_for_real(store: MemoryStore) -> None:
    for item in (
        memory(ADA, "The user's name is Ada.", BEFORE),
        memory(ADA, "x", BEFORE),
        memory(BOB, "y", BEFORE),
    ):
        await store.add(item, 10)
    async with harness(store).client() as api:
        dry = await api.post(PATH, json={"scope": "user:ada", "dry_run": True})
        assert dry.status_code == 200, dry.text
        body = dry.json()
        assert body["object"] == "context_recovery.invalidation" and body["dry_run"] is True
        assert (body["scope"], body["generation"], body["memories_excluded"]) == ("user:ada", 1, 2)
        assert (await store.mark(ADA)).generation == 0  # nothing written
        assert len(await recalled(store, ADA)) == 2

        done = await api.post(PATH, json={"scope": "user:ada", "reason": "account compromised"})
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["dry_run"] is False and body["generation"] == 1 and body["memories_excluded"] == 2
        assert body["reason"] == "account compromised" and "never recalled" in body["note"]
        partition = body["cache_partition"]
        assert (partition["previous_generation"], partition["generation"]) == (0, 1)
        assert partition["previous_suffix"] == recovery.memory_partition_suffix("user:ada", 0)
        assert partition["suffix"] == recovery.memory_partition_suffix("user:ada", 1)
        mark = await store.mark(ADA)
        assert mark.generation == 1 and mark.invalidated_at == body["invalidated_at"]
        assert await recalled(store, ADA) == [] and await recalled(store, BOB) == ["y"]
        listing = await api.get("/api/v1/storage/memories", params={"scope": "user:ada"})
        assert listing.json()["total"] == 2  # kept and listable

        again = await api.post(PATH, json={"scope": "user:ada"})
        assert again.json()["generation"] == 2
        assert (await store.mark(BOB)).generation == 0

        audit = await api.get("/api/v1/observability/audit", params={"action": "context_recovery.invalidate"})
        entries = audit.json()["entries"]
        assert len(entries) == 2  # the dry run is not audited
        assert not re.search(
            r"\bada\b", json.dumps(entries)
        )  # the scope's kind, never its id (hex ids may hold "ada")
        assert entries[0]["detail"]["scope"] == "user"


BAD_BODIES: list[Any] = [
    {},
    {"scope": "user:ada", "force": True},  # extra fields are refused
    {"scope": "tenant:x"},
    {"scope": "user:"},
    {"scope": "user: ada"},
    {"scope": "user:" + "x" * 300},
    {"scope": "user:ada", "dry_run": "maybe"},
    {"scope": "user:ada", "reason": "x" * 501},
    ["user:ada"],
]


async def test_a_bad_body_is_400() -> None:
    store = InMemoryMemoryStore()
    async with harness(store).client() as api:
        for body in BAD_BODIES:
            answer = await api.post(PATH, json=body)
            assert answer.status_code == 400 and error_code(answer) == "INVALID_INPUT", (body, answer.text)
            assert set(answer.json()["error"]) >= {"code", "message", "timestamp"}
        for raw in (b"", b"{not json"):
            answer = await api.post(PATH, content=raw, headers={"content-type": "application/json"})
            assert answer.status_code == 400 and error_code(answer) == "INVALID_INPUT"
    assert (await store.mark(ADA)).generation == 0


@pytest.mark.slow
async def test_no_store_is_404_feature_disabled_and_a_store_that_is_down_is_503() -> None:
    async with harness(None).client() as api:
        answer = await api.post(PATH, json={"scope": "user:ada"})
        assert answer.status_code == 404 and error_code(answer) == "FEATURE_DISABLED", answer.text
    async with harness(down_store()).client() as api:
        for dry_run in (True, False):
            answer = await api.post(PATH, json={"scope": "user:ada", "dry_run": dry_run})
            assert answer.status_code == 503 and answer.headers["retry-after"] == "5", answer.text
            assert error_code(answer) == "SERVICE_UNAVAILABLE"


async def test_permissions() -> None:
    store = InMemoryMemoryStore()
    h = harness(store, auth=True)
    async with h.client(OPERATOR) as operator, h.client(READER) as reader, h.client() as anonymous:
        assert (await anonymous.post(PATH, json={"scope": "user:ada"})).status_code == 401
        denied = await reader.post(PATH, json={"scope": "user:ada"})
        assert denied.status_code == 403 and error_code(denied) == "FORBIDDEN"
        assert (await store.mark(ADA)).generation == 0
        allowed = await operator.post(PATH, json={"scope": "user:ada"})  # cache.invalidate: operators
        assert allowed.status_code == 200 and allowed.json()["generation"] == 1
        # deleting memories stays data.write (admin): the operator can invalidate, not delete
        assert (
            await operator.delete("/api/v1/storage/memories", params={"scope": "user:ada"})
        ).status_code == 403


@pytest.mark.slow
def test_the_cli_invalidates() -> None:
    store = InMemoryMemoryStore()
    with cli_support.Server(cli_support.Harness(memory_store=store)) as server:
        ep = ("--endpoint", server.url)
        dry = cli_support.run(
            "storage", "context-recovery", "invalidate", "--scope", "session:s1", "--dry-run", *ep
        )
        assert dry.exit_code == 0, dry.output
        assert json.loads(dry.output)["dry_run"] is True
        done = cli_support.run(
            "storage", "context-recovery", "invalidate", "--scope", "session:s1", "--reason", "poisoned", *ep
        )
        assert done.exit_code == 0, done.output
        assert json.loads(done.output)["reason"] == "poisoned"
        bad = cli_support.run("storage", "context-recovery", "invalidate", "--scope", "team:x", *ep)
        assert bad.exit_code == 2, bad.output
    assert asyncio.run(store.mark(MemoryScope(kind="session", id="s1"))).generation == 1
