"""Context recovery (docs/memories.md: "invalidate a trusted recovery scope"), over the memory
store (app/pipeline/memory/recovery.py says what recovery and an invalidation are):

    POST /api/v1/storage/context-recovery/invalidate   cache.invalidate

Body `{scope: "user:<id>"|"session:<id>", dry_run: false, reason?}` (other fields 400). The
scope's mark is written into the memory store (Redis on the Ray graph: every Router replica
recalls from it), so from then on its older memories are never recalled and its older cached
answers never served; nothing is deleted. A dry run reads the counts and writes nothing.
Permission cache.invalidate (the contract's invalidate role, granted to operators): the route
deletes and reads no content, it only stops the router reusing a scope's state, which an
operator must be able to do at once on an incident; deleting memories stays data.write.
No memory store configured: 404 FEATURE_DISABLED; one that does not answer: 503. Audited unless a dry run
(`context_recovery.invalidate`, the scope's kind and generation, never its id)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import Enum

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from app.api.routes.memories import DISABLED as MEMORIES_DISABLED
from app.api.routes.memories import NO_STORE, SCOPE_PATTERN
from app.api.routes.memories import UNAVAILABLE as MEMORIES_UNAVAILABLE
from app.common.api_docs import json_body
from app.common.mgmt_errors import feature_disabled, unavailable
from app.management.routes.common import (
    Registrar,
    Responses,
    json_response,
    read_model,
    record_mutation,
)
from app.management.service import Management
from app.pipeline.memory import recovery
from app.pipeline.memory.store import MemoryScope, MemoryStoreUnavailable
from app.storage.parts import StorageParts

PATH = "/api/v1/storage/context-recovery/invalidate"
TAGS: list[str | Enum] = ["storage"]
UNAVAILABLE: Responses = {**MEMORIES_UNAVAILABLE, **MEMORIES_DISABLED}
MAX_REASON = 500


class InvalidateRecovery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: str = Field(
        pattern=SCOPE_PATTERN, description="user:<id> or session:<id> (the memory plugin's scopes)"
    )
    dry_run: bool = False  # report what it would exclude, write nothing
    reason: str | None = Field(default=None, max_length=MAX_REASON, description="kept on the mark, echoed")


def scope_of(value: str) -> MemoryScope:
    kind, _, scope_id = value.partition(":")  # the pattern checked the kind
    return MemoryScope(kind=kind, id=scope_id)


def context_recovery_routes(mgmt: Management, parts: StorageParts) -> APIRouter:
    router = APIRouter()
    Registrar(router, mgmt).add(
        PATH,
        invalidate_route(mgmt, parts),
        "POST",
        "cache.invalidate",
        response_model=recovery.RecoveryInvalidation,
        responses=UNAVAILABLE,
        tags=TAGS,
        openapi_extra=json_body(InvalidateRecovery),
    )
    return router


def invalidate_route(mgmt: Management, parts: StorageParts) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def invalidate(request: Request) -> JSONResponse:
        body = await read_model(InvalidateRecovery, request)
        scope = scope_of(body.scope)
        if parts.memories is None:
            raise feature_disabled(NO_STORE)
        try:
            result = await recovery.invalidate(
                parts.memories, scope, dry_run=body.dry_run, reason=body.reason
            )
        except MemoryStoreUnavailable as exc:
            raise unavailable(f"memory store unavailable: {exc}") from None
        if not body.dry_run:
            record_mutation(
                mgmt,
                "context_recovery.invalidate",
                request,
                200,
                scope=scope.kind,
                generation=result.generation,
                memories_excluded=result.memories_excluded,
                reason=body.reason,
            )
        return json_response(result)

    return invalidate
