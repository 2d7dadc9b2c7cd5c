"""Model diagnostics routes (spec 01 "Routing and diagnostics"):

    GET  /api/v1/diagnostics/models?recipe=<name>      prepared bindings (`model_bindings`)
    POST /api/v1/diagnostics/models/{embeddings,labels,label-scores,tokens,rerank}
                                                       typed model calls (`model_calls`)
    POST /api/v1/diagnostics/embeddings, /similarity, /similarity/batch
                                                       the router's encoder (`diagnostics_embeddings`)
    POST /api/v1/diagnostics/nli                       premise/hypothesis pair (`diagnostics_nli`)

Errors are the management body: 404 RECIPE_NOT_FOUND / BINDING_NOT_FOUND, 400 INVALID_INPUT
(malformed body, a list over max_batch_size), 400 TEXT_TOO_LONG,
408 TIMEOUT_ERROR, 503 MODEL_NOT_LOADED, 500 CLASSIFICATION_ERROR. No route calls a
generation backend.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from app.api.diagnostics import FAILURES, post_route
from app.api.diagnostics_embeddings import (
    BatchSimilarityRequest,
    BatchSimilarityResponse,
    EmbeddingDiagnostics,
    EmbeddingsRequest,
    EmbeddingsResponse,
    SimilarityRequest,
    SimilarityResponse,
)
from app.api.diagnostics_nli import NLIDiagnostics, NLIRequest, NLIResponse
from app.api.diagnostics_requests import ManagementError
from app.api.diagnostics_service import Diagnostics
from app.api.model_bindings import DEFAULT_RECIPE, BindingList, bindings_of
from app.api.model_calls import (
    LabelScoresRequest,
    LabelScoresResponse,
    LabelsResponse,
    ModelCalls,
    ModelEmbeddingResponse,
    ModelTextRequest,
    RerankRequest,
    RerankResponse,
    TokensResponse,
)
from app.common.api_docs import errors
from app.common.mgmt_errors import MgmtErrorBody
from app.config.recipes import recipe_names

PREFIX = "/api/v1/diagnostics"
NOT_FOUND = errors(
    MgmtErrorBody, {404: "RECIPE_NOT_FOUND / BINDING_NOT_FOUND (unknown, or it answers another task)"}
)
MODEL_FAILURES = {**FAILURES, **NOT_FOUND}


def model_diagnostics_router(diagnostics: Diagnostics) -> APIRouter:
    router = APIRouter(tags=["diagnostics"])

    @router.get(f"{PREFIX}/models", response_model=BindingList, responses=NOT_FOUND)
    async def list_models(recipe: str = DEFAULT_RECIPE) -> Response:
        try:
            bindings = await bindings_of(recipe, recipe_names(diagnostics.config.current()))
        except ManagementError as exc:
            return exc.to_response()
        return JSONResponse(BindingList(recipe=recipe, bindings=bindings).model_dump(mode="json"))

    calls = ModelCalls(diagnostics)
    for path, request, handler, response in (
        ("embeddings", ModelTextRequest, calls.embeddings, ModelEmbeddingResponse),
        ("labels", ModelTextRequest, calls.labels, LabelsResponse),
        ("label-scores", LabelScoresRequest, calls.label_scores, LabelScoresResponse),
        ("tokens", ModelTextRequest, calls.tokens, TokensResponse),
        ("rerank", RerankRequest, calls.rerank, RerankResponse),
    ):
        post_route(router, f"{PREFIX}/models/{path}", request, handler, response, MODEL_FAILURES)

    encoder = EmbeddingDiagnostics(diagnostics)
    post_route(router, f"{PREFIX}/embeddings", EmbeddingsRequest, encoder.embeddings, EmbeddingsResponse)
    post_route(router, f"{PREFIX}/similarity", SimilarityRequest, encoder.similarity, SimilarityResponse)
    post_route(
        router,
        f"{PREFIX}/similarity/batch",
        BatchSimilarityRequest,
        encoder.similarity_batch,
        BatchSimilarityResponse,
    )
    nli = NLIDiagnostics(diagnostics)
    post_route(router, f"{PREFIX}/nli", NLIRequest, nli.nli, NLIResponse, MODEL_FAILURES)
    return router
