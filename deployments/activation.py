"""The management API inside the Ray graph: the activator that pushes a configuration to
every live replica, the startup tracker fed by the deployments' real readiness, and the
replay source over the Observability deployment. The Ingress builds them
(`build_management`); `app/management` stays Ray-free.

Activation (`RayActivator.activate`, after the ActivationController's parse / validate /
compile stages):

1. stage `compile`: rebuild the Serve graph with the Ingress's own GraphArgs and the
   candidate document (`deployments.graph.build_graph(args, document=...)`);
2. stage `activate`: redeploy the same application under its name and route prefix
   (`serve._run(..., _blocking=False)` from a worker thread). Deployment versions are
   stable (deployments/versioning.py): a deployment whose arguments did not change keeps
   its replicas and Serve calls `reconfigure()` on them with the new `user_config` (the
   Router and the Ingress receive the document only that way); requests in flight finish
   on the generation they started with. A deployment whose arguments changed (a model
   deployment's settings) gets a new version that Serve rolls out while the old replicas
   serve. Then wait until the application is RUNNING again;
3. stage `warm`: every Router replica reports (`Router.generation()`) that it serves the
   new configuration, or that building/warming it failed (it then still serves the old).

A failure or a timeout (GraphArgs.activation_timeout_s) raises ActivationFailed after
pushing the previous document back, so the previous generation serves everywhere.
An application deployed from a Serve config (`serve deploy`, KubeRay) is updated the
declarative way instead: the same application config with `user_config` overrides for
the deployments that take the document; Serve reconfigures them in place. A change that
would alter a deployment's arguments there is refused (restart_required): it needs a new
`serve deploy`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.config.loader import config_hash, parse_config
from app.config.models import RouterConfig
from app.management.activation import ActivationFailed
from app.management.api import Management
from app.management.replays import ReplayAggregate, ReplayPage
from app.management.startup import StartupTracker
from app.management.state import STATE_FILE, ConfigStore, StoreCorrupt

log = logging.getLogger("svc_sr.activation")

READY_STATES = frozenset({"HEALTHY", "UPSCALING", "DOWNSCALING"})
POLL_S = 0.1
RESTORE_TIMEOUT_S = 60.0
# Which model each deployment loads (inventory and /startup-status `artifact`).
ARTIFACTS = {"Embedding": "minilm-embedding", "DomainClassifier": "domain-classifier",
             "Guard": "pii-detector,jailbreak-guard", "DecisionModel": "decision-model"}


def _value(status: Any) -> str:
    return str(getattr(status, "value", status))


def _first_line(text: str | None, limit: int = 300) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line[:limit]


# ---------------------------------------------------------------------------- Serve access

class ServeBackend(Protocol):
    """What the activator needs from Ray Serve (a fake in unit tests)."""

    def build(self, graph_args: Any, document: dict[str, Any]) -> Any:
        """The Serve graph for `document` (raises: stage compile)."""
        ...

    def deploy(self, app: Any) -> None: ...

    def app_state(self) -> tuple[str, str, dict[str, tuple[str, int]]]:
        """(application status, message, {deployment: (status, running replicas)})."""
        ...

    async def router_generations(self, calls: int) -> list[dict[str, Any]]: ...

    def restart_required(self, graph_args: Any, old: dict[str, Any], new: dict[str, Any]) -> str | None:
        """Why `new` cannot be applied without a new deploy (None: it can)."""
        ...


class RayServeBackend:
    """Redeploys this application from inside its Ingress replica."""

    def __init__(self, app_name: str, router: DeploymentHandle | None) -> None:
        self.app_name = app_name
        self.router = router
        self._details: dict[str, Any] | None = None

    def _app_details(self, refresh: bool = False) -> dict[str, Any]:
        from ray.serve.context import _get_global_client

        if self._details is None or refresh:
            details = _get_global_client().get_serve_details()
            app = (details.get("applications") or {}).get(self.app_name)
            if app is None:
                raise ActivationFailed("activate", "application_missing", None,
                                       f"Serve application {self.app_name!r} not found")
            self._details = {"route_prefix": app.get("route_prefix"),
                             "declarative": app.get("deployed_app_config") is not None}
        return self._details

    def restart_required(self, graph_args: Any, old: dict[str, Any], new: dict[str, Any]) -> str | None:
        if not self._app_details(refresh=True)["declarative"]:
            return None
        from deployments.graph import build_graph
        from deployments.versioning import graph_versions

        before = graph_versions(build_graph(graph_args, document=old))
        after = graph_versions(build_graph(graph_args, document=new))
        changed = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
        if changed:
            return (f"this application was deployed from a Serve config: the change alters deployment(s) "
                    f"{', '.join(changed)}, which needs a new `serve deploy`")
        return None

    def build(self, graph_args: Any, document: dict[str, Any]) -> Any:
        from deployments.graph import build_graph

        return build_graph(graph_args, document=document)

    def deploy(self, app: Any) -> None:
        """Blocking (run it in a thread): hand the new target to the Serve controller."""
        details = self._app_details()
        if details["declarative"]:
            self._deploy_declarative(app)
            return
        from ray.serve.api import _run

        _run(app, name=self.app_name, route_prefix=details["route_prefix"], _blocking=False)

    def _deploy_declarative(self, app: Any) -> None:
        """Re-apply the cluster's declarative config with `user_config` overrides for this app."""
        from ray.serve.context import _get_global_client
        from ray.serve.schema import ServeDeploySchema

        from deployments.versioning import graph_nodes

        user_configs: dict[str, Any] = {
            node._bound_deployment.name: node._bound_deployment.user_config
            for node in graph_nodes(app) if node._bound_deployment.user_config is not None
        }
        client = _get_global_client()
        details = client.get_serve_details()
        applications = []
        for name, entry in (details.get("applications") or {}).items():
            config = entry.get("deployed_app_config")
            if config is None:
                continue
            config = dict(config)
            if name == self.app_name:
                overrides = {d["name"]: dict(d) for d in config.get("deployments") or []}
                for deployment, user_config in user_configs.items():
                    overrides.setdefault(deployment, {"name": deployment})["user_config"] = user_config
                config["deployments"] = list(overrides.values())
            applications.append(config)
        schema: dict[str, Any] = {"applications": applications}
        for key in ("proxy_location", "http_options", "grpc_options", "target_capacity"):
            if details.get(key) is not None:
                schema[key] = details[key]
        client.deploy_apps(ServeDeploySchema.model_validate(schema))

    def app_state(self) -> tuple[str, str, dict[str, tuple[str, int]]]:
        app = serve.status().applications.get(self.app_name)
        if app is None:
            return "NOT_STARTED", "", {}
        deployments = {
            name: (_value(d.status), int({_value(k): v for k, v in d.replica_states.items()}.get("RUNNING", 0)))
            for name, d in app.deployments.items()
        }
        return _value(app.status), app.message or "", deployments

    def app_health(self) -> tuple[str, str, dict[str, tuple[str, int]]]:
        """app_state() without replica counts, from the controller's status overview (a small
        protobuf instead of the whole instance's details): a deployment in a ready state
        counts as running."""
        from ray.serve.context import _get_global_client

        overview = _get_global_client().get_serve_status(self.app_name)
        deployments = {
            d.name: (_value(d.status), 1 if _value(d.status) in READY_STATES else 0)
            for d in overview.deployment_statuses
        }
        return _value(overview.app_status.status), overview.app_status.message or "", deployments

    async def router_generations(self, calls: int) -> list[dict[str, Any]]:
        if self.router is None:
            return []
        results = await asyncio.gather(*(self.router.generation.remote() for _ in range(calls)),
                                       return_exceptions=True)
        return [r for r in results if isinstance(r, dict)]


