"""Model diagnostics routes (spec 01 "Routing and diagnostics"): prepared bindings of a recipe.

    GET /api/v1/diagnostics/models?recipe=<name>   404 RECIPE_NOT_FOUND for a foreign recipe

The binding lookup is `model_bindings`; no route loads a model or calls a generation backend.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from app.api.diagnostics_requests import ManagementError
from app.api.model_bindings import DEFAULT_RECIPE, BindingList, prepared_bindings
from app.common.api_docs import errors
from app.management.errors import MgmtErrorBody


def model_diagnostics_router() -> APIRouter:
    router = APIRouter(tags=["diagnostics"])

    @router.get(
        "/api/v1/diagnostics/models",
        response_model=BindingList,
        responses=errors(MgmtErrorBody, {404: "RECIPE_NOT_FOUND: the recipe does not exist"}),
    )
    async def list_models(recipe: str = DEFAULT_RECIPE) -> Response:
        try:
            bindings = prepared_bindings(recipe)
        except ManagementError as exc:
            return exc.to_response()
        return JSONResponse(BindingList(recipe=recipe, bindings=bindings).model_dump(mode="json"))

    return router
