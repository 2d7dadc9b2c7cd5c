"""Router-side settings for model-runtime deployments (docs/model-runtime.md, "Router-managed
runtimes"): the runtime block a host runs (`RuntimeSettings`: the `model_deployments` entries,
`global.model_catalog.signal_timeout_ms`, `decision_model.deployment`), signal deadlines,
`on_unscanned`, and the SVC_SRUN_* environment. The config shapes themselves (deployments,
bindings, their checks) are in app/config/model_deployments.py.

A deployment is managed (the router starts `svc-srun run` over a Unix socket) unless it names
an `endpoint`, in which case the router attaches to a worker run elsewhere. Deployments with
the same `process` share one managed worker process.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from app.common.durations import parse_duration
from app.config.model_deployments import (
    DecisionModelRef,
    ModelDeployment,
    OnUnscanned,
    StrictSettings,
    check_references,
)

DEFAULT_SIGNAL_TIMEOUT_S = 45.0
MIN_SIGNAL_TIMEOUT_S = 1.0


class ModelCatalogSettings(StrictSettings):
    signal_timeout_ms: int | None = Field(default=None, ge=1)
    # How long a stage's questions to one deployment wait for each other before going as one
    # /v1/bundle (app/srun/stage.py); 0 sends each question alone.
    bundle_window_ms: float = Field(default=2.0, ge=0, le=50)


class RuntimeSettings(StrictSettings):
    """The router-side block: deployments, the catalog deadline and the decision model."""

    model_deployments: dict[str, ModelDeployment] = Field(default_factory=dict)
    model_catalog: ModelCatalogSettings = Field(default_factory=ModelCatalogSettings)
    decision_model: DecisionModelRef | None = None

    @model_validator(mode="after")
    def _refs(self) -> RuntimeSettings:
        check_references(self.model_deployments, self.decision_model)
        return self

    @property
    def signal_timeout_ms(self) -> int | None:
        return self.model_catalog.signal_timeout_ms


def signal_timeout_s(remaining_s: float | None, configured_ms: int | None = None) -> float:
    """Deadline for a model-runtime signal: the configured value, else the request's remaining
    time less a tenth (at least 1 s), or 45 s when the request shows no deadline."""
    if configured_ms is not None:
        return configured_ms / 1000.0
    if remaining_s is None:
        return DEFAULT_SIGNAL_TIMEOUT_S
    return max(MIN_SIGNAL_TIMEOUT_S, remaining_s - remaining_s / 10.0)


def unscanned_matches(on_unscanned: OnUnscanned, on_error_matches: bool) -> bool:
    """Whether content that was not read in full matches the safety signal: `block` -> yes;
    `allow` -> as the signal's on_error says."""
    return True if on_unscanned == "block" else on_error_matches


class SrunEnvironment(BaseModel):
    """SVC_SRUN_* variables (docs/model-runtime.md). HUB_TOKEN is read from the environment only and never
    shown: `repr` and `model_dump` exclude it."""

    command: list[str] = Field(default_factory=lambda: ["svc-srun"])
    dir: Path | None = None  # None: a private temporary directory, made by the supervisor
    cache_dir: Path | None = None
    cpu_threads: int = 1
    ready_timeout_s: float = 600.0
    result_cache: int = 4096
    autotune_cache: Path | None = None
    hub_token: str | None = Field(default=None, exclude=True, repr=False)

    def for_replica(self, replica: str, *parts: str) -> SrunEnvironment:
        """This environment for one host replica (and generation): sockets under
        SVC_SRUN_DIR/<replica>/<parts...>, so hosts on one node never share socket paths."""
        if self.dir is None:  # each supervisor makes its own private directory
            return self
        return self.model_copy(update={"dir": self.dir.joinpath(replica, *parts)})

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, cpu_budget: int | None = None) -> SrunEnvironment:
        env = os.environ if env is None else env
        budget = max(1, cpu_budget or _cpu_budget())
        threads = max(1, min(16, budget // 2))
        raw_threads = env.get("SVC_SRUN_CPU_THREADS", "").strip()
        if raw_threads.isdigit() and int(raw_threads) > 0:
            threads = min(int(raw_threads), budget)
        try:
            ready = parse_duration(env.get("SVC_SRUN_READY_TIMEOUT") or "10m") or 600.0
        except ValueError:
            ready = 600.0
        raw_cache = env.get("SVC_SRUN_RESULT_CACHE", "").strip()
        return cls(
            command=shlex.split(env["SVC_SRUN_COMMAND"])
            if env.get("SVC_SRUN_COMMAND")
            else default_command(),
            dir=Path(env["SVC_SRUN_DIR"]) if env.get("SVC_SRUN_DIR") else None,
            cache_dir=Path(env["SVC_SRUN_CACHE_DIR"]) if env.get("SVC_SRUN_CACHE_DIR") else None,
            cpu_threads=threads,
            ready_timeout_s=ready,
            result_cache=int(raw_cache) if raw_cache.isdigit() else 4096,
            autotune_cache=Path(env["SVC_SRUN_AUTOTUNE_CACHE"])
            if env.get("SVC_SRUN_AUTOTUNE_CACHE")
            else None,
            hub_token=env.get("HUB_TOKEN") or None,
        )


def default_command() -> list[str]:
    """`svc-srun`: on PATH, else next to this interpreter (a virtualenv's bin/, which a Ray
    worker or a service manager may not have on PATH)."""
    if shutil.which("svc-srun"):
        return ["svc-srun"]
    sibling = Path(sys.executable).parent / "svc-srun"
    return [str(sibling)] if sibling.is_file() else ["svc-srun"]


def _cpu_budget() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
