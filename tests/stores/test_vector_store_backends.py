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
from app.storage import milvus_index
from app.storage.files import FileStore
from app.storage.milvus_index import MilvusVectorIndex
from app.storage.redis_index import RedisVectorIndex
from app.storage.schemas import ComparisonFilter, FileAttach, SearchRequest, VectorStoreCreate
from app.storage.vector_index import Chunk, MemoryVectorIndex, VectorIndex, VectorIndexDown
from app.storage.vector_stores import VectorStores
from tests.fakes.embedding import hashed_embed

TEXTS = ["red apple pie recipe", "green apple orchard", "rocket launch to orbit", "orbit of the moon"]


@pytest.fixture(params=["memory", "milvus", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    if request.param == "memory":
        yield MemoryVectorIndex()
    elif request.param == "milvus":
        settings = MilvusCacheSettings(collection=MilvusCollection(name="chunks_test"))
        milvus = MilvusVectorIndex(settings, str(tmp_path / "vectors.db"))
        yield milvus
        milvus.close()
    else:
        url = request.getfixturevalue("redis_url")
        tag = uuid.uuid4().hex[:8]
        yield RedisVectorIndex(RedisCacheSettings(url=url, index_name=f"vs_{tag}", key_prefix=f"test:{tag}:"))


def chunks_of(store: str, file: str, texts: list[str]) -> list[Chunk]:
    return [Chunk(f"{store}:{file}:{i}", store, file, i, t) for i, t in enumerate(texts)]


def test_add_search_list_and_remove(backend: VectorIndex) -> None:
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


def test_ingestion_and_hybrid_search(backend: VectorIndex, tmp_path: Path) -> None:
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
    dead = RedisVectorIndex(RedisCacheSettings(url="redis://127.0.0.1:1/0", timeout_seconds=0.5))
    with pytest.raises(VectorIndexDown):
        dead.ping()
    with pytest.raises(VectorIndexDown):
        dead.nearest("vs_a", np.ones(4, np.float32), 3, None)
    server = MilvusVectorIndex(MilvusCacheSettings(uri="http://127.0.0.1:1", timeout_seconds=0.5), "unused")
    with pytest.raises(VectorIndexDown):
        server.ping()


def test_rotate_rebuilds_a_store_without_leftover_chunks(backend: VectorIndex, tmp_path: Path) -> None:
    files = FileStore(tmp_path / "files", 1 << 20, 100)
    stores = VectorStores(tmp_path, files, backend, hashed_embed, chunk_words=8, chunk_overlap_words=1)
    try:
        text = files.create(
            "all.txt", " ".join(TEXTS * 2).encode(), "assistants"
        )  # 30 words: 5 chunks of 8, then 2 of 16
        store = stores.create(VectorStoreCreate(name="s", file_ids=[text.id]))
        stores.wait_idle()
        assert sorted(c.index for c in backend.chunks(store.id)) == [0, 1, 2, 3, 4]
        stores.chunk_words, stores.chunk_overlap_words = 16, 2  # fewer, bigger chunks
        assert stores.rotate(store.id).files_queued == 1
        stores.wait_idle()
        rebuilt = sorted(backend.chunks(store.id), key=lambda c: c.index)
        assert [(c.id, c.index) for c in rebuilt] == [(f"{store.id}:{text.id}:{i}", i) for i in (0, 1)]
        assert stores.get(store.id).file_counts.completed == 1
        top = stores.search(store.id, SearchRequest(query="rocket launch")).data
        assert top and top[0].chunk_id in {c.id for c in rebuilt}
    finally:
        stores.close()


def test_milvus_lists_a_store_bigger_than_one_query_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Milvus query answers at most QUERY_WINDOW rows: BM25 must still see every chunk."""
    monkeypatch.setattr(milvus_index, "QUERY_WINDOW", 2)
    milvus = MilvusVectorIndex(
        MilvusCacheSettings(collection=MilvusCollection(name="chunks_test")), str(tmp_path / "v.db")
    )
    try:
        milvus.add(chunks_of("vs_a", "file-1", TEXTS + TEXTS[:1]), hashed_embed(TEXTS + TEXTS[:1]))
        milvus.add(chunks_of("vs_b", "file-1", TEXTS[:1]), hashed_embed(TEXTS[:1]))
        assert sorted(c.index for c in milvus.chunks("vs_a")) == [0, 1, 2, 3, 4]
        assert [c.store_id for c in milvus.chunks("vs_b")] == ["vs_b"]
    finally:
        milvus.close()


def test_milvus_checks_its_collection_again_after_a_failed_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server flaps between connecting and `has_collection`: the next call must not take
    the existing collection for none (searches would come back empty)."""
    from pymilvus import MilvusClient

    settings = MilvusCacheSettings(collection=MilvusCollection(name="chunks_test"))
    first = MilvusVectorIndex(settings, str(tmp_path / "v.db"))
    first.add(chunks_of("vs_a", "file-1", TEXTS[:2]), hashed_embed(TEXTS[:2]))
    first.close()
    real, calls = MilvusClient.has_collection, []

    def flapping(self: MilvusClient, *args: object, **kwargs: object) -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("the server went away")
        return bool(real(self, *args, **kwargs))  # type: ignore[arg-type]

    monkeypatch.setattr(MilvusClient, "has_collection", flapping)
    second = MilvusVectorIndex(settings, str(tmp_path / "v.db"))
    try:
        with pytest.raises(VectorIndexDown):
            second.ping()
        assert sorted(c.text for c in second.chunks("vs_a")) == sorted(TEXTS[:2])
        assert second.nearest("vs_a", hashed_embed(["apple pie"])[0], 1, None)
    finally:
        second.close()


def test_a_milvus_ping_asks_the_server_each_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rotation asks the backend first (503 while it is down): a client that connected while
    the server was up must not answer for it once it is gone."""
    from pymilvus import MilvusClient

    milvus = MilvusVectorIndex(
        MilvusCacheSettings(collection=MilvusCollection(name="chunks_test")), str(tmp_path / "v.db")
    )
    try:
        milvus.ping()

        def gone(self: MilvusClient, *args: object, **kwargs: object) -> bool:
            raise ConnectionError("the server went away")

        monkeypatch.setattr(MilvusClient, "has_collection", gone)
        with pytest.raises(VectorIndexDown):
            milvus.ping()
    finally:
        milvus.close()