# ---------------------------------------------------------------------------- activator

class RayActivator:
    """Activator (app/management/activation.py) over a Ray Serve application."""

    def __init__(self, graph_args: Any, document: dict[str, Any], backend: ServeBackend,
                 timeout_s: float = 120.0) -> None:
        self.graph_args = graph_args
        self.document = document  # the document the replicas serve
        self.backend = backend
        self.timeout_s = timeout_s
        self.last: dict[str, Any] = {}  # timings of the last activation (logs, tests)

    async def activate(self, config: RouterConfig, document: dict[str, Any]) -> None:
        started = time.monotonic()
        deadline = started + self.timeout_s
        expected = config_hash(parse_config(document).config)  # what Router.generation() reports
        try:
            app = await asyncio.to_thread(self.backend.build, self.graph_args, document)
            reason = await asyncio.to_thread(self.backend.restart_required, self.graph_args, self.document, document)
        except ActivationFailed:
            raise
        except Exception as exc:
            raise ActivationFailed("compile", "graph_build_failed", None, f"{type(exc).__name__}: {exc}") from exc
        if reason:
            raise ActivationFailed("activate", "restart_required", None, reason)
        try:
            await asyncio.to_thread(self.backend.deploy, app)
        except ActivationFailed:
            raise
        except Exception as exc:
            raise ActivationFailed("activate", "deploy_failed", None, f"{type(exc).__name__}: {exc}") from exc
        deployed = time.monotonic()
        try:
            await self._wait_running(deadline)
            running = time.monotonic()
            await self._wait_routers(expected, deadline)
        except ActivationFailed:
            await self._restore()
            raise
        self.document = document
        self.last = {"deploy_s": round(deployed - started, 3), "running_s": round(running - started, 3),
                     "total_s": round(time.monotonic() - started, 3)}
        log.info("configuration %s active on every replica in %.2f s", expected[:12], self.last["total_s"])

    async def _wait_running(self, deadline: float) -> None:
        while True:
            status, message, _ = await asyncio.to_thread(self.backend.app_state)
            if status == "RUNNING":
                return
            if status in ("DEPLOY_FAILED", "UNHEALTHY"):
                raise ActivationFailed("activate", "deploy_failed", None,
                                       f"application {status}: {_first_line(message)}")
            if time.monotonic() > deadline:
                raise ActivationFailed("activate", "activation_timeout", None,
                                       f"the application was still {status} after {self.timeout_s:.0f} s")
            await asyncio.sleep(POLL_S)

    async def _wait_routers(self, expected: str, deadline: float) -> None:
        """Stage warm: every running Router replica serves `expected` (or says why not)."""
        seen: dict[str, dict[str, Any]] = {}
        while True:
            _, _, deployments = await asyncio.to_thread(self.backend.app_state)
            replicas = deployments.get("Router", ("", 0))[1]
            if replicas == 0:  # no Router (or scaled to zero): new replicas start on the new user_config
                return
            for report in await self.backend.router_generations(max(4, 3 * replicas)):
                seen[str(report.get("replica"))] = report
            failed = [r for r in seen.values() if r.get("failed_hash") == expected and r.get("hash") != expected]
            if failed:
                raise ActivationFailed("warm", "warm_failed", None,
                                       f"a Router replica could not load the configuration: "
                                       f"{_first_line(failed[0].get('error'))}")
            if sum(1 for r in seen.values() if r.get("hash") == expected) >= replicas:
                return
            if time.monotonic() > deadline:
                raise ActivationFailed("activate", "activation_timeout", None,
                                       f"Router replicas did not report the new configuration within "
                                       f"{self.timeout_s:.0f} s")
            await asyncio.sleep(POLL_S)

    async def _restore(self) -> None:
        """Push the previous document back (best effort): the previous generation serves."""
        try:
            app = await asyncio.to_thread(self.backend.build, self.graph_args, self.document)
            await asyncio.to_thread(self.backend.deploy, app)
            await self._wait_running(time.monotonic() + RESTORE_TIMEOUT_S)
        except Exception:
            log.exception("could not restore the previous configuration after a failed activation")


