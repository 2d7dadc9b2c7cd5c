"""Stopping a local graph fast, without skipping any replica's own shutdown.

`serve.shutdown()` stops an application in dependency order (callers before what they call), but
it moves one level per controller tick and confirms each stop a tick later: about 1 s a level
with the local 0.5 s control loop (deployments/serve_env.py), 4.8 s for svc-sr's four levels,
most of `svc-sr stop`. `drain_app` walks the same order itself: it asks every replica of a level
to shut down (Serve's own `perform_graceful_shutdown`: it drains the replica's in-flight requests
and runs its destructor, which closes Milvus Lite and the store clients and finishes the
Ingress's post-answer work), waits for that level, then goes on. The controller is told first, so
it restarts nothing; `ray.shutdown()` then ends the processes.

The order comes from the controller's own deployment topology (which deployment holds handles to
which), so a graph with more or fewer deployments (the decision model, in-cluster LLM servers) is
stopped correctly without a list kept here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any


def stop_levels(calls: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Deployments grouped so that each one stops only after every deployment that calls it.

    `calls` maps a deployment to the deployments it calls. A cycle (not built by svc-sr, but
    possible in a user's graph) leaves its members for one last level rather than never."""
    callers: dict[str, set[str]] = {name: set() for name in calls}
    for caller, callees in calls.items():
        for callee in callees:
            callers.setdefault(callee, set()).add(caller)
    levels: list[list[str]] = []
    stopped: set[str] = set()
    while len(stopped) < len(callers):
        level = sorted(n for n, by in callers.items() if n not in stopped and by <= stopped)
        if not level:
            levels.append(sorted(set(callers) - stopped))
            break
        levels.append(level)
        stopped.update(level)
    return levels


class NoTopology(RuntimeError):
    """The controller reported no deployment topology: the order to stop in is unknown."""


def app_calls(details: Mapping[str, Any], app_name: str) -> dict[str, list[str]]:
    """Who calls whom in one application, from the controller's details (`serve status -v`).
    Calls into other applications are left out: they are stopped with their own application."""
    app = (details.get("applications") or {}).get(app_name) or {}
    nodes = (app.get("deployment_topology") or {}).get("nodes") or {}
    if app.get("deployments") and not nodes:
        raise NoTopology(f"no deployment topology for application {app_name!r}")
    calls: dict[str, list[str]] = {name: [] for name in app.get("deployments") or {}}
    for name, node in nodes.items():
        calls.setdefault(name, [])
        for target in node.get("outbound_deployments") or []:
            if target.get("app_name", app_name) == app_name and target.get("name"):
                calls[name].append(target["name"])
    return calls


def replica_actor_names(details: Mapping[str, Any], app_name: str, deployment: str) -> list[str]:
    app = (details.get("applications") or {}).get(app_name) or {}
    replicas = ((app.get("deployments") or {}).get(deployment) or {}).get("replicas") or []
    return [r["actor_name"] for r in replicas if r.get("actor_name")]


def drain_app(app_name: str, timeout_s: float = 30.0) -> list[tuple[list[str], float]]:
    """Shut the application's replicas down level by level; returns each level with its seconds.

    A replica that is already gone or does not answer within the time left is passed over:
    `ray.shutdown()` ends it next, as `serve.shutdown()` would after its own timeout."""
    import ray

    from deployments.ray_compat import serve_controller, serve_details, serve_namespace

    details = serve_details()
    levels = stop_levels(app_calls(details, app_name))  # NoTopology: the caller uses serve.shutdown()
    serve_controller().graceful_shutdown.remote(False)  # Serve's own stop: nothing is restarted
    deadline = time.monotonic() + timeout_s
    timings: list[tuple[list[str], float]] = []
    for level in levels:
        began = time.monotonic()
        pending: list[Any] = []
        for deployment in level:
            for name in replica_actor_names(details, app_name, deployment):
                try:
                    actor = ray.get_actor(name, namespace=serve_namespace())
                except ValueError:  # already gone
                    continue
                pending.append(actor.perform_graceful_shutdown.remote())
        if pending:
            ray.wait(pending, num_returns=len(pending), timeout=max(0.0, deadline - time.monotonic()))
        timings.append((level, time.monotonic() - began))
    return timings
