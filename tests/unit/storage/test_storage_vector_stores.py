"""/api/v1/storage/vector-stores: create, list, read, update, delete; attach (background
ingestion with per-file status), list, inspect, detach; hybrid search with filters; 404s and
503 when the vector backend is down. In-memory backend, hashed bag-of-words embeddings."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.config.storage import VectorStoreConfig
from app.storage import StorageService, open_storage
from app.storage.chunking import chunk_words, document_text
from app.storage.ranking import rrf
from app.storage.schemas import FileAttach, VectorStoreCreate
from app.storage.vector_index import Bm25, Chunk, MemoryVectorIndex
from tests.fakes.embedding import hashed_embed
from tests.unit.management.test_management_support import Harness

FILES = "/api/v1/storage/files"
STORES = "/api/v1/storage/vector-stores"
DOCS = {
    "cooking.md": "Bake the bread at 220 degrees for forty minutes. Knead the dough and let the yeast rise overnight.",
    "space.txt": "The rocket reached orbit after the second stage burn. Astronauts docked with the space station.",
    "law.html": "<html><head><style>p{}</style></head><body><h1>Contract law</h1><p>A contract needs offer,"
    " acceptance and consideration.</p><script>var x=1</script></body></html>",
    "tax.json": '{"topic": "taxes", "rules": [{"name": "deduction", "text": "Mortgage interest is deductible"}]}',
}


def service(tmp_path: Path, embed: Any = hashed_embed) -> StorageService:
    made = open_storage(
        VectorStoreConfig(directory=str(tmp_path), chunk_words=12, chunk_overlap_words=3),
        tmp_path,
        embed=embed,
    )
    assert made is not None
    return made


async def upload_all(client: httpx.AsyncClient) -> dict[str, str]:
    ids = {}
    for name, text in DOCS.items():
        response = await client.post(FILES, files={"file": (name, text.encode())})
        assert response.status_code == 200, response.text
        ids[name] = response.json()["id"]
    return ids


async def wait_done(client: httpx.AsyncClient, store_id: str) -> dict[str, Any]:
    for _ in range(200):
        store = (await client.get(f"{STORES}/{store_id}")).json()
        if store["file_counts"]["in_progress"] == 0:
            return dict(store)
        await asyncio.sleep(0.02)
    raise AssertionError("ingestion did not finish")


@pytest.mark.slow
async def test_store_lifecycle_ingestion_and_hybrid_search(tmp_path: Path) -> None:
    storage = service(tmp_path)
    async with Harness(storage=storage).client() as client:
        ids = await upload_all(client)
        created = await client.post(
            STORES, json={"name": "kb", "file_ids": [ids["cooking.md"]], "metadata": {"team": "a"}}
        )
        assert created.status_code == 200, created.text
        store = created.json()
        assert (
            store["object"] == "vector_store" and store["name"] == "kb" and store["metadata"] == {"team": "a"}
        )
        sid = store["id"]
        for name, attrs in (("space.txt", {"kind": "science", "year": 2020}), ("law.html", {"kind": "law", "year": 2001}),
                            ("tax.json", {"kind": "law", "year": 2023})):  # fmt: skip
            attached = await client.post(
                f"{STORES}/{sid}/files", json={"file_id": ids[name], "attributes": attrs}
            )
            assert attached.status_code == 200 and attached.json()["status"] in ("in_progress", "completed")
        done = await wait_done(client, sid)
        assert done["file_counts"] == {
            "in_progress": 0,
            "completed": 4,
            "failed": 0,
            "cancelled": 0,
            "total": 4,
        }
        assert done["status"] == "completed" and done["usage_bytes"] > 0
        item = (await client.get(f"{STORES}/{sid}/files/{ids['cooking.md']}")).json()
        assert item["status"] == "completed" and item["chunk_count"] == 2  # 17 words, 12 per chunk, 3 overlap

        async def top(query: str, **extra: Any) -> list[dict[str, Any]]:
            response = await client.post(f"{STORES}/{sid}/search", json={"query": query, **extra})
            assert response.status_code == 200, response.text
            return list(response.json()["data"])

        for ranker in ("hybrid", "vector", "bm25"):
            hits = await top("when does the yeast rise in the dough", ranking_options={"ranker": ranker})
            assert hits[0]["file_id"] == ids["cooking.md"] and hits[0]["filename"] == "cooking.md", ranker
        law = await top("contract offer acceptance")
        assert law[0]["file_id"] == ids["law.html"] and "var x" not in law[0]["content"][0]["text"]
        assert (
            "rules[0].text: Mortgage interest"
            in (await top("mortgage interest deductible"))[0]["content"][0]["text"]
        )
        # metadata filters select files by their attributes before ranking
        only_law = await top("rocket orbit", filters={"type": "eq", "key": "kind", "value": "law"})
        assert only_law and {h["file_id"] for h in only_law} <= {ids["law.html"], ids["tax.json"]}
        recent_law = await top("contract", filters={"type": "and", "filters": [
            {"type": "eq", "key": "kind", "value": "law"}, {"type": "gte", "key": "year", "value": 2010}]})  # fmt: skip
        assert {h["file_id"] for h in recent_law} == {ids["tax.json"]}
        assert await top("bread", max_num_results=1) and len(await top("bread", max_num_results=1)) == 1

        updated = await client.post(f"{STORES}/{sid}", json={"name": "renamed"})
        assert updated.json()["name"] == "renamed" and updated.json()["metadata"] == {"team": "a"}
        assert [s["id"] for s in (await client.get(STORES)).json()["data"]] == [sid]
        assert len((await client.get(f"{STORES}/{sid}/files")).json()["data"]) == 4

        detached = await client.delete(f"{STORES}/{sid}/files/{ids['cooking.md']}")
        assert detached.json() == {
            "id": ids["cooking.md"],
            "object": "vector_store.file.deleted",
            "deleted": True,
        }
        assert all(h["file_id"] != ids["cooking.md"] for h in await top("bread dough yeast"))
        # deleting a file detaches it from its stores
        assert (await client.delete(f"{FILES}/{ids['space.txt']}")).status_code == 200
        assert all(h["file_id"] != ids["space.txt"] for h in await top("rocket orbit astronauts"))
        assert (await client.delete(f"{STORES}/{sid}")).json()["deleted"] is True
        assert (await client.get(f"{STORES}/{sid}")).status_code == 404
    assert storage.vector_stores.backend.chunks(sid) == []


@pytest.mark.slow
async def test_ingestion_runs_in_the_background_and_failures_say_why(tmp_path: Path) -> None:
    gate = threading.Event()

    def slow_embed(texts: list[str]) -> np.ndarray:
        gate.wait(10)
        return hashed_embed(texts)

    storage = service(tmp_path, slow_embed)
    async with Harness(storage=storage).client() as client:
        ids = await upload_all(client)
        sid = (await client.post(STORES, json={})).json()["id"]
        attached = await client.post(f"{STORES}/{sid}/files", json={"file_id": ids["space.txt"]})
        assert attached.json()["status"] == "in_progress"  # answered while the encoder is blocked
        assert (await client.get(STORES + "/" + sid)).json()["status"] == "in_progress"
        gate.set()
        await wait_done(client, sid)
        blank = (await client.post(FILES, files={"file": ("blank.txt", b"   \n ")})).json()["id"]
        await client.post(f"{STORES}/{sid}/files", json={"file_id": blank})
        store = await wait_done(client, sid)
        assert store["file_counts"]["failed"] == 1
        failed = (await client.get(f"{STORES}/{sid}/files/{blank}")).json()
        assert failed["status"] == "failed" and failed["last_error"]["message"] == "the file holds no text"
        rotated = await client.post(f"{STORES}/{sid}/rotate")
        assert rotated.json() == {
            "vector_store_id": sid,
            "object": "vector_store.rotation",
            "files_queued": 2,
        }
        assert (await wait_done(client, sid))["file_counts"]["completed"] == 1


@pytest.mark.slow
async def test_404s_and_bad_input(tmp_path: Path) -> None:
    async with Harness(storage=service(tmp_path)).client() as client:
        ids = await upload_all(client)
        assert (await client.get(f"{STORES}/vs_missing")).json()["error"]["code"] == "NOT_FOUND"
        assert (await client.post(f"{STORES}/vs_missing/search", json={"query": "x"})).status_code == 404
        # A body naming no file is a bad request (400): the path's store exists, or is created.
        assert (await client.post(STORES, json={"file_ids": ["file-nope"]})).status_code == 400
        sid = (await client.post(STORES, json={})).json()["id"]
        unknown = await client.post(f"{STORES}/{sid}/files", json={"file_id": "file-nope"})
        assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "INVALID_INPUT"
        missing_store = await client.post(f"{STORES}/vs_missing/files", json={"file_id": "file-nope"})
        assert missing_store.status_code == 404
        assert (await client.get(f"{STORES}/{sid}/files/{ids['space.txt']}")).status_code == 404
        assert (await client.delete(f"{STORES}/{sid}/files/{ids['space.txt']}")).status_code == 404
        image = (
            await client.post(FILES, files={"file": ("a.gif", b"GIF89a....")}, data={"purpose": "vision"})
        ).json()
        refused = await client.post(f"{STORES}/{sid}/files", json={"file_id": image["id"]})
        assert refused.status_code == 400 and "documents" in refused.json()["error"]["message"]
        for body in (
            {"query": ""},
            {"query": "x", "max_num_results": 0},
            {"query": "x", "filters": {"type": "eq"}},
        ):
            assert (await client.post(f"{STORES}/{sid}/search", json=body)).status_code == 400


@pytest.mark.slow
async def test_503_when_the_vector_backend_is_down(tmp_path: Path) -> None:
    storage = service(tmp_path)
    async with Harness(storage=storage).client() as client:
        ids = await upload_all(client)
        sid = (await client.post(STORES, json={"file_ids": [ids["space.txt"]]})).json()["id"]
        await wait_done(client, sid)
        backend = storage.vector_stores.backend
        assert isinstance(backend, MemoryVectorIndex)
        backend.down = True
        response = await client.post(
            f"{STORES}/{sid}/search", json={"query": "rocket", "ranking_options": {"ranker": "vector"}}
        )
        assert response.status_code == 503 and response.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
        assert (await client.delete(f"{STORES}/{sid}")).status_code == 503
        assert (await client.get(f"{STORES}/{sid}")).status_code == 200  # the record was kept
        # a rotation now would fail every file and hide the store's intact chunks: refused
        assert (await client.post(f"{STORES}/{sid}/rotate")).status_code == 503
        await client.post(f"{STORES}/{sid}/files", json={"file_id": ids["law.html"]})
        counts = (await wait_done(client, sid))["file_counts"]
        assert counts["failed"] == 1 and counts["completed"] == 1
        backend.down = False
        found = await client.post(f"{STORES}/{sid}/search", json={"query": "rocket orbit"})
        assert [r["file_id"] for r in found.json()["data"]][:1] == [ids["space.txt"]], found.text
        assert (await client.delete(f"{STORES}/{sid}")).status_code == 200


def test_records_survive_a_restart(tmp_path: Path) -> None:
    first = service(tmp_path)
    record = first.files.create("space.txt", DOCS["space.txt"].encode(), "assistants")
    store = first.vector_stores.create(VectorStoreCreate(name="kept"))
    first.vector_stores.attach(store.id, FileAttach(file_id=record.id))
    first.vector_stores.wait_idle()
    again = service(tmp_path)
    assert again.vector_stores.get(store.id).name == "kept"
    assert again.vector_stores.get_file(store.id, record.id).status == "completed"


def test_chunking_flattening_and_fusion() -> None:
    assert chunk_words(" ".join(str(i) for i in range(10)), 4, 1) == ["0 1 2 3", "3 4 5 6", "6 7 8 9"]
    assert chunk_words("", 4, 1) == []
    assert document_text("text/html", b"<p>a &amp; b</p><script>x()</script><p>c</p>") == "a & b\nc"
    assert document_text("application/json", b'{"a": {"b": [1, null, "z"]}}') == "a.b[0]: 1\na.b[2]: z"
    chunks = [
        Chunk(str(i), "s", "f", i, text)
        for i, text in enumerate(["red apple", "green apple pie", "blue sky"])
    ]
    bm25 = Bm25(chunks)
    assert [c.id for c, _ in bm25.search("apple pie", 3, None)] == ["1", "0"]
    assert bm25.search("apple", 3, {"other"}) == []
    fused = rrf([[(chunks[0], 1.0), (chunks[1], 0.5)], [(chunks[1], 9.0), (chunks[2], 1.0)]], 3)
    assert [c.id for c, _ in fused] == ["1", "0", "2"]  # in both lists beats first in one
