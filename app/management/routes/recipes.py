"""Recipes (docs/management-api.md): GET /api/v1/config/recipes, POST .../recipes/validate (config.read),
GET|PUT|DELETE .../recipes/{name} (PUT and DELETE: config.write, If-Match required).

A PUT or DELETE is one configuration mutation through config_writes.mutate: the same
If-Match, version history, audit entry (`recipe.put`, `recipe.delete`), activation and hot
reload as PUT /api/v1/config; the recipe edit (app/management/recipes.py) is applied to the
persisted document inside that path's lock."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from app.common.api_docs import json_body
from app.common.mgmt_errors import MgmtError
from app.management.documents import DocumentRejected, check_document, etag_of, restart_required
from app.management.recipes import (
    RecipeBody,
    RecipeList,
    RecipeValidateRequest,
    RecipeValidateResponse,
    RecipeView,
    entrypoint_views,
    recipe_not_found,
    recipe_view,
    recipe_views,
    refusal_reason,
    with_recipe,
    without_recipe,
)
from app.management.routes.common import (
    Registrar,
    json_response,
    mgmt_errors,
    principal_of,
    read_model,
    reasons_of,
    record_mutation,
)
from app.management.routes.config import checked
from app.management.routes.config_writes import (
    MUTATION_RESPONSES,
    UNDOCUMENTED,
    mutate,
    require_if_match,
    with_if_match,
)
from app.management.schemas import ReasonOut
from app.management.service import Management

NAME = Path(min_length=1, max_length=128, description="recipe name; `default` is the top-level routing")
NOT_FOUND = mgmt_errors({404: "RECIPE_NOT_FOUND: no recipe of that name"})


def recipe_routes(mgmt: Management) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def list_recipes(request: Request) -> JSONResponse:
        document = mgmt.store.document
        secrets = principal_of(request).can("secret_view")
        body = RecipeList(
            recipes=recipe_views(document, secrets),
            entrypoints=entrypoint_views(document),
            etag=mgmt.activation.etag,
        )
        return json_response(body, headers={"ETag": body.etag})

    async def get_recipe(request: Request, name: str = NAME) -> JSONResponse:
        document = mgmt.store.document
        view = recipe_view(document, name, principal_of(request).can("secret_view"))
        if view is None:
            raise recipe_not_found(name, document)
        return json_response(view, headers={"ETag": mgmt.activation.etag})

    async def put_recipe(
        request: Request, name: str = NAME, if_match: str | None = UNDOCUMENTED
    ) -> JSONResponse:
        require_if_match(mgmt, request, "recipe.put", if_match)
        try:
            body = await read_model(RecipeBody, request)
        except MgmtError:
            record_mutation(mgmt, "recipe.put", request, 400)
            raise
        return await mutate(
            mgmt,
            request,
            "recipe.put",
            "api.recipe",
            lambda current: check_document(with_recipe(current, name, body)),
            if_match,
        )

    async def delete_recipe(
        request: Request, name: str = NAME, if_match: str | None = UNDOCUMENTED
    ) -> JSONResponse:
        require_if_match(mgmt, request, "recipe.delete", if_match)
        try:  # unknown (404) or referenced (409) before a stale If-Match; again under the write lock
            without_recipe(mgmt.store.document, name)
        except MgmtError as exc:
            record_mutation(mgmt, "recipe.delete", request, exc.status)
            raise
        return await mutate(
            mgmt,
            request,
            "recipe.delete",
            "api.recipe",
            lambda current: check_document(without_recipe(current, name)),
            if_match,
        )

    async def validate(request: Request) -> RecipeValidateResponse:
        body = await read_model(RecipeValidateRequest, request)
        return validate_recipe(mgmt, body, principal_of(request).can("secret_view"))

    add(
        "/api/v1/config/recipes",
        list_recipes,
        "GET",
        "config.read",
        "secret",
        response_model=RecipeList,
        summary="default and named recipes with their entrypoints (ETag for If-Match)",
    )
    add(
        "/api/v1/config/recipes/validate",
        validate,
        "POST",
        "config.read",
        "sensitive",
        response_model=RecipeValidateResponse,
        summary="check a recipe PUT or DELETE against the current document (no write)",
        openapi_extra=json_body(RecipeValidateRequest),
    )
    add(
        "/api/v1/config/recipes/{name}",
        get_recipe,
        "GET",
        "config.read",
        "secret",
        response_model=RecipeView,
        responses=NOT_FOUND,
        summary="one recipe (`default`: the top-level routing)",
    )
    add(
        "/api/v1/config/recipes/{name}",
        put_recipe,
        "PUT",
        "config.write",
        "secret",
        responses=MUTATION_RESPONSES,
        summary="create or replace a recipe (`default` replaces the top-level routing)",
        openapi_extra=with_if_match(json_body(RecipeBody)),
    )
    add(
        "/api/v1/config/recipes/{name}",
        delete_recipe,
        "DELETE",
        "config.write",
        "sensitive",
        responses={
            **MUTATION_RESPONSES,
            **NOT_FOUND,
            **mgmt_errors(
                {
                    409: "RECIPE_IN_USE: an entrypoint routes by it (details.entrypoints); "
                    "RECIPE_RESERVED: `default`; RESTART_REQUIRED"
                }
            ),
        },
        summary="delete a named recipe no entrypoint references",
        openapi_extra=with_if_match({}),
    )
    return router


def validate_recipe(mgmt: Management, body: RecipeValidateRequest, secrets: bool) -> RecipeValidateResponse:
    """The mutation's outcome without writing: refusals and document errors are reasons
    (paths as in the whole document: `recipes[i].routing...`), not HTTP errors."""
    current = mgmt.store.document
    answer = {"name": body.name, "action": body.action, "current_etag": mgmt.activation.etag}
    reasons: list[ReasonOut]
    try:
        if body.recipe is not None:
            edited = with_recipe(current, body.name, body.recipe)
        else:
            edited = without_recipe(current, body.name)
        candidate = checked(edited)
    except MgmtError as exc:
        reasons = [refusal_reason(exc)]
    except DocumentRejected as exc:
        reasons = [ReasonOut.model_validate(r) for r in reasons_of(exc.reasons)]
    else:
        restart = restart_required(mgmt.config, candidate.config)
        return RecipeValidateResponse.model_validate(
            {
                **answer,
                "valid": True,
                "changed": candidate.source_hash != mgmt.store.source_hash,
                "candidate_etag": etag_of(candidate.source_hash),
                "restart_required": bool(restart),
                "reasons": reasons_of(restart),
                "warnings": candidate.warnings,
                "recipe": recipe_view(candidate.document, body.name, secrets) if body.recipe else None,
            }
        )
    return RecipeValidateResponse.model_validate(
        {**answer, "valid": False, "changed": False, "reasons": reasons}
    )
