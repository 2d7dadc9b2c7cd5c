"""The memory stores (app/pipeline/memory/): in-process and Redis (the session's real server),
the same behaviour: a scope answers only its own memories, the cap drops the oldest, delete by
id and by scope, touch marks use; a Redis that does not answer raises MemoryStoreUnavailable."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest

from app.pipeline.memory.redis_store import RedisMemoryStore
from app.pipeline.memory.store import (
    InMemoryMemoryStore,
    Memory,
    MemoryScope,
    MemoryStore,
    MemoryStoreUnavailable,
    new_memory_id,
    now_stamp,
)
from app.state.shared_store import ManagementStoreSettings, redis_client

ADA = MemoryScope(kind="user", id="ada")
BOB = MemoryScope(kind="user", id="bob")
ADA_SESSION = MemoryScope(kind="session", id="ada")  # same id, another kind: another scope


def memory(scope: MemoryScope, text: str) -> Memory:
    return Memory(
        id=new_memory_id(),
        scope=scope,
        text=text,
        category="about",
        created_at=now_stamp(),
        vector=[1.0, 0.0],
    )


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[MemoryStore]:
    if request.param == "memory":
        yield InMemoryMemoryStore()
        return
    url = request.getfixturevalue("redis_url")
    client = redis_client(ManagementStoreSettings(backend="redis", url=url))
    yield RedisMemoryStore(client, f"svc_sr:test:{uuid.uuid4().hex}:")
    client.close()


async def test_scopes_keep_apart(store: MemoryStore) -> None:
    a, b, s = (
        memory(ADA, "The user's name is Ada."),
        memory(BOB, "The user's name is Bob."),
        memory(ADA_SESSION, "x"),
    )
    for item in (a, b, s):
        await store.add(item, 10)
    assert [m.text for m in await store.list_scope(ADA)] == ["The user's name is Ada."]
    assert [m.text for m in await store.list_scope(BOB)] == ["The user's name is Bob."]
    assert [m.id for m in await store.list_scope(ADA_SESSION)] == [s.id]
    assert await store.delete_scope(ADA) == 1
    assert await store.list_scope(ADA) == []
    assert [m.id for m in await store.list_scope(BOB)] == [b.id]  # another scope's delete took nothing
    assert (await store.get(s.id)) is not None


async def test_cap_drops_the_oldest_and_delete_by_id(store: MemoryStore) -> None:
    items = [memory(ADA, f"fact {i}") for i in range(4)]
    for item in items:
        await store.add(item, 3)
    kept = await store.list_scope(ADA)
    assert [m.text for m in kept] == ["fact 1", "fact 2", "fact 3"]
    assert await store.get(items[0].id) is None
    deleted = await store.delete(items[2].id)
    assert deleted is not None and deleted.text == "fact 2"
    assert await store.delete(items[2].id) is None
    assert [m.text for m in await store.list_scope(ADA)] == ["fact 1", "fact 3"]


async def test_touch_marks_use_only_in_the_scope(store: MemoryStore) -> None:
    a, b = memory(ADA, "a"), memory(BOB, "b")
    await store.add(a, 10)
    await store.add(b, 10)
    await store.touch(ADA, [a.id, b.id], "2026-01-01T00:00:00.000Z")
    touched, untouched = await store.get(a.id), await store.get(b.id)
    assert (
        touched is not None and touched.use_count == 1 and touched.last_used_at == "2026-01-01T00:00:00.000Z"
    )
    assert untouched is not None and untouched.use_count == 0 and untouched.last_used_at is None


async def test_a_redis_that_does_not_answer_raises_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = redis_client(
        ManagementStoreSettings(backend="redis", url=f"redis://127.0.0.1:{port}/0", timeout_seconds=0.5)
    )
    store = RedisMemoryStore(client, "svc_sr:test:down:")
    with pytest.raises(MemoryStoreUnavailable):
        await store.list_scope(ADA)
    with pytest.raises(MemoryStoreUnavailable):
        await store.add(memory(ADA, "x"), 10)


async def test_the_ray_routers_recall_from_the_ingress_store_on_redis_only(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """router_memories (the Router replicas' store) reads what the Ingress's store (named as
    app/api/parts.py names it) keeps; on a file management store there is none, logged."""
    from app.storage.memories import router_memories

    settings = ManagementStoreSettings(backend="redis", url=redis_url)
    app = f"app-{uuid.uuid4().hex[:8]}"
    ingress = RedisMemoryStore(redis_client(settings), settings.prefix_for(app))
    await ingress.add(memory(ADA, "The user's name is Ada."), max_memories=10)
    router = router_memories(settings, None, app)
    assert router is not None
    assert [m.text for m in await router.list_scope(ADA)] == ["The user's name is Ada."]
    assert await router.list_scope(BOB) == []
    with caplog.at_level("INFO", logger="svc_sr.storage.memories"):
        assert router_memories(ManagementStoreSettings(), None, app) is None
    assert "memory plugin inactive" in caplog.text
