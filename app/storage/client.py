"""The storage service as its callers see it, wherever it runs: `StorageClient`.

The management routes (routes/files.py, routes/vector_stores.py), the rag plugin's retrieval
(`PipelineServices.retrieve`) and the plugin preview call a `StorageClient`; it sends each
operation by name through a `Transport` and gets a `StorageReply` back. Two transports:

- `local_transport(service)`: the StorageService of this process, off the event loop (the
  single-process front doors, the tests, the contract suite);
- a Ray handle on the `Storage` deployment (deployments/storage.py): one replica holds the
  application's one StorageService (records file, ingestion worker, Milvus Lite file), so every
  Ingress replica and every Router replica sees the same vector stores.

Both ends run `serve_op` on the side that holds the service: the storage errors become a typed
`StorageFault` there (nothing storage-specific has to survive Ray's pickling of exceptions), and
the client raises the same exception types the service raises in-process again, so the routes
answer the same status codes and bodies (404 NOT_FOUND, 400 INVALID_INPUT with the limit in
details, 503 when the service or its backend is down) on either transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from app.pipeline.rag import RagChunk
from app.storage import StorageService
from app.storage.files import FileObject, FileRejected, FileServiceDown, Purpose
from app.storage.retrieval import search_chunks
from app.storage.schemas import (
    FileAttach,
    SearchRequest,
    SearchResults,
    VectorStoreCreate,
    VectorStoreFileObject,
    VectorStoreObject,
    VectorStoreUpdate,
)
from app.storage.vector_index import VectorIndexDown
from app.storage.vector_stores import NotFound, RotateResult

FaultKind = Literal["unavailable", "rejected", "not_found", "invalid"]
DISABLED = (
    "the file and vector-store service is not available (vector_store disabled or its directory unusable)"
)


class StorageFault(BaseModel):
    """A storage error as data: `kind` picks the exception the client raises again."""

    kind: FaultKind
    message: str
    details: dict[str, Any] = Field(default_factory=dict)  # FileRejected's limits


class StorageReply(BaseModel):
    """One operation's outcome: its value (a pydantic model of storage/schemas.py, a list of
    them, bytes or None) or its fault."""

    value: Any = None
    fault: StorageFault | None = None


def remove_file(service: StorageService, file_id: str) -> None:
    """Detach the file from every vector store holding it, then delete it."""
    stores = service.vector_stores
    for store in stores.listing():
        if any(f.id == file_id for f in stores.list_files(store.id)):
            stores.detach(store.id, file_id)
    service.files.delete(file_id)


# The operations by name: the Storage deployment's methods carry the same names.
OPS: dict[str, Callable[..., Any]] = {
    "files_create": lambda s, filename, data, purpose: s.files.create(filename, data, purpose),
    "files_listing": lambda s, purpose=None: s.files.listing(purpose),
    "files_get": lambda s, file_id: s.files.get(file_id),
    "files_content": lambda s, file_id: s.files.content(file_id),
    "files_remove": remove_file,
    "stores_create": lambda s, body: s.vector_stores.create(body),
    "stores_listing": lambda s: s.vector_stores.listing(),
    "stores_get": lambda s, store_id: s.vector_stores.get(store_id),
    "stores_update": lambda s, store_id, body: s.vector_stores.update(store_id, body),
    "stores_delete": lambda s, store_id: s.vector_stores.delete(store_id),
    "stores_search": lambda s, store_id, body: s.vector_stores.search(store_id, body),
    "stores_rotate": lambda s, store_id: s.vector_stores.rotate(store_id),
    "stores_attach": lambda s, store_id, body: s.vector_stores.attach(store_id, body),
    "stores_list_files": lambda s, store_id: s.vector_stores.list_files(store_id),
    "stores_get_file": lambda s, store_id, file_id: s.vector_stores.get_file(store_id, file_id),
    "stores_detach": lambda s, store_id, file_id: s.vector_stores.detach(store_id, file_id),
    "retrieve": lambda s, ref, query, top_k, ranker: search_chunks(
        s.vector_stores, ref, query, top_k, ranker
    ),
}


def serve_op(service: StorageService | None, op: str, args: tuple[Any, ...]) -> StorageReply:
    """Run `op` on `service` (blocking: file and store I/O, embedding); the storage errors as
    faults, in the order routes/files.py `call` mapped them (FileRejected is a ValueError,
    FileServiceDown an OSError). Anything else is a bug and raises."""
    if service is None:
        return StorageReply(fault=StorageFault(kind="unavailable", message=DISABLED))
    try:
        return StorageReply(value=OPS[op](service, *args))
    except (FileServiceDown, VectorIndexDown, OSError) as exc:
        return StorageReply(fault=StorageFault(kind="unavailable", message=str(exc)))
    except FileRejected as exc:
        return StorageReply(fault=StorageFault(kind="rejected", message=str(exc), details=dict(exc.details)))
    except NotFound as exc:
        return StorageReply(
            fault=StorageFault(kind="not_found", message=str(exc.args[0] if exc.args else exc))
        )
    except ValueError as exc:
        return StorageReply(fault=StorageFault(kind="invalid", message=str(exc)))


def raise_fault(fault: StorageFault) -> None:
    """The exception the service raised in-process, raised again on the caller's side."""
    if fault.kind == "unavailable":
        raise FileServiceDown(fault.message)
    if fault.kind == "rejected":
        raise FileRejected(fault.message, **fault.details)
    if fault.kind == "not_found":
        raise NotFound(fault.message)
    raise ValueError(fault.message)


