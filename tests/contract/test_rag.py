"""The `rag` plugin end to end, through the OpenAI SDK on both front doors (the Ingress, and
Envoy with the ext_proc bridge), on every vector backend (`global.stores.vector_store`): memory,
Milvus Lite (a file under the stack's own tmp dir) and Redis (the session's Valkey + search
module, an index and key prefix of this module's own, so parallel workers never meet).

Two documents uploaded with the SDK (`files.create` on /api/v1/storage), a vector store created
and both attached (the SDK's plain requests, parsed as its own VectorStore and VectorStoreFile),
ingestion awaited (file status polled); a MoM question whose decision has the rag plugin reaches
the fake upstream with the right passage in its prompt, and the answer names the chunk
(routing_metadata.rag, x-vsr-rag-chunks). A backend that goes down (the same kind of backend at
a closed port) answers the vector-store routes 503 with the management error body, and the rag
plugin skips it (x-vsr-rag-status: unavailable) while both doors keep answering."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types import VectorStore
from openai.types.vector_stores import VectorStoreFile

from app.config.storage import VectorStoreConfig
from app.pipeline.rag import PREAMBLE
from app.storage import open_vector_index
from app.storage.milvus_index import MilvusVectorIndex
from app.storage.redis_index import RedisVectorIndex
from app.storage.vector_index import MemoryVectorIndex, VectorIndex
from tests.contract.answers import Answer, sdk_chat, user
from tests.contract.conftest import DOORS, FrontDoors, Upstreams
from tests.stores.backends import BackendKind, unreachable_location

STORE = "handbook"
BACKENDS: dict[str, type[VectorIndex]] = {
    "memory": MemoryVectorIndex,
    "milvus": MilvusVectorIndex,
    "redis": RedisVectorIndex,
}
STORES = "/api/v1/storage/vector-stores"
REACTOR = (
    "Reactor operations. The Zorblax reactor in building nine runs at 412 kelvin during the night "
    "shift and is cooled with liquid argon supplied from the north tank."
)
CAFETERIA = (
    "Cafeteria guide. The staff cafeteria serves lentil soup on Tuesdays and closes at half past "
    "two on public holidays; payment is by badge only."
)
REACTOR_QUESTION = "At what temperature does the Zorblax reactor run at night?"


def rag_document(up: Upstreams, vector_store: dict[str, Any]) -> dict[str, Any]:
    rag = {"type": "rag", "configuration": {"vector_store_id": STORE, "top_k": 1, "max_context_tokens": 256}}
    document = up.document([{"name": "handbook_qa", "modelRefs": [{"model": "general"}], "plugins": [rag]}])
    return document | {"global": {"stores": {"vector_store": vector_store}}}


def vector_store_config(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """`global.stores.vector_store` for `backend` (Milvus Lite: under the stack's own directory)."""
    if backend == "redis":
        tag = uuid.uuid4().hex[:12]
        url = request.getfixturevalue("redis_url")
        return {
            "backend_type": "redis",
            "redis": {"url": url, "index_name": f"rag_{tag}", "key_prefix": f"rag:{tag}:"},
        }
    return {"backend_type": backend}


@dataclass(frozen=True)
class RagStack:
    backend: str
    doors: FrontDoors
    store_id: str
    file_ids: dict[str, str]  # filename -> file id


@pytest.fixture(scope="module", params=list(BACKENDS))
def stack(
    request: pytest.FixtureRequest, front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams
) -> RagStack:
    doors = front_doors(rag_document(upstreams, vector_store_config(request.param, request)))
    assert isinstance(doors.storage.vector_stores.backend, BACKENDS[request.param])
    store_id, file_ids = ingest(doors.ingress_url)
    return RagStack(request.param, doors, store_id, file_ids)


def storage_sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/api/v1/storage", api_key="admin-key", max_retries=0, timeout=60)


def ingest(base: str) -> tuple[str, dict[str, str]]:
    """Upload both documents, create the store, attach them, wait until both are completed."""
    client = storage_sdk(base)
    file_ids = {}
    for name, text in (("reactor.md", REACTOR), ("cafeteria.txt", CAFETERIA)):
        uploaded = client.files.create(file=(name, text.encode()), purpose="assistants")
        assert uploaded.filename == name and uploaded.purpose == "assistants", uploaded
        file_ids[name] = uploaded.id
    store = client.post("/vector-stores", body={"name": STORE}, cast_to=VectorStore)
    assert store.name == STORE and store.object == "vector_store", store
    for file_id in file_ids.values():
        attached = client.post(
            f"/vector-stores/{store.id}/files", body={"file_id": file_id}, cast_to=VectorStoreFile
        )
        assert attached.vector_store_id == store.id and attached.status in ("in_progress", "completed")
    deadline = time.monotonic() + 60
    for file_id in file_ids.values():
        while True:
            item = client.get(f"/vector-stores/{store.id}/files/{file_id}", cast_to=VectorStoreFile)
            if item.status == "completed":
                break
            assert item.status == "in_progress", item
            assert time.monotonic() < deadline, f"ingestion did not finish: {item}"
            time.sleep(0.05)
    return store.id, file_ids


def ask(url: str, text: str) -> Answer:
    return sdk_chat(url, user(text))


def injected(upstreams: Upstreams) -> str | None:
    return upstreams.forwarded_system(PREAMBLE)


def test_the_right_passage_reaches_the_upstream_and_the_answer_names_its_chunk(
    stack: RagStack, upstreams: Upstreams
) -> None:
    doors, reactor_file = stack.doors, stack.file_ids["reactor.md"]
    for door in DOORS:
        doors.forget()
        upstreams.reset()
        answer = ask(doors.url(door), REACTOR_QUESTION)
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        prompt = injected(upstreams)
        assert prompt is not None and "412 kelvin" in prompt and "lentil soup" not in prompt, (door, prompt)
        rag = answer.body["routing_metadata"]["rag"]
        assert answer.headers["x-vsr-rag-chunks"] == "1" and answer.headers["x-vsr-rag-status"] == "ok", door
        # the chunk's id is the same on every backend: store:file:index
        assert [(c["vector_store_id"], c["file_id"], c["chunk_id"]) for c in rag["chunks"]] == [
            (stack.store_id, reactor_file, f"{stack.store_id}:{reactor_file}:0")
        ], (door, rag)
        assert rag["chunks"][0]["chunk_id"] in prompt and rag["cached"] is False

        again = ask(doors.url(door), REACTOR_QUESTION)
        doors.settle(door)
        assert again.headers["x-vsr-rag-status"] == "cached", door
        assert again.body["routing_metadata"]["rag"]["chunks"] == rag["chunks"]


def unreachable(backend: str, directory: Path) -> VectorIndex:
    """A backend of the same kind that cannot be reached (Redis, Milvus: a closed local port)."""
    if backend == "memory":
        dead = MemoryVectorIndex()
        dead.down = True
        return dead
    location = unreachable_location(
        BackendKind(backend, {}, store="redis" if backend == "redis" else "milvus")
    )
    return open_vector_index(
        VectorStoreConfig.model_validate({"backend_type": backend, **location}), directory
    )


def assert_unavailable(response: httpx.Response) -> None:
    """503 with the management error body (error{code, message, timestamp}, docs/management-api.md)."""
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE" and "storage unavailable" in error["message"], error
    assert error["timestamp"] and response.headers["retry-after"] == "5"


def test_a_store_that_is_down_answers_503_and_the_rag_plugin_skips_it(
    stack: RagStack, upstreams: Upstreams, tmp_path: Path
) -> None:
    doors, store = stack.doors, f"{STORES}/{stack.store_id}"
    stores = doors.storage.vector_stores
    working = stores.backend
    stores.backend = unreachable(stack.backend, tmp_path)
    try:
        with httpx.Client(base_url=doors.ingress_url, timeout=60) as client:
            assert_unavailable(client.post(f"{store}/search", json={"query": "reactor temperature"}))
            assert_unavailable(client.post(f"{store}/rotate"))
            assert_unavailable(client.delete(f"{store}/files/{stack.file_ids['cafeteria.txt']}"))
            assert_unavailable(client.delete(store))
            reactor = f"/api/v1/storage/files/{stack.file_ids['reactor.md']}"
            assert_unavailable(client.delete(reactor))  # a file is detached from its stores first
            kept = client.get(store)  # the records stay for a retry: nothing was half done
            assert kept.status_code == 200 and kept.json()["file_counts"]["completed"] == 2, kept.text
            assert client.get(reactor).status_code == 200
        for door in DOORS:
            doors.forget()
            upstreams.reset()
            answer = ask(doors.url(door), "Which soup does the cafeteria serve on Tuesdays?")
            doors.settle(door)
            assert answer.status == 200, (door, answer.body)
            assert (
                answer.headers["x-vsr-rag-status"] == "unavailable"
                and answer.headers["x-vsr-rag-chunks"] == "0"
            ), (door, answer.headers)
            assert answer.body["routing_metadata"]["rag"]["status"] == "unavailable"
            assert injected(upstreams) is None and upstreams.chat.request_count == 1, door
    finally:
        stores.backend = working
    doors.forget()
    upstreams.reset()
    back = ask(doors.url(DOORS[0]), REACTOR_QUESTION)  # the store is back: so are its passages
    doors.settle(DOORS[0])
    assert back.headers["x-vsr-rag-status"] == "ok" and "412 kelvin" in (injected(upstreams) or "")


def test_the_preview_probe_searches_the_store_without_the_result_cache(stack: RagStack) -> None:
    doors = stack.doors
    request = {
        "binding": {"decision": "handbook_qa"},
        "mode": "probe",
        "request": {"messages": user("Which soup does the cafeteria serve on Tuesdays?")},
    }
    doors.forget()
    for _ in range(2):  # the second probe searches again: backend_calls stays 1
        probe = httpx.post(f"{doors.ingress_url}/api/v1/plugins/rag/preview", json=request, timeout=60)
        assert probe.status_code == 200, probe.text
        answer = probe.json()
        assert answer["backend_calls"] == 1 and answer["result"]["retrieval"] == "vector_store"
        assert [c["file_id"] for c in answer["result"]["chunks"]] == [stack.file_ids["cafeteria.txt"]]
        assert "lentil soup" in answer["result"]["injected_context"]
    assert len(doors.services.rag_cache) == 0  # the probe neither read nor filled the pipeline's cache
