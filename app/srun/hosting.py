"""Router-managed model runtimes as the router uses them (docs/model-runtime.md, "Router-managed
runtimes"): the config's `model_deployments`, `decision_model`, `signal_timeout_ms` and
`on_unscanned`, read from a `RouterConfig`, and `ManagedRuntimes`, which runs the
`RuntimeSupervisor` for a host and hands out what the host serves through it.

Hosts (docs/model-runtime.md "Router-managed runtimes"):
- the Ray graph: the DecisionModel deployment (deployments/decision_model.py) hosts the
  deployment named by `decision_model.deployment`, and each Router replica
  (deployments/router.py) the deployments its configuration's bindings name
  (`BindingRuntimes`), each replica with its own workers;
- an embedding host without Ray: `ManagedRuntimes(...)`, then
  `create_app(..., decisions=runtimes.decision_source())` and
  `PipelineServices(bound_workers=runtimes)` for the routing bindings.

Deadlines: a routing or safety signal gets `signal_timeout_ms`, else the request's remaining
time less a tenth (at least 1 s), or 45 s with no visible deadline (`signal()`). The native
decision API is not a signal: its calls get its own 30 s budget less a tenth, so the router
still answers 504 `systemone_deadline_exceeded` itself when a worker is too slow.

Bundling: a request's signal-stage questions to one deployment go as one /v1/bundle within
`bundle_window_ms` (`ask()`, app/srun/stage.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any, Literal

from app.config.document import RouterConfig
from app.config.model_deployments import OnUnscanned, on_unscanned_of, read_bindings
from app.srun.client import RuntimeCallError, spread_overload
from app.srun.decision_source import DEADLINE_S, ClientDecisionSource
from app.srun.runtime_metrics import RuntimeMetrics
from app.srun.settings import (
    ModelCatalogSettings,
    RuntimeSettings,
    SrunEnvironment,
    signal_timeout_s,
    unscanned_matches,
)
from app.srun.stage import BUNDLED_SURFACES, DEFAULT_WINDOW_MS, current_stage
from app.srun.supervisor import RuntimeSupervisor

log = logging.getLogger("svc_sr.model_runtime")
SafetyModule = Literal["prompt_guard", "pii"]
_SAFETY_BINDINGS: dict[str, str] = {"prompt_guard": "prompt_guard", "pii": "pii_classifier"}
# A Router generation's workers stay up this long after a reload replaced them, so requests
# still running on the previous generation finish their signal calls.
RETIRE_GRACE_S = 30.0


def runtime_settings(config: RouterConfig) -> RuntimeSettings:
    """The router-side runtime block of a config (validated already by RouterConfig)."""
    catalog = config.global_.model_catalog
    window = catalog.get("bundle_window_ms", DEFAULT_WINDOW_MS)
    return RuntimeSettings(
        model_deployments=config.model_deployments,
        model_catalog=ModelCatalogSettings(
            signal_timeout_ms=catalog.get("signal_timeout_ms"), bundle_window_ms=window
        ),
        decision_model=config.decision_model,
    )


def on_unscanned(config: RouterConfig, module: SafetyModule) -> OnUnscanned:
    """`on_unscanned` of the prompt guard or the PII classifier (default `block`)."""
    return on_unscanned_of(config.global_.model_catalog, _SAFETY_BINDINGS[module])


def bound_deployments(config: RouterConfig) -> list[str]:
    """The model_deployments keys the config's routing bindings name, in binding order."""
    return list(dict.fromkeys(b.deployment for b in read_bindings(config.global_.model_catalog).values()))


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
    `supervisor_options` go to RuntimeSupervisor (policy: back-off and stop timeout; launch; replica_prefix)."""

    def __init__(
        self,
        settings: RuntimeSettings,
        env: SrunEnvironment | None = None,
        metrics: RuntimeMetrics | None = None,
        *,
        deployments: list[str] | None = None,
        **supervisor_options: Any,
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
        failures = self.supervisor.load_failures()
        if wait and failures:
            log.error("model runtimes failed to load: %s", failures)
        elif wait and not ready:
            log.error(
                "model runtimes not ready after %.0f s: %s",
                timeout_s or self.supervisor.env.ready_timeout_s,
                ", ".join(sorted(self.supervisor.replicas)),
            )
        self.supervisor.start_watch()
        return ready

    async def stop(self) -> None:
        await self.supervisor.stop()

    # -- what a host serves --------------------------------------------------------------

    def decision_source(self, budget_s: float = DEADLINE_S) -> ClientDecisionSource | None:
        """/v1/decisions through the `decision_model` deployment's replicas (None: not configured here)."""
        deployment = self.decision_deployment
        if deployment is None:
            return None
        return ClientDecisionSource(
            lambda: self.supervisor.client_for(deployment),
            self.supervisor.served_name(deployment),
            deadline_s=min(budget_s, signal_timeout_s(budget_s)),
            names=(deployment,),
            other=lambda client: self.supervisor.other_client(deployment, client),
        )

    def signal_deadline_s(self, remaining_s: float | None) -> float:
        return signal_timeout_s(remaining_s, self.settings.signal_timeout_ms)

    def signal_body(
        self, deployment: str, surface: str, body: dict[str, Any], safety: bool
    ) -> dict[str, Any]:
        """`body` with the deployment's served model and, for classify, its input options: the
        deployment's `input` settings, else `window` for a safety signal (read everything up to
        the scan budget) and `truncate` for a routing signal."""
        out = dict(body)
        served = self.supervisor.served_name(deployment)
        if served and "model" not in out:
            out["model"] = served
        if surface == "classify" and "options" not in out:
            limits = self.settings.model_deployments[deployment].input
            options: dict[str, Any] = {
                "overflow": (
                    limits.overflow if limits and limits.overflow else "window" if safety else "truncate"
                )
            }
            if limits is not None and limits.max_tokens is not None:
                options["max_tokens"] = limits.max_tokens
            out["options"] = options
        return out

    async def _send(
        self, deployment: str, surface: str, body: dict[str, Any], deadline_s: float
    ) -> dict[str, Any]:
        """One call to a replica of `deployment`; a busy worker's 429: another replica first."""
        return await spread_overload(
            self.supervisor.client_for(deployment),
            lambda client: self.supervisor.other_client(deployment, client),
            lambda client: client.call(
                "POST", f"/v1/{surface}", body, surface=surface, deadline_s=deadline_s
            ),
        )

    async def ask(
        self, deployment: str, surface: str, body: dict[str, Any], deadline_s: float
    ) -> dict[str, Any]:
        """A question of the current request's stage (app/srun/stage.py): collected with the
        stage's other questions to `deployment` and sent as one /v1/bundle within
        `bundle_window_ms`; sent alone when bundling is off (0), outside a stage, or for a
        surface a bundle does not carry. Stage calls count in
        svc_model_runtime_stage_decision_calls_total{deployment, round}."""
        stage = current_stage()
        window_s = self.settings.model_catalog.bundle_window_ms / 1000
        if stage is None:
            return await self._send(deployment, surface, body, deadline_s)
        if window_s <= 0 or surface not in BUNDLED_SURFACES:
            self.metrics.inc(
                "svc_model_runtime_stage_decision_calls_total",
                deployment=deployment,
                round=stage.round(deployment),
            )
            return await self._send(deployment, surface, body, deadline_s)
        send = functools.partial(self._send, deployment)
        return await stage.ask(deployment, surface, body, deadline_s, send, self.metrics, window_s)

    async def signal(
        self,
        deployment: str,
        surface: str,
        body: dict[str, Any],
        remaining_s: float | None,
        *,
        safety: bool = False,
        on_error_matches: bool = False,
        unscanned: OnUnscanned = "block",
    ) -> SignalResult:
        """One signal call with the signal deadline. A safety signal whose input was not read in
        full (no answer: a deadline missed, the worker down or refusing; or `tokens_lower_bound`
        in usage) is `unscanned` and matches as on_unscanned says; a routing signal's failure is
        `error` and matches as on_error says."""
        try:
            payload = self.signal_body(deployment, surface, body, safety)
            deadline_s = self.signal_deadline_s(remaining_s)
            answer = await self.ask(deployment, surface, payload, deadline_s)
        except Exception as exc:  # RuntimeCallError, or a transport or decoding failure
            code = exc.code if isinstance(exc, RuntimeCallError) else type(exc).__name__
            if safety:
                return SignalResult(
                    "unscanned", matches=unscanned_matches(unscanned, on_error_matches), error=code
                )
            return SignalResult("error", matches=on_error_matches, error=code)
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if safety and isinstance(usage, dict) and usage.get("tokens_lower_bound"):
            return SignalResult(
                "unscanned", answer, unscanned_matches(unscanned, on_error_matches), error="read_in_part"
            )
        return SignalResult("ok", answer)


