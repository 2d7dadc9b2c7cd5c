"""The Ingress ASGI application: data plane + system routes, built without Ray."""

from __future__ import annotations

from fastapi import FastAPI

from app.api.dataplane import ConfigView, DataPlane, RouterClient, dataplane_router
from app.api.diagnostics import ClassifierBackend, Diagnostics, diagnostics_router
from app.api.errors import BodySizeLimitMiddleware, install_error_handlers
from app.config.models import RouterConfig
from app.upstream.client import UpstreamClient


class StaticConfigView:
    """The config the Ingress answers /v1/models from; swapped on hot reload."""

    def __init__(self, config: RouterConfig) -> None:
        self._config = config

    def current(self) -> RouterConfig:
        return self._config

    def update(self, config: RouterConfig) -> None:
        self._config = config


def create_app(
    router: RouterClient, upstream: UpstreamClient, config: ConfigView, classifiers: ClassifierBackend | None = None
) -> FastAPI:
    """`classifiers`: the models behind the classification diagnostics (None: they answer 503)."""
    app = FastAPI(title="svc-sr", version="0.1.0")
    install_error_handlers(app)
    plane = DataPlane(router, upstream, config)
    app.include_router(dataplane_router(plane))
    app.include_router(diagnostics_router(Diagnostics(classifiers, config)))

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    max_bytes = config.current().global_.services.data_plane.max_body_bytes
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_bytes)
    app.state.plane = plane
    return app
