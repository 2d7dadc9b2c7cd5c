"""The `context_compression` plugin's own routes (docs/context-compression.md; app/api/plugins/compression.py):

    GET  /api/v1/plugins/context_compression/capabilities       config.read
    GET  /api/v1/plugins/context_compression/health             config.read
    POST /api/v1/plugins/context_compression/preview            config.read
    GET  /api/v1/observability/plugins/context_compression/stats  observability.read

preview: {messages, configuration | binding {recipe, decision}, mode}: nothing is persisted and
no backend is called in either mode. Register these before a generic /api/v1/plugins/{type}
route family so the literal paths win."""

from __future__ import annotations

import asyncio
from enum import Enum

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.plugins import compression
from app.api.routes.replays import METRICS_RESPONSES, read_metrics
from app.common.api_docs import json_body
from app.management.routes.common import Registrar, json_response, mgmt_errors, read_model
from app.management.service import Management
from app.replays.parts import ReplayParts

PREFIX = "/api/v1/plugins/context_compression"
STATS_PATH = "/api/v1/observability/plugins/context_compression/stats"
TAGS: list[str | Enum] = ["plugins"]


def compression_routes(mgmt: Management, replays: ReplayParts) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def capabilities() -> compression.Capabilities:
        return compression.capabilities()

    async def health() -> compression.Health:
        return await asyncio.to_thread(compression.health, mgmt.config)

    async def preview(request: Request) -> JSONResponse:
        body = await read_model(compression.PreviewRequest, request)
        config = mgmt.config
        # tokenizing thousands of messages is CPU work: off the event loop
        answer = await asyncio.to_thread(compression.preview, config, body)
        return json_response(answer)

    async def stats() -> compression.Stats:
        return compression.stats(await read_metrics(replays))

    add(
        PREFIX + "/capabilities",
        capabilities,
        "GET",
        "config.read",
        response_model=compression.Capabilities,
        tags=TAGS,
        summary="context_compression: strategies, tokenizer, limits",
    )
    add(
        PREFIX + "/health",
        health,
        "GET",
        "config.read",
        response_model=compression.Health,
        tags=TAGS,
        summary="context_compression: tokenizer loaded, active bindings",
    )
    add(
        PREFIX + "/preview",
        preview,
        "POST",
        "config.read",
        response_model=compression.PreviewAnswer,
        responses=mgmt_errors({404: "NOT_FOUND: the binding's recipe, decision or plugin is not configured"}),
        tags=TAGS,
        summary="context_compression: retained and dropped turns, budgets, tokens (nothing persisted)",
        openapi_extra=json_body(compression.PreviewRequest),
    )
    add(
        STATS_PATH,
        stats,
        "GET",
        "observability.read",
        response_model=compression.Stats,
        responses=METRICS_RESPONSES,
        tags=TAGS,
        summary="context_compression: redacted statistics summed over every replica",
    )
    return router
