"""An explicit model's route at the front door, without a Router hop.

An explicit model is a pass-through (`pass_through`, app/pipeline/phases/select.py): no signals,
plugins or cache, so its plan needs only the config version's model index (`DirectRoutes`), the
API key's grants and a backend order. A Router replica makes the same plan, but the hop to it
(a Serve handle call: the body pickled, queued on a replica and the plan sent back) cost the
Ingress more CPU than the route itself (docs/performance.md, "Explicit models route at the
front door"). So a front door that holds the live configuration routes explicit models here,
through the same function, and sends only auto requests on.

The Ingress does: its configuration is its user_config, swapped by every activation as the
Routers' is (deployments/ingress.py `reconfigure`). The ext_proc sidecar reads its file once at
start, so it keeps the hop: a stale model index would 404 a model an activation added.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from app.common import tracing
from app.config.document import RouterConfig
from app.keys.grant import ModelGrant
from app.pipeline.compiled import DirectRoutes
from app.pipeline.metrics import RouterMetrics
from app.pipeline.phases import parse
from app.pipeline.phases.select import pass_through
from app.pipeline.pipeline import route_attributes
from app.pipeline.plan import ProviderState, RoutePlan


class DirectRouter:
    """Routes the requests that name a concrete model over `config()`'s current version.

    `config`: the live configuration (read per request; the model index is rebuilt when it
    changes); `metrics`: where the route is counted (a front door's recorder, summed with the
    Routers' as their own routes are)."""

    def __init__(
        self, config: Callable[[], RouterConfig], metrics: RouterMetrics, rng: random.Random | None = None
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._rng = rng or random.Random()
        self._version: tuple[RouterConfig, DirectRoutes] | None = None

    def routes(self) -> DirectRoutes:
        config = self._config()
        if self._version is None or self._version[0] is not config:
            self._version = (config, DirectRoutes(config))
        return self._version[1]

    def route(
        self,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        request_id: str,
        grant: ModelGrant | None = None,
        tie: ProviderState | None = None,
    ) -> RoutePlan | None:
        """The plan of an explicit-model request (raises as a Router would: 404 an unknown model,
        403 one outside the key's grants); None for an auto one, which a Router routes."""
        routes = self.routes()
        if body["model"] in routes.auto_names:  # parse.new_plan's own test of `auto`
            return None
        with tracing.span("svc_sr.route", parent=headers) as span:
            plan = parse.new_plan(body, parse.lower_headers(headers), request_id, routes.auto_names)
            plan.tie = tie
            pass_through(routes, plan, self._rng, grant)
            tracing.set_attributes(span, route_attributes(plan))
        self._metrics.on_route(plan)
        return plan


__all__ = ["DirectRouter"]
