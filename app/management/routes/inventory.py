"""Inventory routes (inventory.read): task bindings, classifier configuration, embedding
models, model deployments; and the older /info/* and /metrics/classification paths."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.common.mgmt_errors import not_implemented
from app.common.redaction import redact
from app.management.inventory import classifier_view, legacy_info_classifier, legacy_info_models, system_info
from app.management.routes.common import Registrar, mgmt_errors, principal_of
from app.management.service import Management


def inventory_routes(mgmt: Management) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def inv_models() -> JSONResponse:
        models = await mgmt.inventory.models()
        gpu = await mgmt.inventory.gpu_available()
        return JSONResponse({"models": models, "system": system_info(gpu)})

    async def inv_classifier(request: Request) -> JSONResponse:
        view = classifier_view(mgmt.config)
        return JSONResponse(view if principal_of(request).can("secret_view") else redact(view))

    async def inv_embeddings() -> JSONResponse:
        return JSONResponse({"models": await mgmt.inventory.embedding_models()})

    async def inv_runtime() -> JSONResponse:
        return JSONResponse({"deployments": await mgmt.inventory.model_runtime()})

    add("/api/v1/inventory/models", inv_models, "GET", "inventory.read", summary="prepared task bindings")
    add(
        "/api/v1/inventory/classifier",
        inv_classifier,
        "GET",
        "inventory.read",
        "sensitive",
        summary="classifier configuration",
    )
    add(
        "/api/v1/inventory/embedding-models",
        inv_embeddings,
        "GET",
        "inventory.read",
        summary="embedding models",
    )
    add(
        "/api/v1/inventory/model-runtime",
        inv_runtime,
        "GET",
        "inventory.read",
        summary="model deployments: process, readiness, cards",
    )
    return router


def older_info_routes(mgmt: Management) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def info_models() -> JSONResponse:
        models = await mgmt.inventory.models()
        gpu = await mgmt.inventory.gpu_available()
        return JSONResponse(legacy_info_models(models, mgmt.config, gpu))

    async def info_classifier() -> JSONResponse:
        return JSONResponse(legacy_info_classifier(mgmt.config))

    async def classification_metrics() -> Response:
        raise not_implemented(
            "classification metrics are not implemented on the older path; "
            "see GET /metrics on the metrics port"
        )

    add(
        "/info/models",
        info_models,
        "GET",
        "inventory.read",
        summary="older model info",
        tags=["older"],
        deprecated=True,
    )
    add(
        "/info/classifier",
        info_classifier,
        "GET",
        "inventory.read",
        summary="older classifier info",
        tags=["older"],
        deprecated=True,
    )
    add(
        "/metrics/classification",
        classification_metrics,
        "GET",
        "inventory.read",
        tags=["older"],
        responses=mgmt_errors({501: "NOT_IMPLEMENTED on the older path (see GET /metrics on :9190)"}),
        deprecated=True,
    )
    return router
