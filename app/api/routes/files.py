"""Uploaded files (docs/storage.md): multipart upload, list, inspect, download, delete.

    POST   /api/v1/storage/files                      data.write   multipart: file, purpose
    GET    /api/v1/storage/files[?purpose=]           data.read
    GET    /api/v1/storage/files/{file_id}            data.read
    GET    /api/v1/storage/files/{file_id}/content    data.read    the bytes, as uploaded
    DELETE /api/v1/storage/files/{file_id}            data.write   also detaches it from every vector store

A rejected upload (kind by content, size, count) is 400 INVALID_INPUT with the limit in
details; the file service unavailable (no storage service, directory or vector backend
down, the Storage deployment unreachable) is 503 SERVICE_UNAVAILABLE. The multipart body is
parsed here (a closing boundary is required: a cut-short upload stores nothing). The routes
call a StorageClient (app/storage/client.py): the service in this process, or the
Storage deployment's (deployments/storage.py) on the Ray graph, with the same answers.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from app.common.mgmt_errors import MgmtError, invalid_input, not_found, unavailable
from app.management.routes.common import Registrar, Responses, json_response, mgmt_errors, record_mutation
from app.management.service import Management
from app.storage.client import StorageClient
from app.storage.files import (
    DOCUMENT_TYPES,
    IMAGE_TYPES,
    FileDeleted,
    FileList,
    FileObject,
    FileRejected,
    FileServiceDown,
)
from app.storage.parts import StorageParts
from app.storage.vector_index import VectorIndexDown
from app.storage.vector_stores import NotFound

PREFIX = "/api/v1/storage/files"
TAGS: list[str | Enum] = ["storage"]
UNAVAILABLE: Responses = mgmt_errors(
    {503: "the file service is unavailable (no storage here, or its store is down)"}
)
MISSING: Responses = mgmt_errors({404: "NOT_FOUND: no such file"})
T = TypeVar("T")

UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "purpose": {
                            "type": "string",
                            "enum": ["assistants", "vision"],
                            "default": "assistants",
                        },
                    },
                }
            }
        },
    }
}


def storage_of(parts: StorageParts) -> StorageClient:
    if parts.storage is None:
        raise unavailable("the file and vector-store service is not available in this process")
    return parts.storage


async def call(operation: Awaitable[T]) -> T:
    """A storage operation (the client runs it off the event loop or on the Storage
    deployment); the storage errors, raised again by the client, as management errors."""
    try:
        return await operation
    except (FileServiceDown, VectorIndexDown, OSError) as exc:
        raise unavailable(f"storage unavailable: {exc}") from None
    except FileRejected as exc:
        raise invalid_input(str(exc), details=dict(exc.details) or None) from None
    except NotFound as exc:
        raise not_found(str(exc.args[0] if exc.args else exc)) from None
    except ValueError as exc:
        raise invalid_input(str(exc)) from None


def parse_multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """name -> (filename, bytes) of a multipart/form-data body."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not content_type.lower().startswith("multipart/form-data") or match is None:
        raise invalid_input("the upload must be multipart/form-data with a boundary")
    parts = body.split(b"--" + match.group(1).encode("latin-1"))
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in parts[1:]:
        if part.startswith(b"--"):
            return fields
        head, sep, content = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not sep:
            raise invalid_input("a multipart part has no header block")
        disposition = ""
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-disposition":
                disposition = value
        name = re.search(r'(?:^|;)\s*name="([^"]*)"', disposition)
        filename = re.search(r'filename="([^"]*)"', disposition)
        if name is None:
            raise invalid_input("a multipart part has no name")
        fields[name.group(1)] = (filename.group(1) if filename else None, content.removesuffix(b"\r\n"))
    raise invalid_input("the multipart body is incomplete (no closing boundary); nothing was stored")


