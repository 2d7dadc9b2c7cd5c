"""Activation of a configuration on a Ray Serve application, without Ray: `GraphActivator`
drives the stages over a `ServeControl` (deployments/activation.py's RayServeControl in
the graph, a fake in unit tests).

After the ActivationController's parse / validate / compile stages:

1. stage `compile`: rebuild the Serve graph with the Ingress's own GraphArgs and the
   candidate document (backend.build);
2. stage `activate`: refuse a change a declarative application cannot take
   (backend.restart_required), redeploy (backend.deploy), then wait until the application
   is RUNNING again;
3. stage `warm`: every Router replica reports (`Router.generation()`) that it serves the
   new configuration, or that building/warming it failed (it then still serves the old).

A failure or a timeout raises ActivationFailed after pushing the previous document back,
so the previous generation serves everywhere. The clock and the wait between polls are
injected (tests drive them without real time passing).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from app.cache.factory import single_owner
from app.config.document import RouterConfig
from app.config.loader import config_hash, parse_config
from app.management.activation import ActivationFailed

log = logging.getLogger("svc_sr.activation")

POLL_S = 0.1
RESTORE_TIMEOUT_S = 60.0
# (application status, message, {deployment: (status, running replicas)})
AppState = tuple[str, str, dict[str, tuple[str, int]]]


def first_line(text: str | None, limit: int = 300) -> str:
    """The first line of a (multi-line) error message, at most `limit` characters."""
    stripped = (text or "").strip()
    return stripped.splitlines()[0][:limit] if stripped else ""


class ServeControl(Protocol):
    """What the activator needs from Ray Serve."""

    def build(self, graph_args: Any, document: dict[str, Any]) -> Any:
        """The Serve graph for `document` (raises: stage compile)."""
        ...

    def deploy(self, app: Any) -> None: ...

    def app_state(self) -> AppState: ...

    async def router_generations(self, calls: int) -> list[dict[str, Any]]: ...

    def restart_required(self, graph_args: Any, old: dict[str, Any], new: dict[str, Any]) -> str | None:
        """Why `new` cannot be applied without a new deploy (None: it can)."""
        ...


class GraphActivator:
    """Activator (app/management/activation.py) over a Serve application."""

    def __init__(
        self,
        graph_args: Any,
        document: dict[str, Any],
        backend: ServeControl,
        timeout_s: float = 120.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
        poll_s: float = POLL_S,
        restore_timeout_s: float = RESTORE_TIMEOUT_S,
    ) -> None:
        self.graph_args = graph_args
        self.document = document  # the document the replicas serve
        self.backend = backend
        self.timeout_s = timeout_s
        self.clock = clock
        self.pause = pause
        self.poll_s = poll_s
        self.restore_timeout_s = restore_timeout_s
        self.last: dict[str, Any] = {}  # timings of the last activation (logs, tests)

    async def activate(self, config: RouterConfig, document: dict[str, Any]) -> None:
        started = self.clock()
        deadline = started + self.timeout_s
        expected = config_hash(parse_config(document).config)  # what Router.generation() reports
        app = await self._build(document)
        await self._deploy(app)
        deployed = self.clock()
        try:
            await self._wait_running(deadline)
            running = self.clock()
            await self._wait_routers(expected, deadline)
        except ActivationFailed:
            await self._restore()
            raise
        self.document = document
        self.last = {
            "deploy_s": round(deployed - started, 3),
            "running_s": round(running - started, 3),
            "total_s": round(self.clock() - started, 3),
        }
        log.info("configuration %s active on every replica in %.2f s", expected[:12], self.last["total_s"])

    async def _build(self, document: dict[str, Any]) -> Any:
        try:
            app = await asyncio.to_thread(self.backend.build, self.graph_args, document)
            reason = await asyncio.to_thread(
                self.backend.restart_required, self.graph_args, self.document, document
            )
        except ActivationFailed:
            raise
        except Exception as exc:
            raise ActivationFailed(
                "compile", "graph_build_failed", None, f"{type(exc).__name__}: {exc}"
            ) from exc
        if reason:
            raise ActivationFailed("activate", "restart_required", None, reason)
        return app

    async def _deploy(self, app: Any) -> None:
        try:
            await asyncio.to_thread(self.backend.deploy, app)
        except ActivationFailed:
            raise
        except Exception as exc:
            raise ActivationFailed("activate", "deploy_failed", None, f"{type(exc).__name__}: {exc}") from exc

    async def _wait_running(self, deadline: float) -> None:
        while True:
            status, message, _ = await asyncio.to_thread(self.backend.app_state)
            if status == "RUNNING":
                return
            if status in ("DEPLOY_FAILED", "UNHEALTHY"):
                raise ActivationFailed(
                    "activate", "deploy_failed", None, f"application {status}: {first_line(message)}"
                )
            if self.clock() > deadline:
                raise ActivationFailed(
                    "activate",
                    "activation_timeout",
                    None,
                    f"the application was still {status} after {self.timeout_s:.0f} s",
                )
            await self.pause(self.poll_s)

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
            failed = [
                r for r in seen.values() if r.get("failed_hash") == expected and r.get("hash") != expected
            ]
            if failed:
                raise ActivationFailed(
                    "warm",
                    "warm_failed",
                    None,
                    f"a Router replica could not load the configuration: "
                    f"{first_line(failed[0].get('error'))}",
                )
            if sum(1 for r in seen.values() if r.get("hash") == expected) >= replicas:
                return
            if self.clock() > deadline:
                raise ActivationFailed(
                    "activate",
                    "activation_timeout",
                    None,
                    f"Router replicas did not report the new configuration within {self.timeout_s:.0f} s",
                )
            await self.pause(self.poll_s)

    async def _restore(self) -> None:
        """Push the previous document back (best effort): the previous generation serves."""
        try:
            app = await asyncio.to_thread(self.backend.build, self.graph_args, self.document)
            await asyncio.to_thread(self.backend.deploy, app)
            await self._wait_running(self.clock() + self.restore_timeout_s)
        except Exception:
            log.exception("could not restore the previous configuration after a failed activation")


def scaled_owner(app_config: dict[str, Any], document: dict[str, Any]) -> str | None:
    """Why `document` cannot be activated on an application deployed from a Serve config
    (`app_config`, as deployed): its response cache needs one owner (docs/configuration.md "One
    owner") while that config asks for more ResponseCache replicas; a Serve config's options win
    over the graph's, and an activation only carries user_config. None: no conflict."""
    why = single_owner(parse_config(document).config.global_.stores.response_cache)
    entries: list[dict[str, Any]] = app_config.get("deployments") or []
    asked = next((d for d in entries if d.get("name") == "ResponseCache"), {})
    replicas = asked.get("num_replicas", 1)
    if why is None or (replicas == 1 and asked.get("autoscaling_config") is None):
        return None
    return (
        f"the response cache needs one owner ({why}) but this application's Serve config asks for "
        f"ResponseCache num_replicas {replicas}{' with autoscaling' if asked.get('autoscaling_config') else ''}: "
        "set num_replicas 1 there and `serve deploy` it first"
    )


# Top-level keys of a declarative Serve config that a redeploy carries over as they are.
SERVE_CONFIG_KEYS = ("proxy_location", "http_options", "grpc_options", "target_capacity")


def declarative_update(
    details: dict[str, Any], app_name: str, user_configs: dict[str, Any]
) -> dict[str, Any]:
    """The declarative Serve config the cluster runs (`details`: the controller's view of every
    application), with `user_configs` ({deployment: user_config}) applied to `app_name`'s
    deployments. Applications deployed imperatively (no `deployed_app_config`) are left out:
    a declarative deploy would not touch them anyway."""
    applications = []
    for name, entry in (details.get("applications") or {}).items():
        config = entry.get("deployed_app_config")
        if config is None:
            continue
        config = dict(config)
        if name == app_name:
            overrides = {d["name"]: dict(d) for d in config.get("deployments") or []}
            for deployment, user_config in user_configs.items():
                overrides.setdefault(deployment, {"name": deployment})["user_config"] = user_config
            config["deployments"] = list(overrides.values())
        applications.append(config)
    carried = {key: details[key] for key in SERVE_CONFIG_KEYS if details.get(key) is not None}
    return {"applications": applications} | carried
