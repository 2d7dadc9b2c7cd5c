"""The Ingress ASGI application: data plane + system routes, built without Ray."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI

from app.api.dataplane import ConfigView, DataPlane, dataplane_router
from app.api.decisions import DecisionSource, NoDecisionSource, decisions_router
from app.api.diagnostics import diagnostics_router
from app.api.diagnostics_service import ClassifierSource, Diagnostics
from app.api.errors import BodySizeLimitMiddleware, install_error_handlers
from app.api.key_access import caller
from app.api.model_diagnostics import model_diagnostics_router
from app.api.parts import IngressParts
from app.api.rate_limit import RateLimiter
from app.api.responses_store import ResponseStoreService, responses_store_router
from app.config.document import RouterConfig
from app.exchange.exchange import RouterClient
from app.exchange.responses.images import ImageFile, ImageStoreDown, ResolveImageFile, StoredImages
from app.keys.gate import key_gate
from app.keys.records import KeyStore
from app.storage.parts import StorageParts
from app.upstream.client import UpstreamClient

if TYPE_CHECKING:
    from app.management.service import Management


class StaticConfigView:
    """The config the Ingress answers /v1/models from; swapped on hot reload."""

    def __init__(self, config: RouterConfig) -> None:
        self._config = config

    def current(self) -> RouterConfig:
        return self._config

    def update(self, config: RouterConfig) -> None:
        self._config = config


def management_images(parts: StorageParts) -> ResolveImageFile:
    """Responses input_image file ids read from the Ingress's files store (the one behind
    /api/v1/storage/files). Without one (storage disabled, or its directory unusable) they answer
    503 file_store_unavailable, as the files routes do."""

    async def resolve(file_id: str) -> ImageFile | None:
        storage = parts.storage
        if storage is None:
            raise ImageStoreDown("no files store in this process (global.stores.vector_store)")
        return await StoredImages(storage.files)(file_id)

    return resolve


def create_app(
    router: RouterClient,
    upstream: UpstreamClient,
    config: ConfigView,
    classifiers: ClassifierSource | None = None,
    management: Management | None = None,
    decisions: DecisionSource | None = None,
    parts: IngressParts | None = None,
) -> FastAPI:
    """`classifiers`: the models behind the classification diagnostics (None: they answer 503).
    `management`: the management API state (None: an in-memory one over `config`, whose
    mutations only update `config`; routing preview through `router` when it has `preview`).
    `decisions`: the decision model behind POST /v1/decisions, /v1/systemone and GET
    /v1/systemone/models (None: they answer 503 not_ready). `parts`: the wings beside the
    management API (storage, replays and outcomes, Elo ratings, the response cache admin, the
    data plane's shared stores; None: each in this process's memory, or absent: their routes 503)."""
    from app.api.routes import wing_routes
    from app.management.api import install
    from app.management.routes.common import route_guard
    from app.management.service import Management

    # /openapi.json and /docs are served by the management API (OpenAPI 3.0, narrowable, authenticated).
    app = FastAPI(title="svc-sr", version="0.1.0", openapi_url=None, docs_url=None, redoc_url=None)
    install_error_handlers(app)
    if management is None:
        # Duck-typed on purpose: any view with update(), any router with preview() (the pipeline).
        view: Any = config if hasattr(config, "update") else None
        previewer: Any = router if hasattr(router, "preview") else None
        management = Management(config.current(), config_view=view, previewer=previewer)
    parts = parts if parts is not None else IngressParts()
    # The Responses store and the rate-limit buckets live where the management state lives.
    responses = ResponseStoreService(config, parts.data_plane.responses)
    limited = [Depends(RateLimiter(config, parts.data_plane.rate_buckets))]
    plane = DataPlane(router, upstream, config, responses=responses, images=management_images(parts.storage))
    stores = parts.data_plane
    plane.keys = parts.keys = key_gate(
        stores.keys or KeyStore(),
        config.current,
        lambda: plane.metrics.recorder,
        stores.spend,
        stores.rate_buckets,
    )
    # The data plane (chat, responses, /v1/models) is not behind management auth: listeners own its access.
    key = caller(plane.keys)  # every data-plane route asks the gate (docs/security.md)
    app.include_router(dataplane_router(plane, key), dependencies=limited)
    app.include_router(responses_store_router(responses, key), dependencies=limited)
    # The native decision API (docs/model-runtime.md), like the data plane not behind management auth.
    app.include_router(
        decisions_router(
            decisions or NoDecisionSource(),
            max_body_bytes=config.current().global_.services.data_plane.max_body_bytes,
            max_json_depth=config.current().global_.services.data_plane.max_json_depth,
            caller=key,
        )
    )
    diagnostics = Diagnostics(classifiers, config)
    if parts.embed is None and classifiers is not None:
        parts.embed = diagnostics.embed  # plugin probes (tool_selection) use the same encoder
    for routes in (diagnostics_router(diagnostics), model_diagnostics_router(diagnostics)):
        app.include_router(
            routes, dependencies=[Depends(route_guard(management, "classify.invoke", "sensitive"))]
        )
    install(app, management, wing_routes(management, parts))

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    max_bytes = config.current().global_.services.data_plane.max_body_bytes
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_bytes)
    app.state.plane = plane
    # The JSON nesting limit of every body a route reads (app.management.routes.common.read_model).
    app.state.max_json_depth = lambda: config.current().global_.services.data_plane.max_json_depth
    return app