class FileEndpoints:
    """The route handlers (bound methods: FastAPI reads their parameters)."""

    def __init__(self, mgmt: Management, parts: StorageParts) -> None:
        self.mgmt = mgmt
        self.parts = parts

    async def upload(self, request: Request) -> JSONResponse:
        storage = storage_of(self.parts)
        fields = parse_multipart(request.headers.get("content-type", ""), await request.body())
        filename, data = fields.get("file", (None, b""))
        if not filename:
            raise invalid_input("the form needs a `file` part with a filename")
        purpose_raw = fields.get("purpose", (None, b"assistants"))[1].decode("utf-8", "replace").strip()
        if purpose_raw not in ("assistants", "vision"):
            raise invalid_input("purpose must be assistants (documents) or vision (images)")
        purpose: Literal["assistants", "vision"] = "vision" if purpose_raw == "vision" else "assistants"
        record = await call(storage.files.create(filename, data, purpose))
        record_mutation(self.mgmt, "storage.file.upload", request, 200, file_id=record.id, bytes=record.bytes)
        return json_response(record)

    async def list_files(self, purpose: Literal["assistants", "vision"] | None = None) -> JSONResponse:
        storage = storage_of(self.parts)
        return json_response(FileList(data=await call(storage.files.listing(purpose))))

    async def inspect(self, file_id: str) -> JSONResponse:
        return json_response(await self.found(lambda s: s.files.get(file_id), file_id))

    async def download(self, file_id: str) -> Response:
        record = await self.found(lambda s: s.files.get(file_id), file_id)
        data = await self.found(lambda s: s.files.content(file_id), file_id)
        disposition = f'attachment; filename="{record.filename.replace(chr(34), "")}"'
        return Response(data, media_type=record.content_type, headers={"content-disposition": disposition})

    async def delete(self, file_id: str, request: Request) -> JSONResponse:
        storage = storage_of(self.parts)
        await self.found(lambda s: s.files.get(file_id), file_id)
        await call(storage.files.remove(file_id))
        record_mutation(self.mgmt, "storage.file.delete", request, 200, file_id=file_id)
        return json_response(FileDeleted(id=file_id))

    async def found(self, get: Callable[[StorageClient], Awaitable[T | None]], file_id: str) -> T:
        storage = storage_of(self.parts)
        value = await call(get(storage))
        if value is None:
            raise not_found(f"file {file_id!r} not found")
        return value


# The bytes as uploaded, with the content type the upload was accepted as (app/storage/files.py).
DOWNLOAD_OK: Responses = {
    200: {
        "description": "the file's bytes, in the content type it was accepted as",
        "content": {
            kind: {"schema": {"type": "string", "format": "binary"}}
            for kind in sorted({*DOCUMENT_TYPES.values(), *IMAGE_TYPES.values()})
        },
    }
}


def file_routes(mgmt: Management, parts: StorageParts) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add
    ep = FileEndpoints(mgmt, parts)
    one = {**UNAVAILABLE, **MISSING}
    item = PREFIX + "/{file_id}"
    routes: list[tuple[str, Callable[..., Any], str, str, dict[str, Any]]] = [
        (
            PREFIX,
            ep.upload,
            "POST",
            "data.write",
            {"response_model": FileObject, "openapi_extra": UPLOAD_BODY},
        ),
        (PREFIX, ep.list_files, "GET", "data.read", {"response_model": FileList}),
        (item, ep.inspect, "GET", "data.read", {"response_model": FileObject}),
        (item + "/content", ep.download, "GET", "data.read", {}),
        (item, ep.delete, "DELETE", "data.write", {"response_model": FileDeleted}),
    ]
    for path, endpoint, method, permission, options in routes:
        responses = (
            UNAVAILABLE if path == PREFIX else ({**one, **DOWNLOAD_OK} if path.endswith("content") else one)
        )
        add(path, endpoint, method, permission, responses=responses, tags=TAGS, **options)
    return router


__all__ = ["MgmtError", "call", "file_routes", "storage_of"]
