"""The plugins API (docs/plugins.md): GET /api/v1/plugins, /api/v1/plugins/{type},
/api/v1/plugins/{type}/bindings (config.read) and POST /api/v1/plugins/{type}/preview.

The preview's permission depends on the type (docs/management-api.md "Authentication"): config.read for
tool-policy and the other configuration previews, data.read for RAG previews (they show
documents), classify.invoke for guard probes (they call detectors). The route itself takes
any valid token and checks that permission once the type is known.
"""

from __future__ import annotations

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse

from app.api.parts import IngressParts
from app.api.plugins.plugin_bindings import bindings
from app.api.plugins.plugin_previews import run_preview
from app.api.plugins.plugin_schemas import (
    PluginBindingList,
    PluginDetail,
    PluginList,
    PluginPreviewRequest,
    PluginPreviewResponse,
)
from app.api.plugins.plugins_registry import GUARD_TYPES, descriptors, detail, require_known
from app.api.plugins.rag_probe import probe_kbs
from app.common.api_docs import json_body
from app.common.mgmt_errors import MgmtError
from app.management.auth import AuthError
from app.management.routes.common import Registrar, mgmt_errors, principal_of, read_model, record_denial
from app.management.service import Management
from app.pipeline.signals.kb import KnowledgeBaseFeed

TYPE = Path(min_length=1, max_length=64, description="plugin type, e.g. system_prompt, tool_selection")
NOT_FOUND = mgmt_errors({404: "NOT_FOUND / RECIPE_NOT_FOUND: unknown plugin type, recipe or decision"})


def preview_permission(plugin_type: str, mode: str) -> str:
    if plugin_type == "rag":
        return "data.read"
    if plugin_type in GUARD_TYPES and mode == "probe":
        return "classify.invoke"
    return "config.read"


def plugin_routes(mgmt: Management, parts: IngressParts) -> APIRouter:
    # The rag probe's knowledge bases: those the kb signal scores, read from the management
    # store (one feed for this router: a base is re-read only when the store changed).
    storage = parts.storage
    kb_feed = (
        KnowledgeBaseFeed(storage.knowledge_bases.store, refresh_s=0.0) if storage.knowledge_bases else None
    )
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def list_plugins() -> PluginList:
        return PluginList(plugins=descriptors())

    async def get_plugin(plugin_type: str = TYPE) -> PluginDetail:
        return detail(require_known(plugin_type))

    async def get_bindings(
        plugin_type: str = TYPE,
        recipe: str | None = Query(default=None, min_length=1, max_length=128),
        decision: str | None = Query(default=None, min_length=1),
    ) -> PluginBindingList:
        return bindings(mgmt.config, require_known(plugin_type), recipe, decision)

    async def preview(request: Request, plugin_type: str = TYPE) -> JSONResponse:
        require_known(plugin_type)
        body = await read_model(PluginPreviewRequest, request)
        permission = preview_permission(plugin_type, body.mode)
        try:
            mgmt.authenticator.authorize(principal_of(request), permission)
        except AuthError as exc:
            record_denial(mgmt, request, exc)
            raise MgmtError(exc.status, exc.message, code=exc.code) from None
        # The Router's answer checks (the data plane's RouterClient; a local pipeline in tests).
        checker = getattr(mgmt.previewer, "check_answer", None)
        retrieve = storage.storage.retrieve if storage.storage is not None else None
        # the router's encoder: the Ingress's, else the one that embeds the bases' entries
        kbs = probe_kbs(kb_feed, parts.embed or storage.knowledge_bases.embed)
        result = await run_preview(plugin_type, body, mgmt.config, parts.embed, checker, retrieve, kbs)
        return JSONResponse(result.model_dump(mode="json", exclude_none=True))

    add(
        "/api/v1/plugins",
        list_plugins,
        "GET",
        "config.read",
        response_model=PluginList,
        summary="every plugin type: phase, applied, schema URL, bindings URL, operations",
    )
    add(
        "/api/v1/plugins/{plugin_type}",
        get_plugin,
        "GET",
        "config.read",
        response_model=PluginDetail,
        responses=NOT_FOUND,
        summary="one plugin type's descriptor with its configuration's JSON schema",
    )
    add(
        "/api/v1/plugins/{plugin_type}/bindings",
        get_bindings,
        "GET",
        "config.read",
        response_model=PluginBindingList,
        responses=NOT_FOUND,
        summary="decisions of the active configuration listing the plugin (configuration only)",
    )
    add(
        "/api/v1/plugins/{plugin_type}/preview",
        preview,
        "POST",
        None,
        "sensitive",
        response_model=PluginPreviewResponse,
        responses=mgmt_errors(
            {
                404: "NOT_FOUND / RECIPE_NOT_FOUND: unknown type, or a binding that does not exist",
                501: "NOT_IMPLEMENTED: this type's preview is not built yet",
                503: "SERVICE_UNAVAILABLE / MODEL_NOT_LOADED: what a probe needs is not available",
            }
        ),
        summary="what the plugin would do to a sample request (nothing persisted); mode probe calls models",
        openapi_extra=json_body(PluginPreviewRequest),
    )
    return router