# ---------------------------------------------------------------------------- replays

class ObservabilityReplays:
    """ReplaySource over the Observability deployment (shared by every Router replica)."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle

    async def list(self, limit: int = 100, after_sequence: int = 0, decision: str | None = None,
                   model: str | None = None) -> ReplayPage:
        page = await self._handle.list_replays.remote(limit, after_sequence, decision, model)
        return ReplayPage.model_validate(page)

    async def get(self, replay_id: str) -> dict[str, Any] | None:
        return await self._handle.get_replay.remote(replay_id)

    async def aggregate(self, decision: str | None = None, model: str | None = None) -> ReplayAggregate:
        return ReplayAggregate.model_validate(await self._handle.aggregate_replays.remote(decision, model))


# ---------------------------------------------------------------------------- startup

StatusFn = Callable[[], tuple[str, str, dict[str, tuple[str, int]]]]
InfoFn = Callable[[str], dict[str, Any] | None]


def load_failure(info: dict[str, Any] | None) -> str | None:
    """A model deployment's `info()` -> why its model is not loaded (None: loaded or unknown)."""
    if not isinstance(info, dict):
        return None
    parts = [info] + [v for v in info.values() if isinstance(v, dict) and "loaded" in v]
    for part in parts:
        if part.get("loaded") is False:
            return _first_line(str(part.get("error") or "model not loaded"))
    return None


