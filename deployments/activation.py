"""The management API inside the Ray graph: Ray Serve glue only. The Ingress builds its
`Management` here (`build_management`) with

- `RayServeControl`: the ServeControl (app/management/rollout.py) that rebuilds and
  redeploys this application from its Ingress replica for `GraphActivator`. Versions are
  stable (deployments/versioning.py): an unchanged deployment keeps its replicas and gets
  the new `user_config` through `reconfigure()`. An application deployed from a Serve
  config is updated declaratively (`user_config` overrides, `declarative_update`);
- `StartupWatcher` (app/management/startup_watch.py) fed by the deployments' states.
Private Ray APIs are reached only through deployments/ray_compat.py.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.config.document import RouterConfig
from app.management.activation import ActivationFailed
from app.management.live_inventory import ServeFacts
from app.management.rollout import AppState, GraphActivator, declarative_update, scaled_owner
from app.management.service import Management, ManagementParts
from app.management.startup import StartupTracker
from app.management.startup_watch import READY_STATES, InfoFn, StartupWatcher
from app.management.stores import ReplicaStores
from deployments import ray_compat

log = logging.getLogger("svc_sr.activation")


def _value(status: Any) -> str:
    return str(getattr(status, "value", status))


class RayServeControl:
    """Redeploys this application from inside its Ingress replica."""

    def __init__(self, app_name: str, router: DeploymentHandle | None) -> None:
        self.app_name = app_name
        self.router = router
        self._declarative: bool | None = None

    def _is_declarative(self, refresh: bool = False) -> bool:
        if self._declarative is None or refresh:
            self._declarative = self._details().get("deployed_app_config") is not None
        return self._declarative

    def _details(self) -> dict[str, Any]:
        app = (ray_compat.serve_details().get("applications") or {}).get(self.app_name)
        if app is None:
            raise ActivationFailed(
                "activate", "application_missing", None, f"Serve application {self.app_name!r} not found"
            )
        return dict(app)

    def restart_required(self, graph_args: Any, old: dict[str, Any], new: dict[str, Any]) -> str | None:
        if not self._is_declarative(refresh=True):
            return None
        if owner := scaled_owner(self._details().get("deployed_app_config") or {}, new):
            return owner
        from deployments.versioning import graph_versions

        before, after = (
            graph_versions(self.build(graph_args, old)),
            graph_versions(self.build(graph_args, new)),
        )
        changed = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
        if changed:
            return (
                f"this application was deployed from a Serve config: the change alters deployment(s) "
                f"{', '.join(changed)}, which needs a new `serve deploy`"
            )
        return None

    def build(self, graph_args: Any, document: dict[str, Any]) -> Any:
        from deployments.graph import build_graph

        return build_graph(graph_args, document=document)

    def deploy(self, app: Any) -> None:
        """Blocking (run it in a thread): hand the new target to the Serve controller."""
        if self._is_declarative():
            ray_compat.deploy_declarative(self._declarative_schema(app))
        else:
            ray_compat.redeploy(app, self.app_name, self._details().get("route_prefix"))

    def _declarative_schema(self, app: Any) -> dict[str, Any]:
        """The cluster's declarative config with `user_config` overrides for this app."""
        from deployments.versioning import graph_nodes

        bound = [ray_compat.bound_deployment(node) for node in graph_nodes(app)]
        user_configs = {d.name: d.user_config for d in bound if d.user_config is not None}
        return declarative_update(ray_compat.serve_details(), self.app_name, user_configs)

    def app_state(self) -> AppState:
        app = serve.status().applications.get(self.app_name)
        if app is None:
            return "NOT_STARTED", "", {}
        deployments = {
            name: (
                _value(d.status),
                int({_value(k): v for k, v in d.replica_states.items()}.get("RUNNING", 0)),
            )
            for name, d in app.deployments.items()
        }
        return _value(app.status), app.message or "", deployments

    def app_health(self) -> AppState:
        """app_state() without replica counts, from the controller's status overview (a small
        protobuf instead of the whole instance's details): a ready deployment counts as running."""
        overview = ray_compat.status_overview(self.app_name)
        deployments = {
            d.name: (_value(d.status), 1 if _value(d.status) in READY_STATES else 0)
            for d in overview.deployment_statuses
        }
        return _value(overview.app_status.status), overview.app_status.message or "", deployments

    async def router_generations(self, calls: int) -> list[dict[str, Any]]:
        if self.router is None:
            return []
        results = await asyncio.gather(
            *(self.router.generation.remote() for _ in range(calls)), return_exceptions=True
        )
        return [r for r in results if isinstance(r, dict)]


def scales_to_zero(options: dict[str, dict[str, Any]]) -> frozenset[str]:
    """The deployments whose options let Serve stop every replica (started on a first call)."""
    return frozenset(
        n for n, o in options.items() if (o.get("autoscaling_config") or {}).get("min_replicas") == 0
    )


def _deployment_info(app_name: str) -> InfoFn:
    def info(name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] | None = (
                serve.get_deployment_handle(name, app_name=app_name).info.remote().result(timeout_s=10)
            )
            return result
        except Exception as exc:
            log.warning("info() of %s failed: %s", name, exc)
            return None

    return info


def build_management(
    config: RouterConfig,
    graph_args: Any,
    stores: ReplicaStores,
    *,
    router: DeploymentHandle,
    held: ManagementParts,
) -> Management:
    """The Ingress replica's Management: persistent store (`stores`), graph activator, real
    startup status; `held`: the parts the Ingress holds itself (config view, previewer,
    compile check)."""
    context = serve.get_replica_context()
    app_name = context.app_name
    tracker = StartupTracker()
    backend = RayServeControl(app_name, router)
    StartupWatcher(
        tracker,
        backend.app_state,
        _deployment_info(app_name),
        exclude=frozenset({context.deployment}),
        health=backend.app_health,
        on_demand=scales_to_zero(getattr(graph_args, "deployments", {})),
    ).start()
    activator = GraphActivator(
        graph_args,
        config.to_document(),
        backend,
        timeout_s=float(getattr(graph_args, "activation_timeout_s", 120.0)),
    )
    details = lambda: ray_compat.serve_details().get("applications", {}).get(app_name, {})  # noqa: E731
    facts = ServeFacts(details, _deployment_info(app_name), frozenset({context.deployment})).start()
    parts: ManagementParts = {**held, "activator": activator, "startup": tracker, "runtime_facts": facts}
    management = Management(config, **(parts | stores.parts()))
    log.info(
        "management API: state in %s, configuration version %s",
        stores.store.backend.describe(),
        management.store.active.config_version if management.store.active else None,
    )
    return management
