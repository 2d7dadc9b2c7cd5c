"""Knowledge bases (docs/knowledge-bases.md), over the Ingress's knowledge-base service (app/storage/knowledge_bases.py):

    GET    /api/v1/storage/knowledge-bases                     data.read     list (summaries)
    POST   /api/v1/storage/knowledge-bases                     config.write  create -> 202 pending
    GET    /api/v1/storage/knowledge-bases/{name}              data.read     one base, entries included
    PUT    /api/v1/storage/knowledge-bases/{name}              config.write  replace entries -> 202
    DELETE /api/v1/storage/knowledge-bases/{name}              config.write  delete -> 202 pending
    GET    /api/v1/storage/knowledge-bases/{name}/map/metadata data.read     projection metadata
    GET    /api/v1/storage/knowledge-bases/{name}/map/data.ndjson  data.read streamed points

Entries are request-like content, so reading them takes data.read; a mutation changes how
requests route, as a configuration change does, so it takes config.write. A mutation while
another is pending answers 409 CONFIG_ACTIVATION_PENDING (app/storage/knowledge_bases.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Literal

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from app.common.api_docs import json_body
from app.common.mgmt_errors import MgmtError
from app.management.routes.common import Registrar, json_response, mgmt_errors, read_model, record_mutation
from app.management.service import Management
from app.pipeline.signals.kb_data import KB_NAME, MAX_ENTRIES, KbEntry, KbStatus, KnowledgeBase
from app.storage.kb_map import KbMap, KbMapMetadata
from app.storage.parts import StorageParts

PREFIX = "/api/v1/storage/knowledge-bases"
TAGS: list[str | Enum] = ["storage"]
NAME = Path(
    min_length=1, max_length=64, pattern=KB_NAME.pattern, description="knowledge base name ([A-Za-z0-9_.-])"
)
NOT_FOUND = mgmt_errors({404: "NOT_FOUND: no knowledge base of that name"})
MUTATION = mgmt_errors(
    {
        409: "CONFIG_ACTIVATION_PENDING: another knowledge-base mutation is pending; ALREADY_EXISTS on create",
        503: "no router runtime in this process, or the management store is unavailable",
    }
)
NOT_ACTIVE = mgmt_errors({409: "KB_NOT_ACTIVE: the base has no embedded vectors yet (pending or failed)"})


class KbCreate(BaseModel):
    name: str = Field(min_length=1, max_length=64, pattern=KB_NAME.pattern)
    description: str | None = Field(default=None, max_length=1000)
    entries: list[KbEntry] = Field(min_length=1, max_length=MAX_ENTRIES)


class KbUpdate(BaseModel):
    description: str | None = Field(default=None, max_length=1000)
    entries: list[KbEntry] = Field(min_length=1, max_length=MAX_ENTRIES)


class KbSummary(BaseModel):
    object: Literal["knowledge_base"] = "knowledge_base"
    name: str
    description: str | None
    entry_count: int
    labels: dict[str, int]
    activation_status: KbStatus
    operation: str
    generated_runtime_hash: str
    active_runtime_hash: str | None
    error: str | None
    created_at: str
    updated_at: str


class KbView(KbSummary):
    entries: list[KbEntry]


class KbList(BaseModel):
    object: Literal["list"] = "list"
    data: list[KbSummary]


class KbMutation(BaseModel):
    status: Literal["pending"] = "pending"
    activation_status: Literal["pending"] = "pending"
    generated_runtime_hash: str
    active_runtime_hash: str | None
    knowledge_base: KbSummary


def summary(base: KnowledgeBase) -> KbSummary:
    return KbSummary(
        name=base.name,
        description=base.description,
        entry_count=len(base.entries),
        labels=dict(sorted(Counter(e.label for e in base.entries).items())),
        activation_status=base.status,
        operation=base.operation,
        generated_runtime_hash=base.content_hash,
        active_runtime_hash=base.active_hash,
        error=base.error,
        created_at=base.created_at,
        updated_at=base.updated_at,
    )


def knowledge_base_routes(mgmt: Management, parts: StorageParts) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add
    _read_routes(parts, add)
    _write_routes(mgmt, parts, add)
    _map_routes(parts, add)
    return router


def _read_routes(parts: StorageParts, add: Callable[..., None]) -> None:
    kbs = parts.knowledge_bases

    async def list_bases() -> JSONResponse:
        return json_response(KbList(data=[summary(b) for b in await kbs.list_bases()]))

    async def get_base(name: str = NAME) -> JSONResponse:
        base = await kbs.get(name)
        return json_response(KbView(**summary(base).model_dump(), entries=base.entries))

    add(PREFIX, list_bases, "GET", "data.read", response_model=KbList, tags=TAGS)
    add(
        PREFIX + "/{name}",
        get_base,
        "GET",
        "data.read",
        response_model=KbView,
        responses=NOT_FOUND,
        tags=TAGS,
    )


def _write_routes(mgmt: Management, parts: StorageParts, add: Callable[..., None]) -> None:
    kbs = parts.knowledge_bases

    async def accepted(request: Request, action: str, call: Awaitable[KnowledgeBase]) -> JSONResponse:
        """202 with the pending base; a refusal (409, 404, 503) is audited with its status."""
        try:
            base = await call
        except MgmtError as exc:
            record_mutation(mgmt, action, request, exc.status, code=exc.code)
            raise
        record_mutation(mgmt, action, request, 202, name=base.name, generated_runtime_hash=base.content_hash)
        body = KbMutation(
            generated_runtime_hash=base.content_hash,
            active_runtime_hash=base.active_hash,
            knowledge_base=summary(base),
        )
        return json_response(body, status=202)

    async def create(request: Request) -> JSONResponse:
        body = await read_model(KbCreate, request)
        return await accepted(request, "kb.create", kbs.create(body.name, body.description, body.entries))

    async def update(request: Request, name: str = NAME) -> JSONResponse:
        body = await read_model(KbUpdate, request)
        return await accepted(request, "kb.update", kbs.update(name, body.description, body.entries))

    async def delete(request: Request, name: str = NAME) -> JSONResponse:
        return await accepted(request, "kb.delete", kbs.delete(name))

    common = {"response_model": KbMutation, "status_code": 202, "tags": TAGS}
    add(
        PREFIX,
        create,
        "POST",
        "config.write",
        responses=MUTATION,
        openapi_extra=json_body(KbCreate),
        **common,
    )
    item = PREFIX + "/{name}"
    changes = {**NOT_FOUND, **MUTATION}
    add(item, update, "PUT", "config.write", responses=changes, openapi_extra=json_body(KbUpdate), **common)
    add(item, delete, "DELETE", "config.write", responses=changes, **common)


def _map_routes(parts: StorageParts, add: Callable[..., None]) -> None:
    kbs = parts.knowledge_bases

    async def map_of(name: str) -> KbMap:
        base = await kbs.get(name)
        vectors = await kbs.vectors(name)
        if base.status != "active" or vectors is None or vectors.content_hash != base.content_hash:
            raise MgmtError(
                409, f"knowledge base {name!r} is {base.status}: no map yet", code="KB_NOT_ACTIVE"
            )
        return parts.kb_maps.get(base, vectors.matrix())

    async def map_metadata(name: str = NAME) -> JSONResponse:
        return json_response((await map_of(name)).metadata())

    async def map_data(name: str = NAME) -> StreamingResponse:
        return StreamingResponse((await map_of(name)).lines(), media_type="application/x-ndjson")

    failures = {**NOT_FOUND, **NOT_ACTIVE}
    add(
        PREFIX + "/{name}/map/metadata",
        map_metadata,
        "GET",
        "data.read",
        response_model=KbMapMetadata,
        responses=failures,
        tags=TAGS,
    )
    ndjson = {
        200: {
            "description": "one point per line",
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        }
    }
    add(
        PREFIX + "/{name}/map/data.ndjson",
        map_data,
        "GET",
        "data.read",
        responses={**failures, **ndjson},
        tags=TAGS,
        response_class=StreamingResponse,
    )