class StartupWatcher:
    """Feeds a StartupTracker from the application's deployment states (a daemon thread):
    every deployment but the Ingress is registered; HEALTHY (or scaling) is ready, and for
    model deployments only once their `info()` says the model loaded; DEPLOY_FAILED or a
    model that did not load is a failure."""

    def __init__(self, tracker: StartupTracker, status: StatusFn, info: InfoFn | None = None,
                 exclude: frozenset[str] = frozenset(), interval_s: float = 0.5, idle_interval_s: float = 5.0,
                 health: StatusFn | None = None) -> None:
        self.tracker = tracker
        self.status = status
        # Once started, the cheap status (no replica counts) keeps watching: the full one
        # holds this replica's GIL for ~100 ms, a latency spike for requests every poll.
        self.health = health
        self.info = info
        self.exclude = exclude
        self.interval_s = interval_s
        self.idle_interval_s = idle_interval_s
        self._stop = threading.Event()
        self._registered: set[str] = set()
        self._checked: set[str] = set()
        self._thread: threading.Thread | None = None

    def start(self) -> StartupWatcher:
        self._thread = threading.Thread(target=self._run, name="svc-sr-startup", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # the controller may be busy or restarting
                log.debug("startup status poll failed: %s", exc)
            self._stop.wait(self.idle_interval_s if self.tracker.complete else self.interval_s)

    def poll(self) -> None:
        status_fn = self.health if self.tracker.complete and self.health is not None else self.status
        status, _, deployments = status_fn()
        if not deployments:
            return
        names = sorted(n for n in deployments if n not in self.exclude)
        for name in names:
            if name not in self._registered:
                self.tracker.register(name, artifact=ARTIFACTS.get(name), process="ray_serve")
                self._registered.add(name)
        self.tracker.seal()
        for name in names:
            state, running = deployments[name]
            if state in READY_STATES and running > 0:
                if name in ARTIFACTS and self.info is not None and name not in self._checked:
                    reason = load_failure(self.info(name))
                    self._checked.add(name)
                    if reason is not None:
                        self.tracker.mark_failed(name, reason)
                        continue
                self.tracker.mark_ready(name)
            elif state == "DEPLOY_FAILED" or (state == "UNHEALTHY" and self.tracker.complete):
                self.tracker.mark_failed(name, f"deployment {state}")


def _deployment_info(app_name: str) -> InfoFn:
    def info(name: str) -> dict[str, Any] | None:
        try:
            return serve.get_deployment_handle(name, app_name=app_name).info.remote().result(timeout_s=10)
        except Exception as exc:
            log.warning("info() of %s failed: %s", name, exc)
            return None

    return info


# ---------------------------------------------------------------------------- wiring

STATE_ROOT_ENV = "SVC_SR_MANAGEMENT_STATE_DIR"


def state_dir_of(graph_args: Any, app_name: str) -> Path:
    """GraphArgs.state_dir, else <$SVC_SR_MANAGEMENT_STATE_DIR>/<app>, else
    <working directory>/.cache/state/<app> (each application keeps its own history)."""
    configured = getattr(graph_args, "state_dir", None)
    if configured:
        return Path(configured)
    root = os.environ.get(STATE_ROOT_ENV)
    return (Path(root) if root else Path.cwd() / ".cache" / "state") / app_name


def _store(state_dir: Path) -> ConfigStore:
    store = ConfigStore(state_dir)
    try:
        store._load()
    except StoreCorrupt as exc:  # keep the bytes for inspection, start a fresh history
        aside = state_dir / f"{STATE_FILE}.corrupt-{int(time.time())}"
        log.error("%s; moved aside to %s", exc, aside)
        (state_dir / STATE_FILE).replace(aside)
    return store


def build_management(
    config: RouterConfig, graph_args: Any, *, router: DeploymentHandle, observability: DeploymentHandle | None,
    config_view: Any, previewer: Any, compile_check: Callable[[RouterConfig], None],
) -> Management:
    """The Ingress replica's Management: persistent store, Ray activator, real startup status."""
    context = serve.get_replica_context()
    app_name = context.app_name
    tracker = StartupTracker()
    backend = RayServeBackend(app_name, router)
    StartupWatcher(tracker, backend.app_state, _deployment_info(app_name),
                   exclude=frozenset({context.deployment}), health=backend.app_health).start()
    activator = RayActivator(graph_args, config.to_document(), backend,
                             timeout_s=float(getattr(graph_args, "activation_timeout_s", 120.0)))
    filename = "inline" if getattr(graph_args, "config", None) is not None else Path(graph_args.config_path).name
    kwargs: dict[str, Any] = dict(
        activator=activator, config_view=config_view, startup=tracker, previewer=previewer, filename=filename,
        replays=ObservabilityReplays(observability) if observability is not None else None,
        compile_check=compile_check,
    )
    state_dir = state_dir_of(graph_args, app_name)
    try:
        management = Management(config, store=_store(state_dir), **kwargs)
    except OSError as exc:  # an unwritable state directory must not keep the router down
        log.error("management state directory %s unusable (%s); keeping versions in memory", state_dir, exc)
        management = Management(config, store=ConfigStore(), **kwargs)
    log.info("management API: state in %s, configuration version %s", state_dir,
             management.store.active.config_version if management.store.active else None)
    return management
