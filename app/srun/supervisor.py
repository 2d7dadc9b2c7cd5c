"""Router-managed model runtimes: start `svc-srun run` worker processes on Unix sockets,
keep them running, or attach to workers run elsewhere (docs/model-runtime.md, "Router-managed runtimes").

- A process that exits is restarted after 1 s, doubling to 60 s after repeated failures
  (`app.common.supervisor.SupervisedProcess`); a run of 30 s resets the back-off.
- Model load retries (5 s doubling to 300 s, 5 attempts) happen inside the worker
  (`--load-attempts`, `--load-retry-seconds`). A worker whose every model failed reports
  `failed` on /health; the health watch then ends it so it is restarted. A worker still
  serving any model keeps running (`degraded`).
- Stop: SIGTERM, then SIGKILL after 10 s, logged as `runtime_process_killed`.
- Deployments sharing a `process` share one worker; each entry of `replicas[]` is its own
  worker (or attachment). `client_for(deployment)` hands out replicas round-robin, ready ones first.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.common.supervisor import RestartPolicy, SupervisedProcess
from app.config.model_deployments import ModelDeployment
from app.srun.admission import OFFLINE_ENV
from app.srun.client import SrunClient
from app.srun.runtime_metrics import RuntimeMetrics
from app.srun.settings import RuntimeSettings, SrunEnvironment

log = logging.getLogger("svc_sr.model_runtime")
MANAGED_MAX_REQUEST_BYTES = 64 * 1024 * 1024
HEALTH_INTERVAL_S = 1.0


class RuntimeProcess(SupervisedProcess):
    """SupervisedProcess whose forced stop is logged as `runtime_process_killed`."""

    def _on_kill(self, process: subprocess.Popen[bytes]) -> None:
        log.warning(
            "runtime_process_killed name=%s pid=%s after %.0f s",
            self.name,
            process.pid,
            self.policy.stop_timeout_s,
        )


@dataclass
class Replica:
    deployment: str
    index: str
    client: SrunClient
    process: RuntimeProcess | None = None  # None: attached to an endpoint
    served_name: str | None = None
    ready: bool = False
    failure: str | None = None  # why its model failed to load (not retried), from /health


@dataclass
class ManagedProcessSpec:
    key: str
    models: list[str]
    device: str
    socket: Path
    deployments: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WorkerLaunch:
    """How a managed worker loads its models: attempts and first retry delay (the worker
    doubles it), and extra `svc-srun run` arguments."""

    load_attempts: int = 5
    load_retry_seconds: float = 5.0
    extra_args: tuple[str, ...] = ()


def worker_command(
    spec: ManagedProcessSpec, env: SrunEnvironment, launch: WorkerLaunch | None = None
) -> list[str]:
    launch = launch or WorkerLaunch()
    return [
        *env.command,
        "run",
        *spec.models,
        "--uds",
        str(spec.socket),
        "--device",
        spec.device,
        "--threads",
        str(env.cpu_threads),
        "--result-cache-entries",
        str(env.result_cache),
        "--max-request-bytes",
        str(MANAGED_MAX_REQUEST_BYTES),
        "--load-attempts",
        str(launch.load_attempts),
        "--load-retry-seconds",
        str(launch.load_retry_seconds),
        *(["--cache-dir", str(env.cache_dir)] if env.cache_dir is not None else []),
        *(["--autotune-cache", str(env.autotune_cache)] if env.autotune_cache is not None else []),
        *launch.extra_args,
    ]


class RuntimeSupervisor:
    def __init__(
        self,
        settings: RuntimeSettings,
        env: SrunEnvironment | None = None,
        metrics: RuntimeMetrics | None = None,
        *,
        policy: RestartPolicy | None = None,
        launch: WorkerLaunch | None = None,
        replica_prefix: str = "",
    ) -> None:
        self.settings = settings
        # Prefixes the `replica` metric label, so that several hosts (Ray replicas) each running
        # their own workers push distinct series to one metrics endpoint.
        self.replica_prefix = replica_prefix
        self.env = env or SrunEnvironment.from_env()
        self.metrics = metrics or RuntimeMetrics()
        self._own_dir: tempfile.TemporaryDirectory[str] | None = None
        if self.env.dir is None:
            self._own_dir = tempfile.TemporaryDirectory(prefix="svc-srun-")
            self.dir = Path(self._own_dir.name)
        else:
            self.dir = self.env.dir
            self.dir.mkdir(parents=True, exist_ok=True)
        self.replicas: dict[str, list[Replica]] = {}
        self._processes: dict[str, tuple[RuntimeProcess, SrunClient]] = {}
        self._rr: dict[str, itertools.count[int]] = {}
        self._watch: asyncio.Task[None] | None = None
        self._policy = policy or RestartPolicy()
        self._launch = launch or WorkerLaunch()
        self._plan()

    # -- layout --------------------------------------------------------------------------

    def process_specs(self) -> list[ManagedProcessSpec]:
        specs: dict[str, ManagedProcessSpec] = {}
        for name, dep in self.settings.model_deployments.items():
            for index, placement in enumerate(dep.placements()):
                if placement.endpoint is not None:
                    continue
                device = placement.device or "auto"
                key = f"{dep.process or name}-{index}" if dep.replicas else (dep.process or name)
                spec = specs.setdefault(
                    key, ManagedProcessSpec(key, [], device, self.dir / f"{_safe(key)}.sock")
                )
                artifact = dep.artifact if not dep.revision else f"{dep.artifact}@{dep.revision}"
                if artifact not in spec.models:
                    spec.models.append(artifact)
                spec.deployments.append(name)
        return list(specs.values())

    def _plan(self) -> None:
        for spec in self.process_specs():
            process = RuntimeProcess(
                f"srun-{spec.key}",
                worker_command(spec, self.env, self._launch),
                log_path=self.dir / f"{_safe(spec.key)}.log",
                # The worker exits when this process is gone (killed hard, no stop()): no orphans.
                # Offline switches without `--offline`: that flag ends a worker when one of its
                # models is missing, and a managed process keeps serving the models it has.
                env={"SVC_SRUN_PARENT_PID": str(os.getpid()), **dict.fromkeys(OFFLINE_ENV, "1")},
                policy=self._policy,
                on_restart=self._on_restart(spec.key),
            )
            self._processes[spec.key] = (process, SrunClient(uds=str(spec.socket), metrics=self.metrics))
        for name, dep in self.settings.model_deployments.items():
            replicas = []
            for index, placement in enumerate(dep.placements()):
                label = f"{self.replica_prefix}{index}"
                if placement.endpoint is not None:
                    client = _attach(placement.endpoint, self.metrics, name, label)
                    replicas.append(Replica(name, label, client, None, placement.served_name))
                    continue
                key = f"{dep.process or name}-{index}" if dep.replicas else (dep.process or name)
                process, shared = self._processes[key]
                client = SrunClient(uds=shared.target, deployment=name, replica=label, metrics=self.metrics)
                replicas.append(Replica(name, label, client, process, _served(dep)))
            self.replicas[name] = replicas
            self._rr[name] = itertools.count()

    def _on_restart(self, key: str) -> Callable[[int], None]:
        return lambda _restarts: self._restarted(key)

    def _restarted(self, key: str) -> None:
        for name, replicas in self.replicas.items():
            for replica in replicas:
                if replica.process is self._processes[key][0]:
                    replica.ready = False
                    self.metrics.inc("svc_model_runtime_restarts_total", deployment=name)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> RuntimeSupervisor:
        for process, _ in self._processes.values():
            process.start()
        return self

    async def wait_ready(self, timeout_s: float | None = None) -> bool:
        """True once every replica is ready (SVC_SRUN_READY_TIMEOUT by default); False at the
        timeout, or at once when a deployment's model failed to load on every replica
        (`load_failures()` says why)."""
        deadline = asyncio.get_running_loop().time() + (timeout_s or self.env.ready_timeout_s)
        while asyncio.get_running_loop().time() < deadline:
            await self.check_health()
            if all(r.ready for reps in self.replicas.values() for r in reps):
                return True
            if self.load_failures():
                return False
            await asyncio.sleep(0.1)
        return False

    def load_failures(self) -> dict[str, str]:
        """Deployments whose model failed to load on every replica (a failure the worker does
        not retry: a bad directory, its attempts used up), with the reason."""
        return {
            name: str(replicas[0].failure)
            for name, replicas in self.replicas.items()
            if replicas and all(r.failure is not None for r in replicas)
        }

    async def check_health(self) -> None:
        """Poll every replica once; end a managed worker whose every model failed."""
        seen: dict[str, dict[str, object] | None] = {}
        for name, replicas in self.replicas.items():
            for replica in replicas:
                key = replica.client.target
                if key not in seen:
                    try:
                        seen[key] = await replica.client.health()
                    except Exception:  # not up yet, restarting, or gone
                        seen[key] = None
                body = seen[key]
                status = body.get("status") if body else None
                models = body.get("models", {}) if body else {}
                mine = (models or {}).get(replica.served_name or "", {}) if isinstance(models, dict) else {}
                replica.ready = status == "ready" or (status == "degraded" and mine.get("status") == "ready")
                if isinstance(mine, dict) and mine.get("status") == "failed":
                    replica.failure = str(mine.get("message") or "failed to load")
                elif replica.ready:
                    replica.failure = None
                self.metrics.set(
                    "svc_model_runtime_replica_ready",
                    1.0 if replica.ready else 0.0,
                    deployment=name,
                    replica=replica.index,
                )
                if status == "failed" and replica.process is not None and replica.process.alive():
                    log.warning("runtime %s: every model failed to load; restarting the process", name)
                    process = replica.process.process
                    if process is not None:
                        process.terminate()
            ready = any(r.ready for r in replicas)
            self.metrics.set("svc_model_runtime_ready", 1.0 if ready else 0.0, deployment=name)

    async def watch(self, interval_s: float = HEALTH_INTERVAL_S) -> None:
        while True:
            await self.check_health()
            await asyncio.sleep(interval_s)

    def start_watch(self) -> None:
        """Start the health watch on the running loop (once: a live watch is kept)."""
        if self._watch is None or self._watch.done():
            self._watch = asyncio.get_running_loop().create_task(self.watch(), name="srun-health")

    def client_for(self, deployment: str) -> SrunClient:
        """A replica's client, round-robin over ready replicas (all replicas when none is ready:
        the client's retries then ride over a restart)."""
        replicas = self.replicas.get(deployment)
        if not replicas:
            raise KeyError(f"no model deployment {deployment!r}")
        pool = [r for r in replicas if r.ready] or replicas
        return pool[next(self._rr[deployment]) % len(pool)].client

    def other_client(self, deployment: str, than: SrunClient) -> SrunClient | None:
        """Another replica's client than `than` (ready ones first; None: it is the only one),
        for a call `than` refused as overloaded (429)."""
        replicas = [r for r in self.replicas.get(deployment) or [] if r.client is not than]
        pool = [r for r in replicas if r.ready] or replicas
        return pool[next(self._rr[deployment]) % len(pool)].client if pool else None

    def served_name(self, deployment: str) -> str | None:
        replicas = self.replicas.get(deployment) or []
        return replicas[0].served_name if replicas else None

    def stop_processes(self) -> None:
        """Stop every managed worker now (blocking; for hosts whose loop is going away). Idempotent."""
        if self._watch is not None:
            self._watch.cancel()
        for process, _ in self._processes.values():
            process.stop()

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        await asyncio.gather(*(asyncio.to_thread(p.stop) for p, _ in self._processes.values()))
        clients = {
            id(c): c
            for c in [
                *(r.client for reps in self.replicas.values() for r in reps),
                *(c for _, c in self._processes.values()),
            ]
        }
        for client in clients.values():
            await client.aclose()
        if self._own_dir is not None:
            self._own_dir.cleanup()

    def snapshot(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        return self.metrics.snapshot()


def _served(dep: ModelDeployment) -> str:
    from app.srun.catalog import canonical

    name = dep.artifact.partition("@")[0]
    try:
        return canonical(name)
    except LookupError:
        return name


def _attach(endpoint: str, metrics: RuntimeMetrics, deployment: str, replica: str) -> SrunClient:
    if endpoint.startswith("unix://"):
        return SrunClient(
            uds=endpoint.removeprefix("unix://"), metrics=metrics, deployment=deployment, replica=replica
        )
    return SrunClient(base_url=endpoint.rstrip("/"), metrics=metrics, deployment=deployment, replica=replica)


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)[:80]
