"""The response-cache storage routes (docs/management-api.md), over the cache admin (app/cache/admin.py):

    GET  /api/v1/storage/response-cache/capabilities, /health, /stats   cache.read
    POST /api/v1/storage/response-cache/invalidate                      cache.invalidate
    POST /api/v1/storage/response-cache/test, /flush                    cache.manage

invalidate: {"scope": {"model", "decision"?} | absent, "dry_run"}; flush: {"scope"?}. A scope
covers every partition of its model (and decision); app/cache/admin.py says how epochs work.
Without a cache admin (no response cache in this process) every route answers 404
FEATURE_DISABLED; a live store that is unavailable answers 503 SERVICE_UNAVAILABLE (health
reports it in its body instead, 200), while the data plane degrades to cache misses."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.cache.admin import (
    CacheCapabilities,
    CacheHealth,
    CacheStatsView,
    FlushRequest,
    FlushResult,
    InvalidateRequest,
    InvalidateResult,
    ProbeResult,
    ResponseCacheAdmin,
    scope_name,
)
from app.cache.base import CacheUnavailable
from app.common.api_docs import json_body
from app.common.mgmt_errors import feature_disabled, unavailable
from app.common.redaction import redact
from app.config.global_config import ResponseCacheConfig
from app.management.routes.common import (
    Registrar,
    Responses,
    json_response,
    mgmt_errors,
    principal_of,
    read_model,
    record_mutation,
)
from app.management.service import Management

PREFIX = "/api/v1/storage/response-cache"
UNAVAILABLE: Responses = mgmt_errors(
    {
        404: "FEATURE_DISABLED: no response cache in this process",
        503: "SERVICE_UNAVAILABLE: the live store is unavailable (health reports it in its body instead)",
    }
)
TAGS: list[str | Enum] = ["storage"]


def storage_routes(mgmt: Management, cache_admin: ResponseCacheAdmin | None) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def capabilities() -> JSONResponse:
        return await answer(admin(cache_admin).capabilities, CacheCapabilities)

    async def health() -> JSONResponse:
        return await answer(admin(cache_admin).health, CacheHealth)

    async def stats(request: Request) -> JSONResponse:
        redacted = not principal_of(request).can("secret_view")
        return await answer(admin(cache_admin).stats, CacheStatsView, redacted=redacted)

    reads: list[tuple[str, Callable[..., Any], type[BaseModel]]] = [
        ("/capabilities", capabilities, CacheCapabilities),
        ("/health", health, CacheHealth),
        ("/stats", stats, CacheStatsView),
    ]
    for path, endpoint, model in reads:
        add(
            PREFIX + path,
            endpoint,
            "GET",
            "cache.read",
            response_model=model,
            responses=UNAVAILABLE,
            tags=TAGS,
        )
    writes: list[tuple[str, Callable[..., Any], type[BaseModel], str, type[BaseModel]]] = [
        ("/test", probe_route(mgmt, cache_admin), ProbeResult, "cache.manage", ResponseCacheConfig),
        (
            "/invalidate",
            invalidate_route(mgmt, cache_admin),
            InvalidateResult,
            "cache.invalidate",
            InvalidateRequest,
        ),
        ("/flush", flush_route(mgmt, cache_admin), FlushResult, "cache.manage", FlushRequest),
    ]
    for path, endpoint, model, permission, request_model in writes:
        add(
            PREFIX + path,
            endpoint,
            "POST",
            permission,
            response_model=model,
            responses=UNAVAILABLE,
            tags=TAGS,
            # A flush without a body flushes the global cache.
            openapi_extra=json_body(request_model, required=request_model is not FlushRequest),
        )
    return router


def probe_route(
    mgmt: Management, cache_admin: ResponseCacheAdmin | None
) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def test(request: Request) -> JSONResponse:
        settings = await read_model(ResponseCacheConfig, request)
        cache = admin(cache_admin)
        response = await answer(lambda: cache.test(settings), ProbeResult)
        record_mutation(mgmt, "cache.test", request, 200, backend_type=settings.backend_type)
        return response

    return test


def invalidate_route(
    mgmt: Management, cache_admin: ResponseCacheAdmin | None
) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def invalidate(request: Request) -> JSONResponse:
        body = await read_model(InvalidateRequest, request)
        cache = admin(cache_admin)
        response = await answer(lambda: cache.invalidate(body.scope, body.dry_run), InvalidateResult)
        if not body.dry_run:
            record_mutation(mgmt, "cache.invalidate", request, 200, scope=scope_name(body.scope))
        return response

    return invalidate


def flush_route(
    mgmt: Management, cache_admin: ResponseCacheAdmin | None
) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def flush(request: Request) -> JSONResponse:
        body = await read_model(FlushRequest, request, optional=True)
        cache = admin(cache_admin)
        response = await answer(lambda: cache.flush(body.scope), FlushResult)
        record_mutation(mgmt, "cache.flush", request, 200, scope=scope_name(body.scope))
        return response

    return flush


def admin(cache_admin: ResponseCacheAdmin | None) -> ResponseCacheAdmin:
    if cache_admin is None:
        raise feature_disabled(
            "the response cache is not available in this process (no ResponseCache deployment)"
        )
    return cache_admin


async def answer(
    call: Callable[[], Awaitable[dict[str, Any]]], model: type[BaseModel], redacted: bool = False
) -> JSONResponse:
    """The admin's answer as `model`; an unavailable live store as 503 (Retry-After)."""
    try:
        result = model.model_validate(await call())
    except CacheUnavailable as exc:
        raise unavailable(f"response cache unavailable: {exc}") from None
    if redacted:  # the stats view names no secret today; a future field must not leak one
        return JSONResponse(redact(result.model_dump(mode="json")))
    return json_response(result)
