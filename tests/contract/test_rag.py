"""The `rag` plugin end to end, through the OpenAI SDK on both front doors (the Ingress, and
Envoy with the ext_proc bridge): two documents uploaded through /api/v1/storage/files, a vector
store created and both attached, ingestion awaited (file status polled); a MoM question whose
decision has the rag plugin reaches the fake upstream with the right passage in its prompt, and
the answer names the chunk (routing_metadata.rag, x-vsr-rag-chunks). A store that goes down
skips retrieval and the request is still answered (x-vsr-rag-status: unavailable)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.pipeline.rag import PREAMBLE, RagChunk
from tests.contract.answers import Answer, sdk_chat, user
from tests.contract.conftest import DOORS, FrontDoors, Upstreams

STORE = "handbook"
REACTOR = (
    "Reactor operations. The Zorblax reactor in building nine runs at 412 kelvin during the night "
    "shift and is cooled with liquid argon supplied from the north tank."
)
CAFETERIA = (
    "Cafeteria guide. The staff cafeteria serves lentil soup on Tuesdays and closes at half past "
    "two on public holidays; payment is by badge only."
)


def rag_document(up: Upstreams) -> dict[str, Any]:
    rag = {"type": "rag", "configuration": {"vector_store_id": STORE, "top_k": 1, "max_context_tokens": 256}}
    return up.document([{"name": "handbook_qa", "modelRefs": [{"model": "general"}], "plugins": [rag]}])


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    found = front_doors(rag_document(upstreams))
    ingest(found.ingress_url)
    return found


def ingest(base: str) -> dict[str, str]:
    """Upload both documents, create the store, attach them, wait until both are completed."""
    with httpx.Client(base_url=base, timeout=60) as client:
        file_ids = {}
        for name, text in (("reactor.md", REACTOR), ("cafeteria.txt", CAFETERIA)):
            uploaded = client.post("/api/v1/storage/files", files={"file": (name, text.encode())})
            assert uploaded.status_code == 200, uploaded.text
            file_ids[name] = uploaded.json()["id"]
        created = client.post("/api/v1/storage/vector-stores", json={"name": STORE})
        assert created.status_code == 200, created.text
        store_id = created.json()["id"]
        for file_id in file_ids.values():
            attached = client.post(
                f"/api/v1/storage/vector-stores/{store_id}/files", json={"file_id": file_id}
            )
            assert attached.status_code == 200, attached.text
        deadline = time.monotonic() + 60
        while True:
            listing = client.get(f"/api/v1/storage/vector-stores/{store_id}/files").json()["data"]
            statuses = {f["id"]: f["status"] for f in listing}
            if set(statuses.values()) == {"completed"} and len(statuses) == 2:
                break
            assert "failed" not in statuses.values(), listing
            assert time.monotonic() < deadline, f"ingestion did not finish: {statuses}"
            time.sleep(0.05)
    return file_ids


def ask(url: str, text: str) -> Answer:
    return sdk_chat(url, user(text))


def injected(upstreams: Upstreams) -> str | None:
    return upstreams.forwarded_system(PREAMBLE)


def test_the_right_passage_reaches_the_upstream_and_the_answer_names_its_chunk(
    doors: FrontDoors, upstreams: Upstreams
) -> None:
    reactor_file = next(f.id for f in doors.storage.files.listing() if f.filename == "reactor.md")
    for door in DOORS:
        doors.forget()
        upstreams.reset()
        answer = ask(doors.url(door), "At what temperature does the Zorblax reactor run at night?")
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        prompt = injected(upstreams)
        assert prompt is not None and "412 kelvin" in prompt and "lentil soup" not in prompt, (door, prompt)
        rag = answer.body["routing_metadata"]["rag"]
        assert answer.headers["x-vsr-rag-chunks"] == "1" and answer.headers["x-vsr-rag-status"] == "ok", door
        assert [c["file_id"] for c in rag["chunks"]] == [reactor_file], (door, rag)
        assert rag["chunks"][0]["chunk_id"] in prompt and rag["cached"] is False

        again = ask(doors.url(door), "At what temperature does the Zorblax reactor run at night?")
        doors.settle(door)
        assert again.headers["x-vsr-rag-status"] == "cached", door
        assert again.body["routing_metadata"]["rag"]["chunks"] == rag["chunks"]


def test_a_store_that_is_down_is_skipped_and_the_request_is_answered(
    doors: FrontDoors, upstreams: Upstreams
) -> None:
    working = doors.services.retrieve

    async def down(store_id: str, query: str, top_k: int, ranker: str) -> list[RagChunk]:
        raise ConnectionError("vector store down")

    doors.services.retrieve = down
    try:
        for door in DOORS:
            doors.forget()
            upstreams.reset()
            answer = ask(doors.url(door), "Which soup does the cafeteria serve on Tuesdays?")
            doors.settle(door)
            assert answer.status == 200, (door, answer.body)
            assert (
                answer.headers["x-vsr-rag-status"] == "unavailable"
                and answer.headers["x-vsr-rag-chunks"] == "0"
            )
            assert answer.body["routing_metadata"]["rag"]["status"] == "unavailable"
            assert injected(upstreams) is None, door
    finally:
        doors.services.retrieve = working


def test_the_preview_probe_searches_the_store_without_the_result_cache(doors: FrontDoors) -> None:
    request = {
        "binding": {"decision": "handbook_qa"},
        "mode": "probe",
        "request": {"messages": user("Which soup does the cafeteria serve on Tuesdays?")},
    }
    cafeteria = next(f.id for f in doors.storage.files.listing() if f.filename == "cafeteria.txt")
    doors.forget()
    for _ in range(2):  # the second probe searches again: backend_calls stays 1
        probe = httpx.post(f"{doors.ingress_url}/api/v1/plugins/rag/preview", json=request, timeout=60)
        assert probe.status_code == 200, probe.text
        answer = probe.json()
        assert answer["backend_calls"] == 1 and answer["result"]["retrieval"] == "vector_store"
        assert [c["file_id"] for c in answer["result"]["chunks"]] == [cafeteria]
        assert "lentil soup" in answer["result"]["injected_context"]
    assert len(doors.services.rag_cache) == 0  # the probe neither read nor filled the pipeline's cache
