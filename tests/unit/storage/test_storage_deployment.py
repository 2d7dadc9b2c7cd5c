"""The Storage deployment's replica class without a Ray cluster (deployments/storage.py): its
methods are the StorageClient's operations, and a vector_store change arriving as user_config
reopens the service in place (records and files kept), `enabled: false` closes it (503s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.storage.client import DISABLED, StorageClient, StorageReply
from deployments.storage import Storage


def replica(tmp_path: Path) -> Any:
    return Storage.func_or_class(state_dir=str(tmp_path), app_name="storage-test")  # type: ignore[attr-defined]  # the bound Serve deployment's class


def over(target: Any) -> StorageClient:
    async def send(op: str, args: tuple[Any, ...]) -> StorageReply:
        reply: StorageReply = await getattr(target, op)(
            *args
        )  # the method of the op's name, as a handle calls it
        return reply

    return StorageClient(send)


async def test_a_changed_section_reopens_the_service_and_disabled_closes_it(tmp_path: Path) -> None:
    target = replica(tmp_path)
    await target.reconfigure({"vector_store": {"max_files": 2}})
    client = over(target)
    first = await client.files.create("a.md", b"# one", "assistants")
    assert (tmp_path / "storage" / "files").is_dir()  # GraphArgs.state_dir's storage/
    opened = target._service
    await target.reconfigure({"vector_store": {"max_files": 2}})  # unchanged: kept as it is
    assert target._service is opened
    await target.reconfigure({"vector_store": {"max_files": 1}})  # changed: reopened, files kept
    assert target._service is not opened
    assert [f.id for f in await client.files.listing()] == [first.id]
    reply = await target.files_create("b.md", b"# two", "assistants")
    assert (
        reply.fault is not None and reply.fault.kind == "rejected" and reply.fault.details == {"max_files": 1}
    )
    await target.reconfigure({"vector_store": {"enabled": False}})
    reply = await target.stores_listing()
    assert reply.fault is not None and (reply.fault.kind, reply.fault.message) == ("unavailable", DISABLED)
