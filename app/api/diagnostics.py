"""Classification diagnostics: intent (domain), PII and jailbreak classifiers over HTTP.

Routes (spec 01 "Routing and diagnostics" and the older `/api/v1/classify/*` contract):

    POST /api/v1/diagnostics/classify/{intent,pii,security,fact-check,user-feedback,combined,batch}
    POST /api/v1/classify/{intent,pii,security,batch}     older paths, same shapes
    POST /api/v1/classify/combined                        501 NOT_IMPLEMENTED (older contract)

Bodies are `app.api.classify_schemas`. Errors use the management body
`{error: {code, message, timestamp}}`: 400 INVALID_INPUT and TEXT_TOO_LONG
(`diagnostics_requests.py`), 408 TIMEOUT_ERROR, 503 MODEL_NOT_LOADED, 500
CLASSIFICATION_ERROR / UNIFIED_CLASSIFICATION_ERROR (`diagnostics_service.py`, where the
`Diagnostics` answer each route). No route calls a generation backend.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from app.api.classify_schemas import (
    BatchRequest,
    BatchResponse,
    CombinedRequest,
    CombinedResponse,
    IntentRequest,
    IntentResponse,
    PIIRequest,
    PIIResponse,
    SecurityRequest,
    SecurityResponse,
)
from app.api.diagnostics_feedback import (
    FactCheckRequest,
    FactCheckResponse,
    FeedbackDiagnostics,
    UserFeedbackRequest,
    UserFeedbackResponse,
)
from app.api.diagnostics_requests import ManagementError, parse
from app.api.diagnostics_service import Diagnostics
from app.common.api_docs import BODY_TOO_LARGE, Responses, errors, json_body
from app.common.mgmt_errors import MgmtErrorBody
from app.management.routes.common import json_depth_limit

GUARDED = errors(MgmtErrorBody, {401: "missing or invalid bearer token", 403: "classify.invoke missing"})
FAILURES = {
    **GUARDED,
    **BODY_TOO_LARGE,
    **errors(
        MgmtErrorBody,
        {
            400: "INVALID_INPUT (malformed body, empty text, batch over max_batch_size) or TEXT_TOO_LONG",
            408: "TIMEOUT_ERROR: the model call took over 2 minutes",
            500: "CLASSIFICATION_ERROR / UNIFIED_CLASSIFICATION_ERROR: inference failed",
            503: "MODEL_NOT_LOADED: the classifier is not available",
        },
    ),
}

DIAGNOSTICS_PREFIX = "/api/v1/diagnostics/classify"
LEGACY_PREFIX = "/api/v1/classify"


def post_route(
    router: APIRouter,
    path: str,
    model: type[BaseModel],
    handler: Callable[[Any], Awaitable[BaseModel]],
    response_model: type[BaseModel],
    responses: Responses = FAILURES,
) -> None:
    """POST `path`: the body parsed as `model` (400 in the management body when it is not),
    `handler`'s answer as JSON, a ManagementError as its own status and body."""

    async def endpoint(request: Request) -> Response:
        try:
            body = parse(model, await request.body(), json_depth_limit(request))
            result = await handler(body)
        except ManagementError as exc:
            return exc.to_response()
        return JSONResponse(result.model_dump(mode="json"))

    router.add_api_route(
        path,
        endpoint,
        methods=["POST"],
        response_model=response_model,
        name=path.strip("/").replace("/", "_"),
        openapi_extra=json_body(model),
        responses=responses,
    )


def diagnostics_router(diagnostics: Diagnostics) -> APIRouter:
    router = APIRouter(tags=["diagnostics"])

    def route(
        path: str,
        model: type[BaseModel],
        handler: Callable[[Any], Awaitable[BaseModel]],
        response_model: type[BaseModel],
    ) -> None:
        post_route(router, path, model, handler, response_model)

    for prefix in (DIAGNOSTICS_PREFIX, LEGACY_PREFIX):
        route(f"{prefix}/intent", IntentRequest, diagnostics.intent, IntentResponse)
        route(f"{prefix}/pii", PIIRequest, diagnostics.pii, PIIResponse)
        route(f"{prefix}/security", SecurityRequest, diagnostics.security, SecurityResponse)
        route(f"{prefix}/batch", BatchRequest, diagnostics.batch, BatchResponse)
    route(f"{DIAGNOSTICS_PREFIX}/combined", CombinedRequest, diagnostics.combined, CombinedResponse)
    feedback = FeedbackDiagnostics(diagnostics)
    route(f"{DIAGNOSTICS_PREFIX}/fact-check", FactCheckRequest, feedback.fact_check, FactCheckResponse)
    route(
        f"{DIAGNOSTICS_PREFIX}/user-feedback",
        UserFeedbackRequest,
        feedback.user_feedback,
        UserFeedbackResponse,
    )

    @router.post(
        f"{LEGACY_PREFIX}/combined",
        responses={**GUARDED, **errors(MgmtErrorBody, {501: "NOT_IMPLEMENTED on the older path"})},
    )
    async def legacy_combined() -> Response:
        return ManagementError(
            501,
            "NOT_IMPLEMENTED",
            f"combined classification is not implemented on the older path; use POST {DIAGNOSTICS_PREFIX}/combined",
        ).to_response()

    return router
