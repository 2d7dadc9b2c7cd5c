"""Long-term memories (docs/memories.md: list/delete by scope, read/delete by id), over the
store the `memory` plugin writes (app/pipeline/memory/):

    GET    /api/v1/storage/memories?scope=user:<id>|session:<id>   data.read
    DELETE /api/v1/storage/memories?scope=...                      data.write
    GET    /api/v1/storage/memories/{memory_id}[?scope=...]        data.read
    DELETE /api/v1/storage/memories/{memory_id}[?scope=...]        data.write

A listing names exactly one scope and answers only that scope's memories. Read and delete by
id take the scope too, optionally: given, a memory of another scope is 404 as an unknown one
(a caller that knows only its own scope cannot reach another's memory by guessing ids). No
memory store configured (the management store is not Redis): 404 FEATURE_DISABLED; one that
does not answer: 503."""

from __future__ import annotations

from collections.abc import Awaitable
from enum import Enum
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from app.common.mgmt_errors import feature_disabled, not_found, unavailable
from app.management.routes.common import Registrar, Responses, mgmt_errors, record_mutation
from app.management.service import Management
from app.pipeline.memory.store import (
    MAX_SCOPE_ID,
    Memory,
    MemoryScope,
    MemorySource,
    MemoryStore,
    MemoryStoreUnavailable,
)
from app.storage.parts import StorageParts

PREFIX = "/api/v1/storage/memories"
TAGS: list[str | Enum] = ["storage"]
UNAVAILABLE: Responses = mgmt_errors({503: "SERVICE_UNAVAILABLE: the memory store does not answer"})
# The memories live on the management store's Redis (app/storage/memories.py).
NO_STORE = "memories are not enabled: the memory store needs the management store on Redis (SVC_SR_MANAGEMENT_STORE_URL)"
# the kind, then an id of 1 to MAX_SCOPE_ID characters that does not start with a space
SCOPE_PATTERN = rf"^(user|session):\S.{{0,{MAX_SCOPE_ID - 1}}}$"
UNKNOWN: Responses = mgmt_errors(
    {404: "NOT_FOUND: no such memory (in this scope); FEATURE_DISABLED: no memory store configured"}
)
DISABLED: Responses = mgmt_errors({404: "FEATURE_DISABLED: no memory store configured"})
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


def _scope(value: str | None) -> MemoryScope | None:
    """`user:<id>` or `session:<id>` (the Query pattern admits nothing else)."""
    if value is None:
        return None
    kind, _, scope_id = value.partition(":")
    return MemoryScope(kind=kind, id=scope_id)  # the Query pattern checked the kind


async def _answer(call: Awaitable[T]) -> T:
    try:
        return await call
    except MemoryStoreUnavailable as exc:
        raise unavailable(f"memory store unavailable: {exc}") from None


def memory_routes(mgmt: Management, parts: StorageParts) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add
    described = "the scope: user:<id> or session:<id>"
    scope_required = Query(..., pattern=SCOPE_PATTERN, description=described)
    scope_optional = Query(
        None, pattern=SCOPE_PATTERN, description=described + "; another scope's memory is 404"
    )

    def store() -> MemoryStore:
        if parts.memories is None:
            raise feature_disabled(NO_STORE)
        return parts.memories

    async def list_memories(
        scope: str = scope_required,
        limit: int = Query(100, ge=1, le=1000),
    ) -> MemoryList:
        named = _scope(scope)
        assert named is not None
        kept = await _answer(store().list_scope(named))
        newest = [view(m) for m in reversed(kept)][:limit]
        return MemoryList(scope=named, data=newest, total=len(kept))

    async def delete_scope(
        request: Request,
        scope: str = scope_required,
    ) -> ScopeDeleted:
        named = _scope(scope)
        assert named is not None
        deleted = await _answer(store().delete_scope(named))
        record_mutation(mgmt, "memory.delete_scope", request, 200, scope=named.kind, deleted=deleted)
        return ScopeDeleted(scope=named, deleted=deleted)

    async def _owned(memory_id: str, value: str | None) -> Memory:
        scope = _scope(value)
        found = await _answer(store().get(memory_id))
        if found is None or (scope is not None and found.scope != scope):
            raise not_found(f"no memory {memory_id!r}" + (" in this scope" if scope is not None else ""))
        return found

    async def get_memory(
        memory_id: str,
        scope: str | None = scope_optional,
    ) -> MemoryView:
        return view(await _owned(memory_id, scope))

    async def delete_memory(
        request: Request,
        memory_id: str,
        scope: str | None = scope_optional,
    ) -> MemoryDeleted:
        found = await _owned(memory_id, scope)
        if await _answer(store().delete(found.id)) is None:
            raise not_found(f"no memory {memory_id!r}")  # deleted meanwhile
        record_mutation(mgmt, "memory.delete", request, 200, scope=found.scope.kind)
        return MemoryDeleted(id=found.id)

    routes: list[tuple[str, Any, str, str, type[BaseModel], Responses]] = [
        ("", list_memories, "GET", "data.read", MemoryList, {**UNAVAILABLE, **DISABLED}),
        ("", delete_scope, "DELETE", "data.write", ScopeDeleted, {**UNAVAILABLE, **DISABLED}),
        ("/{memory_id}", get_memory, "GET", "data.read", MemoryView, {**UNAVAILABLE, **UNKNOWN}),
        ("/{memory_id}", delete_memory, "DELETE", "data.write", MemoryDeleted, {**UNAVAILABLE, **UNKNOWN}),
    ]
    for path, endpoint, method, permission, model, responses in routes:
        add(PREFIX + path, endpoint, method, permission, response_model=model, responses=responses, tags=TAGS)
    return router