class ModelLoadFailed(RuntimeError):
    """A reload's bound model failed to load (the previous generation keeps serving)."""


class BindingRuntimes:
    """The workers a routing configuration's bindings call, for one host that reloads its
    configuration (a Router replica): `update(config)` returns the ManagedRuntimes serving the
    config's bound deployments (None when it binds none), keeping running ones whose deployments'
    settings are unchanged (only the signal deadline is taken from the new config) and starting
    new ones otherwise (sockets in SVC_SRUN_DIR/<replica>/b<n>/). Others keep running until
    `settle(runtimes)` says which generation serves now; they are then stopped after `grace_s`,
    so requests still on the previous generation finish their calls."""

    def __init__(
        self,
        replica: str = "local",
        metrics: RuntimeMetrics | None = None,
        env: SrunEnvironment | None = None,
        *,
        grace_s: float = RETIRE_GRACE_S,
        **supervisor_options: Any,
    ) -> None:
        self.replica = replica
        self.metrics = metrics or RuntimeMetrics()
        self.env = env
        self.grace_s = grace_s
        self.options = supervisor_options
        self.current: ManagedRuntimes | None = None
        self._live: dict[str, ManagedRuntimes] = {}  # by the bound deployments' settings
        self._retiring: dict[str, asyncio.Task[None]] = {}
        self._generation = 0

    @staticmethod
    def _key(settings: RuntimeSettings, deployments: list[str]) -> str:
        return repr(
            [(name, settings.model_deployments[name].model_dump(mode="json")) for name in sorted(deployments)]
        )

    async def update(
        self, config: RouterConfig, wait: bool = True, *, require_loaded: bool = False
    ) -> ManagedRuntimes | None:
        """With `require_loaded` (a reload: a previous generation can keep serving), new workers
        whose model failed to load are stopped and `ModelLoadFailed` says why."""
        deployments = bound_deployments(config)
        if not deployments:
            return None
        settings = runtime_settings(config)
        key = self._key(settings, deployments)
        runtimes = self._live.get(key)
        if runtimes is not None:
            retiring = self._retiring.pop(key, None)
            if retiring is not None:
                retiring.cancel()
            runtimes.settings = settings  # the same workers; the new signal deadline
            return runtimes
        self._generation += 1
        env = (self.env or SrunEnvironment.from_env()).for_replica(self.replica, f"b{self._generation}")
        runtimes = ManagedRuntimes(
            settings,
            env,
            self.metrics,
            deployments=deployments,
            replica_prefix=f"{self.replica}/",
            **self.options,
        )
        self._live[key] = runtimes
        await runtimes.start(wait=wait)
        failures = runtimes.supervisor.load_failures()
        if require_loaded and failures:
            self._live.pop(key, None)
            await runtimes.stop()
            raise ModelLoadFailed(
                "; ".join(f"model deployment {name} did not load: {why}" for name, why in failures.items())
            )
        return runtimes

    def settle(self, runtimes: ManagedRuntimes | None) -> None:
        """`runtimes` (from `update`) serves now: retire every other generation after grace_s."""
        self.current = runtimes
        loop = asyncio.get_running_loop()
        for key, other in self._live.items():
            if other is not runtimes and key not in self._retiring:
                self._retiring[key] = loop.create_task(self._retire(key, other))

    async def _retire(self, key: str, runtimes: ManagedRuntimes) -> None:
        await asyncio.sleep(self.grace_s)
        self._live.pop(key, None)
        self._retiring.pop(key, None)
        await runtimes.stop()

    def start_watch(self) -> None:
        if self.current is not None:
            self.current.supervisor.start_watch()

    def stop_processes(self) -> None:
        """Stop every generation's workers now (blocking; the host is going away)."""
        for task in self._retiring.values():
            task.cancel()
        for runtimes in self._live.values():
            runtimes.supervisor.stop_processes()
        self._live.clear()
        self._retiring.clear()

    async def stop(self) -> None:
        for task in self._retiring.values():
            task.cancel()
        await asyncio.gather(*(r.stop() for r in self._live.values()))
        self._live.clear()
        self._retiring.clear()
        self.current = None
