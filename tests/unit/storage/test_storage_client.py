"""The StorageClient (app/storage/client.py) over a transport that crosses a process
boundary as a Ray handle does (arguments and replies pickled, the operation run by name in a
thread): the storage routes answer the same statuses and bodies as with the service in this
process, the errors come back as the same exception types, a transport that cannot reach the
service is a 503, and the `rag` plugin retrieves through it."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config.plugins import RagPlugin
from app.config.storage import VectorStoreConfig
from app.pipeline import PipelineServices
from app.pipeline.phases.rag import rag_step
from app.pipeline.plan import RoutePlan
from app.pipeline.rag import CHUNKS_HEADER, STATUS_HEADER
from app.storage import StorageService, open_storage
from app.storage.client import (
    DISABLED,
    StorageClient,
    StorageReply,
    Transport,
    local_transport,
    serve_op,
)
from app.storage.files import FileRejected, FileServiceDown
from app.storage.schemas import FileAttach, VectorStoreCreate
from app.storage.vector_stores import NotFound
from tests.fakes.embedding import hashed_embed
from tests.unit.management.test_management_support import Harness

FILES = "/api/v1/storage/files"
STORES = "/api/v1/storage/vector-stores"
REACTOR = "The Zorblax reactor runs at 740 kelvin. Its coolant is liquid sodium pumped by two loops."


def service(tmp_path: Path, **settings: Any) -> StorageService:
    made = open_storage(VectorStoreConfig(directory=str(tmp_path), **settings), tmp_path, embed=hashed_embed)
    assert made is not None
    return made


def pickled_transport(storage: StorageService | None, sent: list[str] | None = None) -> Transport:
    """What a handle does to a call: the arguments and the reply cross as pickles."""

    async def send(op: str, args: tuple[Any, ...]) -> StorageReply:
        if sent is not None:
            sent.append(op)
        received = pickle.loads(pickle.dumps(args))
        reply = await asyncio.to_thread(serve_op, storage, op, received)
        return pickle.loads(pickle.dumps(reply))  # type: ignore[no-any-return]  # pickle is untyped

    return send


async def down_transport(op: str, args: tuple[Any, ...]) -> StorageReply:
    raise FileServiceDown("Storage deployment unavailable (DeploymentUnavailableError)")


async def wait_completed(client: StorageClient, store_id: str) -> None:
    for _ in range(500):
        if all(f.status == "completed" for f in await client.vector_stores.list_files(store_id)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("ingestion did not finish")


async def seeded(client: StorageClient, name: str = "handbook") -> tuple[str, str]:
    record = await client.files.create("reactor.md", REACTOR.encode(), "assistants")
    store = await client.vector_stores.create(VectorStoreCreate(name=name))
    await client.vector_stores.attach(store.id, FileAttach(file_id=record.id))
    await wait_completed(client, store.id)
    return record.id, store.id


async def test_errors_come_back_as_the_service_raised_them(tmp_path: Path) -> None:
    client = StorageClient(pickled_transport(service(tmp_path, max_file_bytes=64)))
    with pytest.raises(FileRejected) as rejected:
        await client.files.create("big.txt", b"x" * 65, "assistants")
    assert rejected.value.details == {"limit_bytes": 64, "size_bytes": 65}
    with pytest.raises(NotFound, match="vs_missing"):
        await client.vector_stores.get("vs_missing")
    image = await client.files.create("cat.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 8, "vision")
    store = await client.vector_stores.create(VectorStoreCreate(name="s"))
    with pytest.raises(ValueError, match="vector stores take documents"):
        await client.vector_stores.attach(store.id, FileAttach(file_id=image.id))
    assert await client.files.get("file-nope") is None and await client.files.content("file-nope") is None
    with pytest.raises(FileServiceDown, match="not available"):
        await StorageClient(pickled_transport(None)).files.listing()


async def requests(client: httpx.AsyncClient) -> list[tuple[int, Any]]:
    """One request of each failure kind, and a round trip; (status, body) of each."""
    answers = []
    big = await client.post(FILES, files={"file": ("big.txt", b"x" * 65)})
    answers.append(big)
    ok = await client.post(FILES, files={"file": ("a.md", b"# notes")})
    answers.append(await client.get(f"{FILES}/{ok.json()['id']}/content"))
    answers.append(await client.get(f"{FILES}/file-nope"))
    answers.append(await client.get(f"{STORES}/vs_nope"))
    answers.append(await client.post(f"{STORES}/vs_nope/search", json={"query": "q"}))
    answers.append(await client.delete(f"{FILES}/{ok.json()['id']}"))
    result = []
    for response in answers:
        body = (
            response.json()
            if response.headers["content-type"].startswith("application/json")
            else response.content
        )
        if isinstance(body, dict) and "error" in body:
            body["error"].pop("timestamp", None)
            body["error"].pop("request_id", None)
        elif isinstance(body, dict):
            body["id"] = "file-<minted>"  # the ids differ per service
        result.append((response.status_code, body))
    return result


@pytest.mark.slow
async def test_the_routes_answer_alike_in_process_and_across_the_transport(tmp_path: Path) -> None:
    async with Harness(storage=service(tmp_path / "a", max_file_bytes=64)).client() as client:
        in_process = await requests(client)
    sent: list[str] = []
    remote = StorageClient(pickled_transport(service(tmp_path / "b", max_file_bytes=64), sent))
    async with Harness(storage=remote).client() as client:
        across = await requests(client)
    assert across == in_process
    assert [status for status, _ in across] == [400, 200, 404, 404, 404, 200]
    assert across[0][1]["error"]["details"] == {"limit_bytes": 64, "size_bytes": 65}
    assert across[1][1] == b"# notes"
    assert "files_remove" in sent  # detach-everywhere-then-delete is one operation there


@pytest.mark.slow
async def test_an_unreachable_or_disabled_service_is_a_503(tmp_path: Path) -> None:
    async with Harness(storage=StorageClient(down_transport)).client() as client:
        response = await client.get(FILES)
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        assert response.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
        assert "Storage deployment unavailable" in response.json()["error"]["message"]
        assert (await client.post(STORES, json={"name": "x"})).status_code == 503
    async with Harness(storage=StorageClient(pickled_transport(None))).client() as client:
        response = await client.get(f"{STORES}/vs_1")
        assert response.status_code == 503 and DISABLED in response.json()["error"]["message"]


async def test_a_deleted_file_is_detached_from_its_stores(tmp_path: Path) -> None:
    client = StorageClient(pickled_transport(service(tmp_path)))
    file_id, store_id = await seeded(client)
    await client.files.remove(file_id)
    assert await client.vector_stores.list_files(store_id) == []
    assert await client.files.get(file_id) is None


async def test_the_rag_plugin_retrieves_through_the_client(tmp_path: Path) -> None:
    client = StorageClient(pickled_transport(service(tmp_path)))
    file_id, store_id = await seeded(client, name="handbook")
    chunks = await client.retrieve("handbook", "Zorblax reactor kelvin", 2, "hybrid")  # by name
    assert [c.vector_store_id for c in chunks] == [store_id] and chunks[0].file_id == file_id
    assert "740 kelvin" in chunks[0].text
    plan = RoutePlan(
        request_id="r1",
        requested_model="MoM",
        auto=True,
        body={"messages": [{"role": "user", "content": "At what temperature does the Zorblax reactor run?"}]},
    )
    policy = RagPlugin.model_validate({"vector_store_id": "handbook", "top_k": 1})
    await rag_step(PipelineServices(retrieve=client.retrieve), plan, policy)
    assert plan.response_headers[STATUS_HEADER] == "ok" and plan.response_headers[CHUNKS_HEADER] == "1"
    assert "740 kelvin" in plan.body["messages"][-2]["content"]
    assert plan.rag is not None and plan.rag["chunks"][0]["file_id"] == file_id


async def test_a_store_unknown_or_unreachable_leaves_rag_unavailable(tmp_path: Path) -> None:
    for client in (StorageClient(local_transport(service(tmp_path))), StorageClient(down_transport)):
        plan = RoutePlan(
            request_id="r2",
            requested_model="MoM",
            auto=True,
            body={"messages": [{"role": "user", "content": "q"}]},
        )
        await rag_step(PipelineServices(retrieve=client.retrieve), plan, RagPlugin(vector_store_id="nope"))
        assert plan.response_headers[STATUS_HEADER] == "unavailable" and plan.immediate is None
