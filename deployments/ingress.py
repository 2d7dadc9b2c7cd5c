"""Ingress deployment: the FastAPI front door (standalone data plane, system routes)."""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.exceptions import RayTaskError
from ray.serve.handle import DeploymentHandle

from app.api.app import StaticConfigView, create_app
from app.api.errors import SvcError
from app.config.loader import parse_config
from app.pipeline.plan import Accounting, CompletionReport, RoutePlan
from app.upstream.client import UpstreamClient


class HandleRouterClient:
    """Adapts the Router DeploymentHandle to the front door's RouterClient protocol."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle

    async def route(self, body: dict[str, Any], headers: dict[str, str], request_id: str) -> RoutePlan:
        try:
            return await self._handle.route.remote(body, headers, request_id)
        except RayTaskError as exc:
            raise _cause(exc) from None

    async def complete(self, plan: RoutePlan, report: CompletionReport) -> Accounting:
        try:
            return await self._handle.complete.remote(plan, report)
        except RayTaskError as exc:
            raise _cause(exc) from None


def _cause(exc: RayTaskError) -> BaseException:
    """A routing error raised in the Router replica reaches the client as itself (its
    status and error body), not as an opaque Ray task failure."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, SvcError) else exc


@serve.deployment(max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0.25})
@serve.ingress()
class Ingress:
    def __init__(self, router: DeploymentHandle, config_document: dict[str, Any]) -> None:
        self._config = StaticConfigView(parse_config(config_document).config)
        self._router = HandleRouterClient(router)
        self._upstream = UpstreamClient()

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(self._router, self._upstream, self._config)

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        if "config" in user_config:
            self._config.update(parse_config(user_config["config"]).config)
