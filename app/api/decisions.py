"""The router frontend's native decision API (docs/model-runtime.md): POST /v1/decisions and /v1/systemone
(identical) and GET /v1/systemone/models, over a `DecisionSource` (the Ingress adapts its
DecisionModel handle or a managed runtime's client; tests pass `LocalDecisionSource`).

Errors use the worker body `{error: {code, message}}` with fixed public words: the
runtime's own message stays private (logged at debug level, never the request text).
429 carries Retry-After: 1, 503 Retry-After: 5; a call over the 30 s budget answers 504
`systemone_deadline_exceeded`. Answers with per-question `invalid_question` are 200s.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.api.key_access import Caller, anyone
from app.common.api_docs import BODY_TOO_LARGE, errors, json_body
from app.common.body_limits import DEFAULT_MAX_DEPTH, JsonRejected, decode_json
from app.common.errors import ErrorBody
from app.runtime.schemas import NotReady, RuntimeFailure
from app.srun.decision_source import DEADLINE_S
from app.srun.questions import DecisionRequest, DecisionResponse
from app.srun.schemas import WorkerCard, WorkerErrorBody, WorkerErrorDetail

log = logging.getLogger("svc_sr.decisions_api")
DEFAULT_MAX_BODY = 8 * 1024 * 1024
PUBLIC_WORDS = {
    400: ("invalid_request", "invalid request"),
    404: ("model_not_found", "model not found"),
    413: ("request_too_large", "request too large"),
    422: ("unsupported_surface", "unsupported surface"),
    429: ("overloaded", "overloaded"),
    503: ("not_ready", "not ready"),
    504: ("systemone_deadline_exceeded", "deadline exceeded"),
}
RETRY_AFTER = {429: "1", 503: "5"}
UNAUTHORIZED = errors(
    ErrorBody,
    {401: "authentication_error (missing_api_key, invalid_api_key): a listener requires API keys"},
)
DECIDE_FAILURES = errors(
    WorkerErrorBody,
    {
        400: "invalid_request: malformed body, or no valid question",
        404: "model_not_found",
        422: "unsupported_surface",
        429: "overloaded (Retry-After: 1)",
        503: "not_ready: no decision model is deployed or ready (Retry-After: 5)",
        504: "systemone_deadline_exceeded",
    },
)


class NativeModels(BaseModel):
    object: str = "list"
    data: list[WorkerCard]


class DecisionSource(Protocol):
    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        """The wire answer; raises an exception with `.status` (RuntimeFailure, RuntimeCallError)."""
        ...

    async def models(self) -> list[dict[str, Any]]:
        """Cards of the published native models."""
        ...


class LocalDecisionSource:
    """An in-process decision model (no Ray, no worker process)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        return (await self.model.decide(body)).to_wire()

    async def models(self) -> list[dict[str, Any]]:
        return [self.model.card.to_wire()]


class NoDecisionSource:
    """A frontend without a decision model: the native API answers 503 not_ready."""

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        raise NotReady("no decision model is deployed")

    async def models(self) -> list[dict[str, Any]]:
        return []


def _error(status: int) -> JSONResponse:
    status = status if status in PUBLIC_WORDS else 500
    code, words = PUBLIC_WORDS.get(status, ("internal_error", "internal error"))
    headers = {"Retry-After": RETRY_AFTER[status]} if status in RETRY_AFTER else None
    body = WorkerErrorBody(error=WorkerErrorDetail(code=code, message=words))
    return JSONResponse(body.to_wire(), status_code=status, headers=headers)


def decisions_router(
    backend: DecisionSource,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY,
    max_json_depth: int = DEFAULT_MAX_DEPTH,
    deadline_s: float = DEADLINE_S,
    caller: Caller = anyone,
) -> APIRouter:
    """`caller`: the API-key gate (app/api/key_access.py) every route asks first: 401 where a
    listener requires keys (`anyone`: no keys, as a bare test app)."""
    router = APIRouter(tags=["native"])

    async def answer(request: Request) -> JSONResponse:
        await caller(request)
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > max_body_bytes:
                return _error(413)
        try:
            body = decode_json(raw, max_json_depth)
        except JsonRejected:
            return _error(400)
        if not isinstance(body, dict):
            return _error(400)
        try:
            result = await asyncio.wait_for(backend.decide(body), deadline_s)
        except TimeoutError:
            return _error(504)
        except Exception as exc:  # the runtime's message stays private
            status = getattr(exc, "status", 500)
            if not isinstance(exc, RuntimeFailure) and not hasattr(exc, "status"):
                log.exception("decision backend failed")
            else:
                log.debug("decision request failed: %s %s", status, getattr(exc, "code", ""))
            return _error(int(status) if isinstance(status, int) else 500)
        return JSONResponse(result)

    for path in ("/v1/decisions", "/v1/systemone"):
        router.add_api_route(
            path,
            answer,
            methods=["POST"],
            response_model=DecisionResponse,
            responses={**UNAUTHORIZED, **DECIDE_FAILURES, **BODY_TOO_LARGE},
            openapi_extra=json_body(DecisionRequest),
        )

    @router.get(
        "/v1/systemone/models",
        response_model=NativeModels,
        responses={
            **UNAUTHORIZED,
            **errors(WorkerErrorBody, {503: "not_ready: the model list is not available"}),
        },
    )
    async def systemone_models(request: Request) -> JSONResponse:
        await caller(request)
        try:
            cards = await asyncio.wait_for(backend.models(), deadline_s)
        except Exception as exc:
            return _error(
                int(getattr(exc, "status", 503)) if isinstance(getattr(exc, "status", None), int) else 503
            )
        return JSONResponse({"object": "list", "data": cards})

    return router
