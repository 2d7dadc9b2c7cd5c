"""System routes: /ready, /startup-status, /api/v1/status (ready.read), and discovery
(GET /api/v1), /openapi.json (3.0, narrowable) and /docs (any valid token)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from app.common.mgmt_errors import not_found
from app.management.auth import PERMISSIONS
from app.management.discovery import describe_routes
from app.management.openapi import UnknownOperation, narrow, served
from app.management.routes.common import ERRORS, ManagementRoute, Registrar, json_response, route_guard
from app.management.schemas import Discovery, RouteInfo, StatusDocument
from app.management.service import Management
from app.management.startup import StartupStatus


def system_routes(mgmt: Management) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def ready() -> JSONResponse:
        status = mgmt.startup.status()
        return json_response(status, 200 if status.ready else 503)

    async def startup_status() -> JSONResponse:
        return json_response(mgmt.startup.status(detail=True))

    async def status() -> StatusDocument:
        return await mgmt.status_document()

    add(
        "/ready",
        ready,
        "GET",
        "ready.read",
        response_model=StartupStatus,
        responses={503: {"description": "startup not complete", "model": StartupStatus}},
        summary="readiness",
        tags=["system"],
    )
    add(
        "/startup-status",
        startup_status,
        "GET",
        "ready.read",
        response_model=StartupStatus,
        summary="startup progress",
        tags=["system"],
    )
    add(
        "/api/v1/status",
        status,
        "GET",
        "ready.read",
        response_model=StatusDocument,
        summary="replica-local status",
        tags=["system"],
    )
    return router


def install_discovery(app: FastAPI, mgmt: Management) -> None:
    """GET /api/v1 (in the schema), /openapi.json and /docs (not): they describe `app` itself."""
    any_token = route_guard(mgmt, None, "internal")

    async def discovery() -> Discovery:
        routes = [RouteInfo.model_validate(route) for route in describe_routes(app)]
        return Discovery(
            auth_mode="bearer" if mgmt.authenticator.enabled else "none",
            permissions=PERMISSIONS,
            routes=routes,
        )

    async def openapi(
        path: str | None = Query(None, max_length=512), method: str | None = Query(None, max_length=16)
    ) -> JSONResponse:
        try:
            return JSONResponse(narrow(_openapi_30(app), path, method))
        except UnknownOperation as exc:
            raise not_found(str(exc)) from None

    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} management API")

    for path, endpoint, model in (
        ("/api/v1", discovery, Discovery),
        ("/openapi.json", openapi, None),
        ("/docs", docs, None),
    ):
        app.router.add_api_route(
            path,
            endpoint,
            methods=["GET"],
            dependencies=[Depends(any_token)],
            response_model=model,
            include_in_schema=path == "/api/v1",
            tags=["system"],
            responses=dict(ERRORS),
            route_class_override=ManagementRoute,
        )


def _openapi_30(app: FastAPI) -> dict[str, Any]:
    cached = getattr(app.state, "openapi_30", None)
    if cached is None:
        cached = served(app.openapi())
        app.state.openapi_30 = cached
    return cached
