"""POST /api/v1/routing/preview (classify.invoke): signals, decision and model selection for
a request without calling a backend, within Management.preview_deadline_s."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.common.api_docs import json_body
from app.common.mgmt_errors import MgmtError, unavailable
from app.common.redaction import redact
from app.management.routes.common import Registrar, json_response, mgmt_errors, principal_of, read_model
from app.management.schemas import PreviewRequest, PreviewResponse
from app.management.service import Management
from app.pipeline.phases.parse import SESSION_ID_HEADER

log = logging.getLogger("svc_sr.management")


def routing_routes(mgmt: Management) -> APIRouter:
    router = APIRouter()

    async def preview(request: Request) -> JSONResponse:
        body = await read_model(PreviewRequest, request)
        result = await run_preview(mgmt, body)
        if not principal_of(request).can("secret_view"):
            result = redact(result)
        return json_response(PreviewResponse.model_validate(result))

    Registrar(router, mgmt).add(
        "/api/v1/routing/preview",
        preview,
        "POST",
        "classify.invoke",
        "sensitive",
        response_model=PreviewResponse,
        responses=mgmt_errors(
            {
                400: "INVALID_INPUT: not a chat request, or one the router cannot route",
                404: "INVALID_INPUT: the request names a model that is not configured",
                408: "TIMEOUT_ERROR: over global.services.api.routing_preview's deadline",
                503: "the routing preview is not available in this process",
            }
        ),
        summary="evaluate signals, decision and model selection without calling a backend",
        openapi_extra=json_body(PreviewRequest),
    )
    return router


async def run_preview(mgmt: Management, body: PreviewRequest) -> dict[str, Any]:
    """The previewer's answer, marked as a preview; its failures as management errors."""
    if mgmt.previewer is None:
        raise unavailable("routing preview is not available in this process")
    context = body.preview_context
    request_body = body.model_dump(exclude={"preview_context"}, exclude_none=True)
    headers = dict(context.headers) if context else {}
    if context and context.session_id:
        headers.setdefault(SESSION_ID_HEADER, context.session_id)
    deadline = mgmt.preview_deadline_s
    try:
        result = await asyncio.wait_for(
            mgmt.previewer.preview(request_body, headers, seed=context.seed if context else None), deadline
        )
    except TimeoutError:
        raise MgmtError(
            408, f"routing preview took longer than {deadline:.0f} s", code="TIMEOUT_ERROR"
        ) from None
    except MgmtError:
        raise
    except Exception as exc:
        raise preview_error(exc) from None
    return {
        **result,
        "selection_provenance": result.get("selection_provenance", "preview"),
        "backend_calls": 0,
        "persisted": False,
    }


def preview_error(exc: Exception) -> MgmtError:
    status = getattr(exc, "status", None)
    if isinstance(status, int) and 400 <= status < 500:  # the request itself (unknown model, bad body)
        return MgmtError(status, str(exc), code="INVALID_INPUT")
    log.exception("routing preview failed")
    return MgmtError(500, f"routing preview failed: {type(exc).__name__}", code="PREVIEW_ERROR")
