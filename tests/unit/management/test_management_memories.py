"""/api/v1/storage/memories (docs/memories.md): list and delete by scope, read and delete by
id, over the in-process store and (the management_store parameter) Redis. Scopes never
leak: user A's listing, scoped read and scoped delete never show or touch user B's memories.
Permissions: data.read to read, data.write to delete; a bad scope 400, an unknown id 404,
no store configured 404 FEATURE_DISABLED (a feature that is off is no server fault), a store
that is down 503, all in the spec's error body."""

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
    new_memory_id,
    now_stamp,
)
from app.state.shared_store import ManagementStoreSettings, redis_client
from tests.unit.management.test_management_support import Harness, base_document, error_code, with_auth

PREFIX = "/api/v1/storage/memories"
ADMIN, READER = "admin-tok-1111", "reader-tok-2222"
AUTH = {
    "mode": "bearer",
    "tokens": [
        {"name": "root", "token_env": "T_ADMIN", "role": "admin"},
        {"name": "reader", "token_env": "T_READ", "permissions": ["data.read"]},
    ],
}
ADA = MemoryScope(kind="user", id="ada")
BOB = MemoryScope(kind="user", id="bob")


@pytest.fixture
def store(management_store: str, request: pytest.FixtureRequest) -> Iterator[MemoryStore]:
    if management_store != "redis":
        yield InMemoryMemoryStore()
        return
    url = request.getfixturevalue("redis_url")
    client = redis_client(ManagementStoreSettings(backend="redis", url=url))
    yield RedisMemoryStore(client, f"svc_sr:test:{uuid.uuid4().hex}:")
    client.close()


async def fill(store: MemoryStore) -> dict[str, Memory]:
    kept: dict[str, Memory] = {}
    for scope, text in (
        (ADA, "The user's name is Ada."),
        (ADA, "The user prefers French."),
        (BOB, "The user's name is Bob."),
    ):
        memory = Memory(
            id=new_memory_id(),
            scope=scope,
            text=text,
            category="about",
            created_at=now_stamp(),
            vector=[0.5, 0.5],
        )
        await store.add(memory, 100)
        kept[text] = memory
    return kept


def harness(store: MemoryStore | None, auth: bool = False) -> Harness:
    if auth:
        document = with_auth(base_document(), AUTH)
        return Harness(document, environ={"T_ADMIN": ADMIN, "T_READ": READER}, memory_store=store)
    return Harness(memory_store=store)


@pytest.mark.slow
async def test_list_read_delete_and_scopes_never_leak(store: MemoryStore) -> None:
    kept = await fill(store)
    bobs = kept["The user's name is Bob."]
    async with harness(store).client() as api:
        listing = await api.get(PREFIX, params={"scope": "user:ada"})
        assert listing.status_code == 200, listing.text
        body = listing.json()
        assert body["total"] == 2 and body["scope"] == {"kind": "user", "id": "ada"}
        assert [m["text"] for m in body["data"]] == ["The user prefers French.", "The user's name is Ada."]
        assert all("vector" not in m and m["scope"]["id"] == "ada" for m in body["data"])
        assert (await api.get(PREFIX, params={"scope": "user:ada", "limit": 1})).json()["data"][0][
            "text"
        ] == "The user prefers French."
        # B's memory through A's scope: as unknown as a made-up id
        for method in ("GET", "DELETE"):
            crossed = await api.request(method, f"{PREFIX}/{bobs.id}", params={"scope": "user:ada"})
            assert crossed.status_code == 404 and error_code(crossed) == "NOT_FOUND"
        one = await api.get(f"{PREFIX}/{bobs.id}", params={"scope": "user:bob"})
        assert one.status_code == 200 and one.json()["text"] == "The user's name is Bob."
        gone = await api.delete(PREFIX, params={"scope": "user:ada"})
        assert gone.json() == {"scope": {"kind": "user", "id": "ada"}, "deleted": 2}
        assert (await api.get(PREFIX, params={"scope": "user:bob"})).json()["total"] == 1
        deleted = await api.delete(f"{PREFIX}/{bobs.id}")
        assert deleted.json() == {"id": bobs.id, "object": "memory.deleted", "deleted": True}
        missing = await api.get(f"{PREFIX}/{bobs.id}")
        assert missing.status_code == 404 and error_code(missing) == "NOT_FOUND"
        assert (await api.delete(f"{PREFIX}/mem_nope")).status_code == 404


BAD_SCOPES: list[dict[str, str]] = [
    {},
    {"scope": "user"},
    {"scope": "tenant:x"},
    {"scope": "user:"},
    {"scope": "user: ada"},
    {"scope": "user:" + "x" * 300},
]


@pytest.mark.slow
async def test_a_bad_scope_is_400(store: MemoryStore) -> None:
    async with harness(store).client() as api:
        for params in BAD_SCOPES:
            for method in ("GET", "DELETE"):
                answer = await api.request(method, PREFIX, params=params)
                assert answer.status_code == 400 and error_code(answer) == "INVALID_INPUT", (
                    params,
                    answer.text,
                )
            if params:  # the scope is optional by id, never malformed
                assert (await api.get(f"{PREFIX}/mem_x", params=params)).status_code == 400


@pytest.mark.slow
async def test_permissions(store: MemoryStore) -> None:
    kept = await fill(store)
    h = harness(store, auth=True)
    async with h.client(READER) as reader, h.client(ADMIN) as admin, h.client() as anonymous:
        scope = {"scope": "user:ada"}
        assert (await reader.get(PREFIX, params=scope)).status_code == 200
        denied = await reader.delete(PREFIX, params=scope)
        assert denied.status_code == 403 and error_code(denied) == "FORBIDDEN"
        assert (await reader.delete(f"{PREFIX}/{kept['The user prefers French.'].id}")).status_code == 403
        assert (await anonymous.get(PREFIX, params=scope)).status_code == 401
        assert (await admin.delete(PREFIX, params=scope)).json()["deleted"] == 2


@pytest.mark.slow
async def test_no_store_is_404_feature_disabled_and_a_store_that_is_down_is_503() -> None:
    async with harness(None).client() as api:
        for method, path in (("GET", PREFIX), ("DELETE", PREFIX), ("GET", f"{PREFIX}/mem_x")):
            answer = await api.request(method, path, params={"scope": "user:ada"})
            assert answer.status_code == 404 and error_code(answer) == "FEATURE_DISABLED", answer.text
            assert "SVC_SR_MANAGEMENT_STORE_URL" in answer.json()["error"]["message"]
        recovery = await api.post(
            "/api/v1/storage/context-recovery/invalidate", json={"scope": "user:ada", "reason": "no_models"}
        )
        assert recovery.status_code == 404 and error_code(recovery) == "FEATURE_DISABLED", recovery.text
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = RedisMemoryStore(
        redis_client(
            ManagementStoreSettings(backend="redis", url=f"redis://127.0.0.1:{port}/0", timeout_seconds=0.5)
        ),
        "svc_sr:test:down:",
    )
    async with harness(down).client() as api:
        for method, path in (
            ("GET", PREFIX),
            ("DELETE", PREFIX),
            ("GET", f"{PREFIX}/mem_x"),
            ("DELETE", f"{PREFIX}/mem_x"),
        ):
            answer = await api.request(method, path, params={"scope": "user:ada"})
            assert answer.status_code == 503 and answer.headers["retry-after"] == "5", (
                method,
                path,
                answer.text,
            )
            assert error_code(answer) == "SERVICE_UNAVAILABLE"
        status = await api.get("/api/v1/status")
        assert status.status_code == 200  # the router keeps serving
