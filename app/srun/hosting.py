"""Router-managed model runtimes as the router uses them (spec 2 "Router settings for managed
runtimes"): the config's `model_deployments`, `decision_model`, `signal_timeout_ms` and
`on_unscanned`, read from a `RouterConfig`, and `ManagedRuntimes`, which runs the
`RuntimeSupervisor` for a host and hands out what the host serves through it.

Hosts (docs/model-runtime.md "Router-managed runtimes"):
- the Ray graph: the DecisionModel deployment (deployments/decision_model.py) hosts the
  deployment named by `decision_model.deployment`, each replica with its own workers;
- an embedding host without Ray: `ManagedRuntimes(...)`, then
  `create_app(..., decisions=runtimes.decision_backend())`.

Deadlines: a routing or safety signal gets `signal_timeout_ms`, else the request's remaining
time less a tenth (at least 1 s), or 45 s with no visible deadline (`signal()`). The native
decision API is not a signal: its calls get its own 30 s budget less a tenth, so the router
still answers 504 `systemone_deadline_exceeded` itself when a worker is too slow.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from app.api.decisions import DEADLINE_S, ClientDecisionBackend
from app.config.models import RouterConfig
from app.srun.client import RuntimeCallError
from app.srun.runtime_metrics import RuntimeMetrics
from app.srun.settings import (
    ModelCatalogSettings,
    OnUnscanned,
    RuntimeSettings,
    SrunEnvironment,
    signal_timeout_s,
    unscanned_matches,
)
from app.srun.supervisor import RuntimeSupervisor

log = logging.getLogger("svc_sr.model_runtime")
SafetyModule = Literal["prompt_guard", "pii"]
_MODULE_PATHS: dict[str, tuple[str, ...]] = {"prompt_guard": ("modules", "prompt_guard"),
                                             "pii": ("modules", "classifier", "pii")}


def runtime_settings(config: RouterConfig) -> RuntimeSettings:
    """The router-side runtime block of a config (validated already by RouterConfig)."""
    timeout = config.global_.model_catalog.get("signal_timeout_ms")
    return RuntimeSettings(
        model_deployments=config.model_deployments,
        model_catalog=ModelCatalogSettings(signal_timeout_ms=timeout),
        decision_model=config.decision_model,
    )


def on_unscanned(config: RouterConfig, module: SafetyModule) -> OnUnscanned:
    """`on_unscanned` of the prompt guard or the PII classifier (default `block`)."""
    node: Any = config.global_.model_catalog
    for key in _MODULE_PATHS[module]:
        node = node.get(key) if isinstance(node, dict) else None
    value = node.get("on_unscanned") if isinstance(node, dict) else None
    return "allow" if value == "allow" else "block"


@dataclass
class SignalResult:
    """A model-runtime signal call: `ok` with the answer; `unscanned` (a safety signal that missed
    its deadline or read its input only in part) or `error`, each with `matches`: how the
    signal resolves (on_unscanned / on_error)."""

    state: Literal["ok", "unscanned", "error"]
    answer: dict[str, Any] | None = None
    matches: bool | None = None
    error: str | None = None


class ManagedRuntimes:
    """The supervisor of one host, its metrics, and what the host serves through it.

    `deployments` limits the host to some `model_deployments` (None: all of them).
    `supervisor_options` go to RuntimeSupervisor (back-off, stop timeout, replica_prefix)."""

    def __init__(
        self, settings: RuntimeSettings, env: SrunEnvironment | None = None, metrics: RuntimeMetrics | None = None,
        *, deployments: list[str] | None = None, **supervisor_options: Any,
    ) -> None:
        self.settings = settings
        hosted = settings
        if deployments is not None:
            unknown = sorted(set(deployments) - set(settings.model_deployments))
            if unknown:
                raise KeyError(f"no model deployment {', '.join(unknown)}")
            ref = settings.decision_model
            hosted = RuntimeSettings(
                model_deployments={k: v for k, v in settings.model_deployments.items() if k in deployments},
                model_catalog=settings.model_catalog,
                decision_model=ref if ref is not None and ref.deployment in deployments else None,
            )
        self.metrics = metrics or RuntimeMetrics()
        self.supervisor = RuntimeSupervisor(hosted, env, self.metrics, **supervisor_options)
        self._started = False

    @classmethod
    def from_config(cls, config: RouterConfig, **options: Any) -> ManagedRuntimes:
        return cls(runtime_settings(config), **options)

    @property
    def decision_deployment(self) -> str | None:
        ref = self.supervisor.settings.decision_model
        return ref.deployment if ref is not None else None

    async def start(self, wait: bool = True, timeout_s: float | None = None) -> bool:
        """Start the managed workers and the health watch; with `wait`, until every replica is
        ready or SVC_SRUN_READY_TIMEOUT passes (False: not ready yet, the watch goes on)."""
        if not self._started:
            self.supervisor.start()
            self._started = True
        ready = await self.supervisor.wait_ready(timeout_s) if wait else False
        if wait and not ready:
            log.error("model runtimes not ready after %.0f s: %s", timeout_s or self.supervisor.env.ready_timeout_s,
                      ", ".join(sorted(self.supervisor.replicas)))
        self.supervisor.start_watch()
        return ready

    async def stop(self) -> None:
        await self.supervisor.stop()

    # -- what a host serves --------------------------------------------------------------

    def decision_backend(self, budget_s: float = DEADLINE_S) -> ClientDecisionBackend | None:
        """/v1/decisions through the `decision_model` deployment's replicas (None: not configured here)."""
        deployment = self.decision_deployment
        if deployment is None:
            return None
        return ClientDecisionBackend(
            lambda: self.supervisor.client_for(deployment), self.supervisor.served_name(deployment),
            deadline_s=min(budget_s, signal_timeout_s(budget_s)), names=(deployment,),
        )

    def signal_deadline_s(self, remaining_s: float | None) -> float:
        return signal_timeout_s(remaining_s, self.settings.signal_timeout_ms)

    async def signal(
        self, deployment: str, surface: str, body: dict[str, Any], remaining_s: float | None, *,
        safety: bool = False, on_error_matches: bool = False, unscanned: OnUnscanned = "block",
    ) -> SignalResult:
        """One signal call with the signal deadline. A safety signal whose input was not read in
        full (a deadline missed, `tokens_lower_bound` in usage) is `unscanned` and matches as
        on_unscanned says; any other failure is `error` and matches as on_error says."""
        client = self.supervisor.client_for(deployment)
        try:
            answer = await client.call("POST", f"/v1/{surface}", body, surface=surface,
                                       deadline_s=self.signal_deadline_s(remaining_s))
        except RuntimeCallError as exc:
            if safety and exc.outcome == "timeout":
                return SignalResult("unscanned", matches=unscanned_matches(unscanned, on_error_matches),
                                    error=exc.code)
            return SignalResult("error", matches=on_error_matches, error=exc.code)
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if safety and isinstance(usage, dict) and usage.get("tokens_lower_bound"):
            return SignalResult("unscanned", answer, unscanned_matches(unscanned, on_error_matches))
        return SignalResult("ok", answer)
