"""Long-term memories (spec 1 "Storage": list/delete by scope, read/delete by id), over the
store the `memory` plugin writes (app/pipeline/memory/):

    GET    /api/v1/storage/memories?scope_kind=user|session&scope_id=...   data.read
    DELETE /api/v1/storage/memories?scope_kind=...&scope_id=...           data.write
    GET    /api/v1/storage/memories/{memory_id}[?scope_kind&scope_id]     data.read
    DELETE /api/v1/storage/memories/{memory_id}[?scope_kind&scope_id]     data.write

A listing names exactly one scope and answers only that scope's memories. Read and delete by
id take the scope too, optionally: given, a memory of another scope is 404 as an unknown one
(a caller that knows only its own scope cannot reach another's memory by guessing ids). No
memory store in this process, or one that does not answer: 503."""

from __future__ import annotations

from collections.abc import Awaitable
from enum import Enum
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from app.management.errors import invalid_input, not_found, unavailable
from app.management.routes.common import Registrar, Responses, mgmt_errors, record_mutation
from app.management.service import Management
from app.pipeline.memory.store import (
    MAX_SCOPE_ID,
    Memory,
    MemoryScope,
    MemorySource,
    MemoryStore,
    MemoryStoreUnavailable,
    ScopeKind,
)

PREFIX = "/api/v1/storage/memories"
TAGS: list[str | Enum] = ["storage"]
UNAVAILABLE: Responses = mgmt_errors({503: "no memory store in this process, or it is unavailable"})
UNKNOWN: Responses = mgmt_errors({404: "NOT_FOUND: no such memory (in this scope)"})
T = TypeVar("T")


class MemoryView(BaseModel):
    """A memory as the API shows it (its embedding stays in the store)."""

    id: str
    object: Literal["memory"] = "memory"
    scope: MemoryScope
    text: str
    category: str
    created_at: str
    last_used_at: str | None = None
    use_count: int = 0
    source: MemorySource


class MemoryList(BaseModel):
    object: Literal["list"] = "list"
    scope: MemoryScope
    data: list[MemoryView]
    total: int = Field(description="memories the scope keeps (data holds at most `limit`, newest first)")


class ScopeDeleted(BaseModel):
    scope: MemoryScope
    deleted: int


class MemoryDeleted(BaseModel):
    id: str
    object: Literal["memory.deleted"] = "memory.deleted"
    deleted: bool = True


def view(memory: Memory) -> MemoryView:
    return MemoryView.model_validate(memory.model_dump(exclude={"vector"}))


def _scope(kind: ScopeKind | None, scope_id: str | None, required: bool) -> MemoryScope | None:
    if kind is None and scope_id is None and not required:
        return None
    if kind is None or scope_id is None or not scope_id.strip():
        raise invalid_input("scope_kind and scope_id name the scope together (both required)")
    return MemoryScope(kind=kind, id=scope_id.strip())


async def _answer(call: Awaitable[T]) -> T:
    try:
        return await call
    except MemoryStoreUnavailable as exc:
        raise unavailable(f"memory store unavailable: {exc}") from None


def memory_routes(mgmt: Management) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add
    kind_q = Query(None, description="user or session")
    kind_required = Query(..., description="user or session")
    id_q = Query(None, max_length=MAX_SCOPE_ID)
    id_required = Query(..., min_length=1, max_length=MAX_SCOPE_ID)

    def store() -> MemoryStore:
        if mgmt.memory_store is None:
            raise unavailable("no memory store in this process")
        return mgmt.memory_store

    async def list_memories(
        scope_kind: Literal["user", "session"] = kind_required,
        scope_id: str = id_required,
        limit: int = Query(100, ge=1, le=1000),
    ) -> MemoryList:
        scope = _scope(scope_kind, scope_id, True)
        assert scope is not None
        kept = await _answer(store().list(scope))
        newest = [view(m) for m in reversed(kept)][:limit]
        return MemoryList(scope=scope, data=newest, total=len(kept))

    async def delete_scope(
        request: Request,
        scope_kind: Literal["user", "session"] = kind_required,
        scope_id: str = id_required,
    ) -> ScopeDeleted:
        scope = _scope(scope_kind, scope_id, True)
        assert scope is not None
        deleted = await _answer(store().delete_scope(scope))
        record_mutation(mgmt, "memory.delete_scope", request, 200, scope=scope.kind, deleted=deleted)
        return ScopeDeleted(scope=scope, deleted=deleted)

    async def _owned(memory_id: str, kind: ScopeKind | None, scope_id: str | None) -> Memory:
        scope = _scope(kind, scope_id, False)
        found = await _answer(store().get(memory_id))
        if found is None or (scope is not None and found.scope != scope):
            raise not_found(f"no memory {memory_id!r}" + (" in this scope" if scope is not None else ""))
        return found

    async def get_memory(
        memory_id: str,
        scope_kind: Literal["user", "session"] | None = kind_q,
        scope_id: str | None = id_q,
    ) -> MemoryView:
        return view(await _owned(memory_id, scope_kind, scope_id))

    async def delete_memory(
        request: Request,
        memory_id: str,
        scope_kind: Literal["user", "session"] | None = kind_q,
        scope_id: str | None = id_q,
    ) -> MemoryDeleted:
        found = await _owned(memory_id, scope_kind, scope_id)
        if await _answer(store().delete(found.id)) is None:
            raise not_found(f"no memory {memory_id!r}")  # deleted meanwhile
        record_mutation(mgmt, "memory.delete", request, 200, scope=found.scope.kind)
        return MemoryDeleted(id=found.id)

    routes: list[tuple[str, Any, str, str, type[BaseModel], Responses]] = [
        ("", list_memories, "GET", "data.read", MemoryList, UNAVAILABLE),
        ("", delete_scope, "DELETE", "data.write", ScopeDeleted, UNAVAILABLE),
        ("/{memory_id}", get_memory, "GET", "data.read", MemoryView, {**UNAVAILABLE, **UNKNOWN}),
        ("/{memory_id}", delete_memory, "DELETE", "data.write", MemoryDeleted, {**UNAVAILABLE, **UNKNOWN}),
    ]
    for path, endpoint, method, permission, model, responses in routes:
        add(PREFIX + path, endpoint, method, permission, response_model=model, responses=responses, tags=TAGS)
    return router
