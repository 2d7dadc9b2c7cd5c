"""The vector-store chunk backends against real stores (Milvus Lite in-process, the session's
Valkey + RediSearch) and the in-memory one: the same contract, and a whole ingestion and
hybrid search through VectorStores on each."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.config.cache_stores import MilvusCacheSettings, MilvusCollection, RedisCacheSettings
from app.management.storage.backends import Chunk, MemoryBackend, VectorBackend, VectorBackendDown
from app.management.storage.files import FileStore
from app.management.storage.milvus_backend import MilvusBackend
from app.management.storage.models import ComparisonFilter, FileAttach, SearchRequest, VectorStoreCreate
from app.management.storage.redis_backend import RedisBackend
from app.management.storage.vector_stores import VectorStores
from tests.fakes.embedding import hashed_embed

TEXTS = ["red apple pie recipe", "green apple orchard", "rocket launch to orbit", "orbit of the moon"]


@pytest.fixture(params=["memory", "milvus", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorBackend]:
    if request.param == "memory":
        yield MemoryBackend()
    elif request.param == "milvus":
        settings = MilvusCacheSettings(collection=MilvusCollection(name="chunks_test"))
        milvus = MilvusBackend(settings, str(tmp_path / "vectors.db"))
        yield milvus
        milvus.close()
    else:
        url = request.getfixturevalue("redis_url")
        tag = uuid.uuid4().hex[:8]
        yield RedisBackend(RedisCacheSettings(url=url, index_name=f"vs_{tag}", key_prefix=f"test:{tag}:"))


def chunks_of(store: str, file: str, texts: list[str]) -> list[Chunk]:
    return [Chunk(f"{store}:{file}:{i}", store, file, i, t) for i, t in enumerate(texts)]


def test_add_search_list_and_remove(backend: VectorBackend) -> None:
    backend.add(chunks_of("vs_a", "file-1", TEXTS[:2]), hashed_embed(TEXTS[:2]))
    backend.add(chunks_of("vs_a", "file-2", TEXTS[2:]), hashed_embed(TEXTS[2:]))
    backend.add(chunks_of("vs_b", "file-1", TEXTS[:1]), hashed_embed(TEXTS[:1]))
    query = hashed_embed(["apple pie"])[0]
    hits = backend.nearest("vs_a", query, 3, None)
    assert [c.text for c, _ in hits][0] == "red apple pie recipe" and hits[0][1] > hits[1][1]
    assert {c.store_id for c, _ in hits} == {"vs_a"}
    only = backend.nearest("vs_a", query, 3, {"file-2"})
    assert only and {c.file_id for c, _ in only} == {"file-2"}
    assert backend.nearest("vs_a", query, 3, set()) == []
    assert sorted(c.text for c in backend.chunks("vs_a")) == sorted(TEXTS)
    backend.remove("vs_a", "file-1")
    assert sorted(c.text for c in backend.chunks("vs_a")) == sorted(TEXTS[2:])
    backend.remove("vs_a")
    assert backend.chunks("vs_a") == [] and backend.nearest("vs_a", query, 3, None) == []
    assert [c.text for c in backend.chunks("vs_b")] == TEXTS[:1]


def test_ingestion_and_hybrid_search(backend: VectorBackend, tmp_path: Path) -> None:
    files = FileStore(tmp_path / "files", 1 << 20, 100)
    stores = VectorStores(tmp_path, files, backend, hashed_embed, chunk_words=8, chunk_overlap_words=2)
    try:
        fruit = files.create("fruit.txt", " ".join(TEXTS[:2]).encode(), "assistants")
        space = files.create("space.txt", " ".join(TEXTS[2:]).encode(), "assistants")
        store = stores.create(VectorStoreCreate(name="s"))
        stores.attach(store.id, FileAttach(file_id=fruit.id, attributes={"kind": "food"}))
        stores.attach(store.id, FileAttach(file_id=space.id, attributes={"kind": "space"}))
        stores.wait_idle()
        assert stores.get(store.id).file_counts.completed == 2
        top = stores.search(store.id, SearchRequest(query="moon orbit")).data
        assert top[0].file_id == space.id
        food = stores.search(
            store.id,
            SearchRequest(query="moon orbit", filters=ComparisonFilter(type="eq", key="kind", value="food")),
        )
        assert {r.file_id for r in food.data} == {fruit.id}
        stores.detach(store.id, space.id)
        assert {r.file_id for r in stores.search(store.id, SearchRequest(query="moon orbit")).data} == {
            fruit.id
        }
    finally:
        stores.close()


def test_an_unreachable_store_is_backend_down(tmp_path: Path) -> None:
    dead = RedisBackend(RedisCacheSettings(url="redis://127.0.0.1:1/0", timeout_seconds=0.5))
    with pytest.raises(VectorBackendDown):
        dead.ping()
    with pytest.raises(VectorBackendDown):
        dead.nearest("vs_a", np.ones(4, np.float32), 3, None)
    server = MilvusBackend(MilvusCacheSettings(uri="http://127.0.0.1:1", timeout_seconds=0.5), "unused")
    with pytest.raises(VectorBackendDown):
        server.ping()
