"""The management state shared by several Ingress replicas on Redis, and what a start serves.

Two `Harness` apps over one Redis key prefix stand for two Ingress replicas on different
nodes (each with its own process state, one store). A Redis that is down is a client
pointed at a closed port: reads keep answering from the last state, writes answer 503
with nothing written.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.common.ports import free_port
from app.config.loader import parse_config
from app.management.documents import CheckedDocument, candidate_of
from app.management.state import ConfigStore
from app.management.stores import resolve_startup_document
from app.state.shared_store import ManagementStoreSettings, StoreUnavailable, redis_client
from app.state.state_stores import RedisStateStore
from tests.fakes.stores import redis_with_search
from tests.unit.management.test_management_support import (
    Harness,
    base_document,
    error_code,
    etag,
    use_redis_store,
)


def redis_store(url: str, prefix: str, timeout_s: float = 2.0) -> ConfigStore:
    settings = ManagementStoreSettings(backend="redis", url=url, key_prefix=prefix, timeout_seconds=timeout_s)
    return ConfigStore(backend=RedisStateStore(redis_client(settings), prefix))


def candidate(default: str = "small", strategy: str = "priority") -> CheckedDocument:
    document = base_document()
    document["providers"]["defaults"]["default_model"] = default
    document["routing"]["strategy"] = strategy
    return candidate_of(parse_config(document).config)


@pytest.fixture
def prefix() -> str:
    return f"svc_sr:test:{uuid.uuid4().hex}:"


def two_replicas(kind: str, tmp_path: Path, redis_url: str, prefix: str) -> tuple[Harness, Harness]:
    """Two Ingress replicas' management over one store: Redis, or one node's state directory."""
    if kind == "redis":
        use_redis_store(redis_url, prefix)
        return Harness(), Harness()
    return Harness(state_dir=tmp_path), Harness(state_dir=tmp_path)


@pytest.mark.slow
@pytest.mark.file_store
@pytest.mark.parametrize("kind", ["file", "redis"])
async def test_a_patch_through_one_replica_is_what_every_replica_reads(
    kind: str, tmp_path: Path, redis_url: str, prefix: str
):
    first, second = two_replicas(kind, tmp_path, redis_url, prefix)
    async with first.client() as a, second.client() as b:
        before = await etag(b)
        r = await a.patch(
            "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": before}
        )
        assert r.status_code == 200, r.text
        seen = await b.get("/api/v1/config")
        versions = (await b.get("/api/v1/config/versions")).json()
    assert seen.headers["etag"] == r.json()["etag"] != before
    assert seen.json()["routing"]["strategy"] == "confidence"
    assert versions["versions"][0]["source"] == "api.patch"
    assert versions["versions"][0]["result"] == "active"


@pytest.mark.slow
@pytest.mark.file_store
@pytest.mark.parametrize("kind", ["file", "redis"])
async def test_two_patches_with_one_etag_through_two_replicas_exactly_one_wins(
    kind: str, tmp_path: Path, redis_url: str, prefix: str
):
    first, second = two_replicas(kind, tmp_path, redis_url, prefix)
    async with first.client() as a, second.client() as b:
        tag = await etag(a)
        answers = await asyncio.gather(
            a.patch(
                "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
            ),
            b.patch("/api/v1/config", json={"routing": {"strategy": "static"}}, headers={"If-Match": tag}),
        )
        final = await a.get("/api/v1/config")
    codes = sorted(r.status_code for r in answers)
    assert codes == [200, 412], [r.text for r in answers]
    loser = next(r for r in answers if r.status_code == 412)
    winner = next(r for r in answers if r.status_code == 200)
    assert error_code(loser) == "CONFIG_CHANGED"
    assert final.headers["etag"] == winner.json()["etag"]


@pytest.mark.file_store
def test_concurrent_writers_on_two_stores_lose_no_version(redis_url: str, prefix: str):
    stores = [redis_store(redis_url, prefix), redis_store(redis_url, prefix)]
    stores[0].initialize(candidate())
    stores[1].initialize(candidate())
    stores[0].history_limit = stores[1].history_limit = 100

    def write(store: ConfigStore, n: int) -> None:
        for i in range(n):
            store.persist(candidate(default="big" if i % 2 else "small", strategy="confidence"), "api.put")

    threads = [threading.Thread(target=write, args=(s, 10)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    versions = stores[0].versions()
    assert len(versions) == 21  # the start and 20 writes, none lost
    assert len({v.version for v in versions}) == 21 and len({v.attempt for v in versions}) == 21
    assert stores[1].versions() == versions


def _store(kind: str, tmp_path: Path, redis_url: str, prefix: str) -> ConfigStore:
    return ConfigStore(tmp_path) if kind == "file" else redis_store(redis_url, prefix)


@pytest.mark.file_store
@pytest.mark.parametrize("kind", ["file", "redis"])
def test_a_start_resumes_the_active_version_unless_the_file_changed(
    kind: str, tmp_path: Path, redis_url: str, prefix: str
):
    file = candidate()
    store = _store(kind, tmp_path, redis_url, prefix)
    assert store.initialize(file).kind == "first"
    patched = candidate(strategy="confidence")
    store.mark_active(store.persist(patched, "api.patch").version)

    # a restart with the file unchanged serves the patched version, and records no new one
    restarted = _store(kind, tmp_path, redis_url, prefix)
    document, why = resolve_startup_document(restarted, file)
    assert why == "resumed" and document == patched.document
    started = restarted.initialize(patched, file_hash=file.source_hash)
    assert started.kind == "resumed" and started.config_version == 2
    assert [v.source for v in restarted.versions()] == ["api.patch", "startup"]

    # an edited file wins and becomes a new version
    edited = candidate(default="big")
    again = _store(kind, tmp_path, redis_url, prefix)
    document, why = resolve_startup_document(again, edited)
    assert why == "file" and document == edited.document
    started = again.initialize(edited)
    assert started.kind == "file" and started.config_version == 3
    assert again.versions()[0].source == "file"
    # ... and from then on the edited file is what a start resumes against
    assert resolve_startup_document(_store(kind, tmp_path, redis_url, prefix), edited)[1] == "unchanged"


@pytest.mark.file_store
async def test_the_start_is_in_the_audit(redis_url: str, prefix: str):
    use_redis_store(redis_url, prefix)
    async with Harness().client() as c:
        await c.patch(
            "/api/v1/config",
            json={"routing": {"strategy": "confidence"}},
            headers={"If-Match": await etag(c)},
        )
    file_hash = candidate_of(parse_config(base_document()).config).source_hash
    restarted = Harness(document=_active_document(redis_url, prefix), file_hash=file_hash)
    async with restarted.client() as c:
        page = (await c.get("/api/v1/observability/audit", params={"action": "config.startup"})).json()
        current = await c.get("/api/v1/config")
    assert page["entries"][-1]["config"]["kind"] == "resumed"
    assert current.json()["routing"]["strategy"] == "confidence"


def _active_document(url: str, prefix: str) -> dict[str, Any]:
    state = redis_store(url, prefix)._load()
    assert state is not None and state.active is not None
    return state.active.document


@pytest.mark.file_store
async def test_a_store_that_is_down_keeps_reads_and_refuses_writes_with_503():
    down = f"redis://127.0.0.1:{free_port()}/0"
    use_redis_store(down, "svc_sr:test:down:")
    h = Harness()
    async with h.client() as c:
        current = await c.get("/api/v1/config")
        r = await c.patch(
            "/api/v1/config",
            json={"routing": {"strategy": "confidence"}},
            headers={"If-Match": current.headers["etag"]},
        )
        chat = await c.get("/health")
        status = (await c.get("/api/v1/status")).json()
    assert current.status_code == 200 and current.json()["providers"]["defaults"]["default_model"] == "small"
    assert r.status_code == 503 and error_code(r) == "STORE_UNAVAILABLE"
    assert r.headers["retry-after"] == "5"
    assert chat.status_code == 200
    store = next(cd for cd in status["conditions"] if cd["type"] == "ManagementStoreAvailable")
    assert (store["status"], store["reason"]) == ("False", "StoreUnreachable")


@pytest.mark.file_store
def test_a_write_to_a_store_that_went_down_raises_and_changes_nothing(redis_url: str, prefix: str):
    store = redis_store(redis_url, prefix)
    store.initialize(candidate())
    before = store.snapshot_json()
    store.backend = RedisStateStore(  # the same store, now unreachable
        redis_client(
            ManagementStoreSettings(
                backend="redis", url=f"redis://127.0.0.1:{free_port()}/0", timeout_seconds=0.5
            )
        ),
        prefix,
    )
    with pytest.raises(StoreUnavailable):
        store.persist(candidate(strategy="confidence"), "api.put")
    assert store.snapshot_json() == before  # reads serve the last state seen
    assert redis_store(redis_url, prefix).snapshot_json() == before  # nothing written


@pytest.mark.file_store
async def test_writes_come_back_with_the_store_and_an_emptied_store_gets_the_state_back(tmp_path: Path):
    """A Redis of the test's own: stopped (writes 503, reads answer), started again empty on
    the same port (no persistence): the replica reconnects by itself, writes its last state
    back, and the next PATCH lands."""
    port = free_port()
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    with redis_with_search(tmp_path / "first", port=port, own=True) as url:
        use_redis_store(url, "svc_sr:test:restart:")
        h = Harness()
        async with h.client() as c:
            tag = await etag(c)
    async with h.client() as c:  # the server is gone
        down = await c.patch(
            "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
        )
        read = await c.get("/api/v1/config")
    assert down.status_code == 503 and error_code(down) == "STORE_UNAVAILABLE"
    assert read.status_code == 200 and read.headers["etag"] == tag
    h.management.store._unreachable_until = 0.0  # skip the back-off instead of waiting it out
    with redis_with_search(tmp_path / "second", port=port, own=True):
        async with h.client() as c:
            assert await etag(c) == tag  # written back to the empty store
            up = await c.patch(
                "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
            )
            versions = (await c.get("/api/v1/config/versions")).json()["versions"]
    assert up.status_code == 200, up.text
    assert [v["source"] for v in versions] == ["api.patch", "startup"]
