"""The management API (docs/management-api.md): one `Management` object holds the state
(service.py), `install(app, management, families)` mounts its routes (routes/) and the wings'
on a FastAPI app.

Routes and the permission each needs (auth mode bearer; with mode none all are open):

    GET  /health                                     public (mounted by create_app)
    GET  /ready, /startup-status, /api/v1/status     ready.read                   routes/system.py
    GET  /api/v1, /openapi.json, /docs               any valid token              routes/system.py
    GET  /api/v1/config[/schema|/versions|/hash]     config.read (secrets need secret_view)  routes/config.py
    POST /api/v1/config/validate, /plan              config.read                  routes/config.py
    PATCH, PUT /api/v1/config; POST .../rollback     config.write (If-Match)      routes/config_writes.py
    GET  /api/v1/config/recipes[/{name}]; POST .../recipes/validate  config.read  routes/recipes.py
    PUT, DELETE /api/v1/config/recipes/{name}        config.write (If-Match)      routes/recipes.py
    GET  /api/v1/observability/audit                 audit.read                   routes/observability.py
    POST /api/v1/routing/preview                     classify.invoke              routes/routing.py
    GET  /api/v1/inventory/*, /info/*                inventory.read               routes/inventory.py

The wings' routes (app/api/routes/, mounted after these by `install(app, management, families)`
with the same guard and audit):

    GET  /api/v1/observability/replays[/aggregate|/{id}]  observability.read (content needs data.read)
    GET  /api/v1/observability/classification-metrics observability.read            routes/replays.py
    POST /api/v1/observability/outcomes              learning.ingest              routes/replays.py
    GET  /api/v1/storage/response-cache/{capabilities,health,stats}  cache.read  routes/storage.py
    POST /api/v1/storage/response-cache/invalidate   cache.invalidate             routes/storage.py
    POST /api/v1/storage/response-cache/{test,flush} cache.manage                 routes/storage.py
    GET  /api/v1/plugins[/{type}[/bindings]]         config.read                  routes/plugins.py
    POST /api/v1/plugins/{type}/preview              by type: config.read, data.read (rag), classify.invoke (guard probes)
    GET  /api/v1/plugins/context_compression/{capabilities,health}; POST .../preview  config.read
    GET  /api/v1/observability/plugins/context_compression/stats  observability.read  routes/compression.py
    GET  /api/v1/storage/knowledge-bases[/{name}[/map/*]]  data.read             routes/knowledge_bases.py
    POST, PUT, DELETE /api/v1/storage/knowledge-bases[/{name}]  config.write      routes/knowledge_bases.py
    GET, DELETE /api/v1/storage/memories[/{id}]      data.read / data.write       routes/memories.py
    POST /api/v1/storage/context-recovery/invalidate  cache.invalidate            routes/context_recovery.py
    /api/v1/storage/files[/{id}[/content]]           data.read / data.write       routes/files.py
    /api/v1/storage/vector-stores[/{id}[/files|/search|/rotate]]  data.read / data.write  routes/vector_stores.py

Every request body and answer is a pydantic model (schemas.py); failures use MgmtError. A
management store that is down or too slow (StoreUnavailable) answers 503 STORE_UNAVAILABLE
with nothing written.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from app.common.mgmt_errors import unavailable
from app.management.routes.config import config_read_routes
from app.management.routes.config_writes import config_write_routes
from app.management.routes.inventory import inventory_routes, older_info_routes
from app.management.routes.observability import audit_routes
from app.management.routes.recipes import recipe_routes
from app.management.routes.routing import routing_routes
from app.management.routes.system import install_discovery, system_routes
from app.management.service import Management
from app.state.shared_store import StoreUnavailable

__all__ = ["install", "management_router"]


def management_router(mgmt: Management) -> APIRouter:
    router = APIRouter()
    for family in (
        system_routes,
        config_read_routes,
        config_write_routes,
        recipe_routes,
        audit_routes,
        routing_routes,
        inventory_routes,
        older_info_routes,
    ):
        router.include_router(family(mgmt))
    return router


def install(app: FastAPI, mgmt: Management, families: Sequence[APIRouter] = ()) -> None:
    """Mount the management routes, then `families` (the wings' management routes, app/api/routes),
    discovery, /openapi.json (3.0, narrowable) and /docs on `app`.

    The app must be created with openapi_url=None and docs_url=None (these routes replace them)."""
    app.include_router(management_router(mgmt))
    for family in families:
        app.include_router(family)
    app.add_exception_handler(StoreUnavailable, _store_unavailable)
    app.state.management = mgmt
    install_discovery(app, mgmt)


async def _store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    error = unavailable(f"{exc}; nothing was written, retry later", code="STORE_UNAVAILABLE")
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)
