"""Vector stores (docs/storage.md), in OpenAI's vector-store shapes:

    POST   /api/v1/storage/vector-stores                          data.write   create
    GET    /api/v1/storage/vector-stores                          data.read    list
    GET    /api/v1/storage/vector-stores/{store_id}               data.read    read
    POST   /api/v1/storage/vector-stores/{store_id}               data.write   update (name, metadata)
    DELETE /api/v1/storage/vector-stores/{store_id}               data.write   delete (and its chunks)
    POST   /api/v1/storage/vector-stores/{store_id}/search        data.read    hybrid search
    POST   /api/v1/storage/vector-stores/{store_id}/rotate        data.write   rebuild its index
    POST   /api/v1/storage/vector-stores/{store_id}/files         data.write   attach (ingests in the background)
    GET    /api/v1/storage/vector-stores/{store_id}/files         data.read    list
    GET    /api/v1/storage/vector-stores/{store_id}/files/{file_id}  data.read  inspect (status, last_error)
    DELETE /api/v1/storage/vector-stores/{store_id}/files/{file_id}  data.write detach

Failures as in routes/files.py: 404 NOT_FOUND, 400 INVALID_INPUT, 503 when the service or
its vector backend is down.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.api.routes.files import UNAVAILABLE, call, storage_of
from app.common.api_docs import json_body
from app.management.routes.common import (
    Registrar,
    Responses,
    json_response,
    mgmt_errors,
    read_model,
    record_mutation,
)
from app.management.service import Management
from app.storage.client import VectorStoresClient
from app.storage.parts import StorageParts
from app.storage.schemas import (
    FileAttach,
    SearchRequest,
    SearchResults,
    VectorStoreCreate,
    VectorStoreDeleted,
    VectorStoreFileDeleted,
    VectorStoreFileList,
    VectorStoreFileObject,
    VectorStoreList,
    VectorStoreObject,
    VectorStoreUpdate,
)
from app.storage.vector_stores import RotateResult

PREFIX = "/api/v1/storage/vector-stores"
TAGS: list[str | Enum] = ["storage"]
MISSING: Responses = mgmt_errors({404: "NOT_FOUND: no such vector store or file"})
ONE: Responses = {**UNAVAILABLE, **MISSING}


class StoreEndpoints:
    """The route handlers (bound methods: FastAPI reads their parameters)."""

    def __init__(self, mgmt: Management, parts: StorageParts) -> None:
        self.mgmt = mgmt
        self.parts = parts

    def stores(self) -> VectorStoresClient:
        return storage_of(self.parts).vector_stores

    async def create(self, request: Request) -> JSONResponse:
        vs = self.stores()
        body = await read_model(VectorStoreCreate, request, optional=True)
        created = await call(vs.create(body))
        record_mutation(self.mgmt, "storage.vector_store.create", request, 200, vector_store_id=created.id)
        return json_response(created)

    async def list_stores(self) -> JSONResponse:
        vs = self.stores()
        return json_response(VectorStoreList(data=await call(vs.listing())))

    async def read(self, store_id: str) -> JSONResponse:
        vs = self.stores()
        return json_response(await call(vs.get(store_id)))

    async def update(self, store_id: str, request: Request) -> JSONResponse:
        vs = self.stores()
        body = await read_model(VectorStoreUpdate, request)
        updated = await call(vs.update(store_id, body))
        record_mutation(self.mgmt, "storage.vector_store.update", request, 200, vector_store_id=store_id)
        return json_response(updated)

    async def delete(self, store_id: str, request: Request) -> JSONResponse:
        vs = self.stores()
        await call(vs.delete(store_id))
        record_mutation(self.mgmt, "storage.vector_store.delete", request, 200, vector_store_id=store_id)
        return json_response(VectorStoreDeleted(id=store_id))

    async def search(self, store_id: str, request: Request) -> JSONResponse:
        vs = self.stores()
        body = await read_model(SearchRequest, request)
        return json_response(await call(vs.search(store_id, body)))

    async def rotate(self, store_id: str, request: Request) -> JSONResponse:
        vs = self.stores()
        result = await call(vs.rotate(store_id))
        record_mutation(self.mgmt, "storage.vector_store.rotate", request, 200, vector_store_id=store_id)
        return json_response(result)

    async def attach(self, store_id: str, request: Request) -> JSONResponse:
        vs = self.stores()
        body = await read_model(FileAttach, request)
        item = await call(vs.attach(store_id, body))
        record_mutation(
            self.mgmt,
            "storage.vector_store.attach",
            request,
            200,
            vector_store_id=store_id,
            file_id=body.file_id,
        )
        return json_response(item)

    async def list_files(self, store_id: str) -> JSONResponse:
        vs = self.stores()
        return json_response(VectorStoreFileList(data=await call(vs.list_files(store_id))))

    async def inspect(self, store_id: str, file_id: str) -> JSONResponse:
        vs = self.stores()
        return json_response(await call(vs.get_file(store_id, file_id)))

    async def detach(self, store_id: str, file_id: str, request: Request) -> JSONResponse:
        vs = self.stores()
        await call(vs.detach(store_id, file_id))
        record_mutation(
            self.mgmt, "storage.vector_store.detach", request, 200, vector_store_id=store_id, file_id=file_id
        )
        return json_response(VectorStoreFileDeleted(id=file_id))


def vector_store_routes(mgmt: Management, parts: StorageParts) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add
    ep = StoreEndpoints(mgmt, parts)
    one, files = PREFIX + "/{store_id}", PREFIX + "/{store_id}/files"
    routes: list[tuple[str, Callable[..., Any], str, str, type[BaseModel], type[BaseModel] | None]] = [
        (PREFIX, ep.create, "POST", "data.write", VectorStoreObject, VectorStoreCreate),
        (PREFIX, ep.list_stores, "GET", "data.read", VectorStoreList, None),
        (one, ep.read, "GET", "data.read", VectorStoreObject, None),
        (one, ep.update, "POST", "data.write", VectorStoreObject, VectorStoreUpdate),
        (one, ep.delete, "DELETE", "data.write", VectorStoreDeleted, None),
        (one + "/search", ep.search, "POST", "data.read", SearchResults, SearchRequest),
        (one + "/rotate", ep.rotate, "POST", "data.write", RotateResult, None),
        (files, ep.attach, "POST", "data.write", VectorStoreFileObject, FileAttach),
        (files, ep.list_files, "GET", "data.read", VectorStoreFileList, None),
        (files + "/{file_id}", ep.inspect, "GET", "data.read", VectorStoreFileObject, None),
        (files + "/{file_id}", ep.detach, "DELETE", "data.write", VectorStoreFileDeleted, None),
    ]
    for path, endpoint, method, permission, model, body in routes:
        # Creating takes no body at all as well (every field is optional).
        documented = None if body is None else json_body(body, required=body is not VectorStoreCreate)
        options: dict[str, Any] = {"openapi_extra": documented} if documented is not None else {}
        responses = UNAVAILABLE if (path, method) == (PREFIX, "GET") else ONE
        add(
            path,
            endpoint,
            method,
            permission,
            responses=responses,
            tags=TAGS,
            response_model=model,
            **options,
        )
    return router
