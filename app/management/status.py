"""GET /api/v1/status: the replica-local condition list (Kubernetes style) from the startup
tracker, the active record and the activation hashes. Pure functions, no HTTP."""

from __future__ import annotations

from typing import Any

from app.management.schemas import Condition
from app.management.startup import StartupStatus
from app.upstream.reachability import Backend


def startup_condition(startup: StartupStatus) -> Condition:
    if startup.phase == "complete":
        return Condition(type="StartupComplete", status="True", reason="StartupComplete")
    if startup.phase == "error":
        return Condition(type="StartupComplete", status="True", reason="StartupFailed")
    if startup.total_models == 0:
        return Condition(type="StartupComplete", status="Unknown", reason="StartupUnobserved")
    return Condition(type="StartupComplete", status="False", reason="StartupIncomplete")


def active_condition(has_active: bool) -> Condition:
    return Condition(
        type="ActiveConfigAvailable",
        status="True" if has_active else "False",
        reason="ActiveConfigAvailable" if has_active else "NoActiveConfig",
    )


def converged_condition(view: dict[str, Any]) -> Condition:
    """`view`: Management.hash_view() (generated vs active runtime hash, last attempt state)."""
    state = (view.get("activation") or {}).get("state")
    generated, active = view.get("generated_runtime_hash"), view.get("active_runtime_hash")
    if not generated or not active:
        return Condition(type="ConfigConverged", status="Unknown", reason="ConfigIdentityUnobserved")
    if generated == active and state in (None, "active"):
        return Condition(type="ConfigConverged", status="True", reason="ConfigHashesMatch")
    reason = {"failed": "ConfigActivationFailed", "superseded": "ConfigActivationSuperseded"}.get(
        str(state), "ConfigActivationPending"
    )
    return Condition(type="ConfigConverged", status="False", reason=reason)


def ready_condition(startup: StartupStatus, has_active: bool) -> Condition:
    if startup.phase == "error":
        return Condition(type="Ready", status="False", reason="StartupFailed")
    if startup.phase != "complete":
        return Condition(type="Ready", status="False", reason="StartupIncomplete")
    if not has_active:
        return Condition(type="Ready", status="False", reason="NoActiveConfig")
    # no known failure; dependency and quorum readiness are not observed here
    return Condition(type="Ready", status="Unknown", reason="RequiredDependenciesUnobserved")


def store_condition(reachable: bool) -> Condition:
    """Whether the management store answers: without it writes answer 503 and reads show the
    last state this replica saw (routing does not depend on it)."""
    return Condition(
        type="ManagementStoreAvailable",
        status="True" if reachable else "False",
        reason="StoreReachable" if reachable else "StoreUnreachable",
    )


def backends_condition(down: list[Backend] | None) -> Condition:
    """Whether every configured backend accepts a connection (None: not checked). The router
    runs without its upstreams; requests routed to one that is down answer 503."""
    if down is None:
        return Condition(type="BackendsReachable", status="Unknown", reason="BackendsUnobserved")
    if not down:
        return Condition(type="BackendsReachable", status="True", reason="AllBackendsReachable")
    return Condition(
        type="BackendsReachable",
        status="False",
        reason="BackendsUnreachable",
        message="unreachable: " + ", ".join(b.describe() for b in down),
    )


def conditions(
    startup: StartupStatus,
    has_active: bool,
    view: dict[str, Any],
    store_reachable: bool = True,
    backends_down: list[Backend] | None = None,
) -> list[Condition]:
    return [
        Condition(type="Live", status="True", reason="ProcessRunning"),
        startup_condition(startup),
        active_condition(has_active),
        converged_condition(view),
        ready_condition(startup, has_active),
        store_condition(store_reachable),
        backends_condition(backends_down),
    ]