# (operation name, its positional arguments) -> the reply; raises FileServiceDown when the
# service cannot be reached at all (a Storage deployment without a live replica).
Transport = Callable[[str, tuple[Any, ...]], Awaitable[StorageReply]]


def local_transport(service: StorageService | None) -> Transport:
    """This process's service, each operation in a thread (file and store I/O block)."""

    async def send(op: str, args: tuple[Any, ...]) -> StorageReply:
        return await asyncio.to_thread(serve_op, service, op, args)

    return send


_FILES = TypeAdapter(list[FileObject])
_STORES = TypeAdapter(list[VectorStoreObject])
_STORE_FILES = TypeAdapter(list[VectorStoreFileObject])
_CHUNKS = TypeAdapter(list[RagChunk])


class StorageClient:
    """The storage operations the routes and the rag plugin call (async), over a transport.
    `files` and `vector_stores` keep the method names of FileStore and VectorStores."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self.files = FilesClient(self)
        self.vector_stores = VectorStoresClient(self)

    async def call(self, op: str, *args: Any) -> Any:
        reply = StorageReply.model_validate(await self._transport(op, args))
        if reply.fault is not None:
            raise_fault(reply.fault)
        return reply.value

    async def retrieve(self, store_ref: str, query: str, top_k: int, ranker: str) -> list[RagChunk]:
        """The rag plugin's Retrieve (app/pipeline/rag.py): one store's search, named by id or name."""
        return _CHUNKS.validate_python(await self.call("retrieve", store_ref, query, top_k, ranker))


class FilesClient:
    def __init__(self, client: StorageClient) -> None:
        self._call = client.call

    async def create(self, filename: str, data: bytes, purpose: Purpose) -> FileObject:
        return FileObject.model_validate(await self._call("files_create", filename, data, purpose))

    async def listing(self, purpose: str | None = None) -> list[FileObject]:
        return _FILES.validate_python(await self._call("files_listing", purpose))

    async def get(self, file_id: str) -> FileObject | None:
        found = await self._call("files_get", file_id)
        return None if found is None else FileObject.model_validate(found)

    async def content(self, file_id: str) -> bytes | None:
        """The bytes as uploaded (also the hook for resolving a Responses `file_id` input)."""
        data: bytes | None = await self._call("files_content", file_id)
        return data

    async def remove(self, file_id: str) -> None:
        """Detach the file from every vector store, then delete it (one operation there)."""
        await self._call("files_remove", file_id)


class VectorStoresClient:
    def __init__(self, client: StorageClient) -> None:
        self._call = client.call

    async def create(self, body: VectorStoreCreate) -> VectorStoreObject:
        return VectorStoreObject.model_validate(await self._call("stores_create", body))

    async def listing(self) -> list[VectorStoreObject]:
        return _STORES.validate_python(await self._call("stores_listing"))

    async def get(self, store_id: str) -> VectorStoreObject:
        return VectorStoreObject.model_validate(await self._call("stores_get", store_id))

    async def update(self, store_id: str, body: VectorStoreUpdate) -> VectorStoreObject:
        return VectorStoreObject.model_validate(await self._call("stores_update", store_id, body))

    async def delete(self, store_id: str) -> None:
        await self._call("stores_delete", store_id)

    async def search(self, store_id: str, body: SearchRequest) -> SearchResults:
        return SearchResults.model_validate(await self._call("stores_search", store_id, body))

    async def rotate(self, store_id: str) -> RotateResult:
        return RotateResult.model_validate(await self._call("stores_rotate", store_id))

    async def attach(self, store_id: str, body: FileAttach) -> VectorStoreFileObject:
        return VectorStoreFileObject.model_validate(await self._call("stores_attach", store_id, body))

    async def list_files(self, store_id: str) -> list[VectorStoreFileObject]:
        return _STORE_FILES.validate_python(await self._call("stores_list_files", store_id))

    async def get_file(self, store_id: str, file_id: str) -> VectorStoreFileObject:
        return VectorStoreFileObject.model_validate(await self._call("stores_get_file", store_id, file_id))

    async def detach(self, store_id: str, file_id: str) -> None:
        await self._call("stores_detach", store_id, file_id)


def storage_client(storage: StorageService | StorageClient | None) -> StorageClient | None:
    """A client for what a Management part holds: a client as it is, a service in this process
    over the local transport, None (the routes answer 503) as None."""
    if storage is None or isinstance(storage, StorageClient):
        return storage
    return StorageClient(local_transport(storage))
