"""Router-side settings for model-runtime deployments (spec 2 "Router settings for managed
runtimes"): the `model_deployments` entries, `global.model_catalog.signal_timeout_ms`,
`on_unscanned`, `decision_model.deployment`, the bindings of routing features to deployments,
and the SVC_SRUN_* environment.

A deployment is managed (the router starts `svc-srun run` over a Unix socket) unless it names
an `endpoint`, in which case the router attaches to a worker run elsewhere. Deployments with
the same `process` share one managed worker process.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.common.durations import parse_duration

_COMMIT = re.compile(r"[0-9a-f]{40}")
DEFAULT_SIGNAL_TIMEOUT_S = 45.0
MIN_SIGNAL_TIMEOUT_S = 1.0
QUESTION_MODELS = frozenset({"decision-model", "decisions", "systemone"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputSettings(_Strict):
    max_tokens: int | None = Field(default=None, ge=3)
    overflow: Literal["reject", "truncate", "window"] | None = None


class ReplicaSettings(_Strict):
    """One worker placement: a managed `device`, or an `endpoint` (+ `served_name`) to attach to."""

    device: str | None = None
    endpoint: str | None = None
    served_name: str | None = None

    @model_validator(mode="after")
    def _one_placement(self) -> ReplicaSettings:
        if (self.device is None) == (self.endpoint is None):
            raise ValueError("a replica names either device or endpoint")
        if self.served_name is not None and self.endpoint is None:
            raise ValueError("served_name goes with endpoint")
        return self


class ModelDeployment(_Strict):
    provider: Literal["model_runtime"] = "model_runtime"
    artifact: str = Field(min_length=1, description="built-in name, hub repository or absolute local path")
    revision: str | None = None
    device: str | None = None
    profile: str | None = None
    process: str | None = None
    input: InputSettings | None = None
    replicas: list[ReplicaSettings] | None = None
    endpoint: str | None = None
    served_name: str | None = None

    @field_validator("revision")
    @classmethod
    def _immutable(cls, value: str | None) -> str | None:
        if value is not None and not _COMMIT.fullmatch(value):
            raise ValueError("revision must be an immutable 40-character commit")
        return value

    @model_validator(mode="after")
    def _check(self) -> ModelDeployment:
        if self.replicas is not None:
            if not self.replicas:
                raise ValueError("replicas: give at least one replica or leave it out")
            placed = [k for k in ("device", "endpoint", "served_name") if getattr(self, k) is not None]
            if placed:
                raise ValueError(f"replicas[] is not combined with deployment-level {', '.join(placed)}")
        if self.endpoint is not None and self.process is not None:
            raise ValueError("process applies to managed deployments, not to an endpoint")
        if self.revision is not None and Path(self.artifact).is_absolute():
            raise ValueError("revision applies to hub artifacts, not to a local path")
        if self.answers_questions and self.input is not None:
            if self.input.overflow not in (None, "window"):
                raise ValueError("input.overflow: a deployment that answers questions takes only window")
            if self.input.max_tokens is None:
                raise ValueError("input.max_tokens: required (the scan budget) for a question-answering deployment")
        return self

    @property
    def answers_questions(self) -> bool:
        return self.artifact.partition("@")[0] in QUESTION_MODELS

    @property
    def managed(self) -> bool:
        if self.replicas is not None:
            return any(r.endpoint is None for r in self.replicas)
        return self.endpoint is None

    def placements(self) -> list[ReplicaSettings]:
        if self.replicas is not None:
            return list(self.replicas)
        if self.endpoint is not None:
            return [ReplicaSettings(endpoint=self.endpoint, served_name=self.served_name)]
        return [ReplicaSettings(device=self.device or "auto")]


class ModelCatalogSettings(_Strict):
    signal_timeout_ms: int | None = Field(default=None, ge=1)


class DecisionModelRef(_Strict):
    deployment: str = Field(min_length=1)


OnUnscanned = Literal["block", "allow"]


class RuntimeSettings(_Strict):
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


# -- bindings: a routing feature evaluated by a model_deployments entry -------------------------

Contract = Literal["label_probabilities", "label_scores", "token_spans"]
BINDING_KEYS = ("deployment", "contract", "head")


class ModelBinding(_Strict):
    """`deployment` (a key of model_deployments), `contract` (the answer type read) and `head`
    (the label whose score is read; prompt_guard only, default `jailbreak`)."""

    deployment: str = Field(min_length=1)
    contract: Contract | None = None
    head: str | None = Field(default=None, min_length=1)


@dataclass(frozen=True)
class BindingSpec:
    path: tuple[str, ...]  # under global.model_catalog
    contracts: tuple[str, ...]  # the first is the default
    family: str  # the routing signal family it evaluates
    safety: bool  # a safety signal: on_unscanned applies
    head: str | None = None  # default head; None: the binding takes none


# The bindings the routing pipeline consumes. Each sits in its module's own section, where the
# reference layout keeps that module's settings (legacy `prompt_guard`, `classifier.category_model`,
# `classifier.pii_model` migrate there unchanged).
BINDINGS: dict[str, BindingSpec] = {
    "domain_classifier": BindingSpec(("modules", "classifier", "domain"), ("label_probabilities",), "domain", False),
    "pii_classifier": BindingSpec(("modules", "classifier", "pii"), ("token_spans",), "pii", True),
    "prompt_guard": BindingSpec(("modules", "prompt_guard"), ("label_scores", "label_probabilities"), "jailbreak",
                                True, head="jailbreak"),
}


def catalog_node(catalog: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """`global.model_catalog.<path>` as a dict ({} when absent or not a mapping)."""
    node: Any = catalog
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, dict) else {}


def read_bindings(catalog: Mapping[str, Any]) -> dict[str, ModelBinding]:
    """The bindings set in `global.model_catalog` by binding name. ValueError naming the path
    (relative to global.model_catalog) for a malformed one."""
    out: dict[str, ModelBinding] = {}
    for name, spec in BINDINGS.items():
        section = catalog_node(catalog, spec.path)
        given = {key: section[key] for key in BINDING_KEYS if key in section}
        if not given:
            continue
        where = ".".join(spec.path)
        try:
            binding = ModelBinding.model_validate(given)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "deployment"
            raise ValueError(f"{where}.{field}: {first['msg']}") from None
        if binding.contract is not None and binding.contract not in spec.contracts:
            raise ValueError(f"{where}.contract: {name} reads {' or '.join(spec.contracts)}, "
                             f"got {binding.contract!r}")
        if binding.head is not None and spec.head is None:
            raise ValueError(f"{where}.head: {name} reads no head (head applies to prompt_guard)")
        out[name] = binding
    return out


def on_unscanned_of(catalog: Mapping[str, Any], binding: str) -> OnUnscanned:
    """`on_unscanned` of a safety binding's module (default `block`)."""
    return "allow" if catalog_node(catalog, BINDINGS[binding].path).get("on_unscanned") == "allow" else "block"


def check_references(
    model_deployments: Mapping[str, ModelDeployment], decision_model: DecisionModelRef | None,
    bindings: Mapping[str, ModelBinding] | None = None,
) -> None:
    """ValueError unless decision_model and every binding name a deployment and shared processes
    share a device (also checked by the router config, app/config/models.py)."""
    if decision_model is not None and decision_model.deployment not in model_deployments:
        raise ValueError(f"decision_model.deployment: {decision_model.deployment!r} is not a key of model_deployments")
    for name, binding in (bindings or {}).items():
        if binding.deployment not in model_deployments:
            where = ".".join(("global", "model_catalog", *BINDINGS[name].path, "deployment"))
            raise ValueError(f"{where}: {binding.deployment!r} is not a key of model_deployments ({name} binding)")
    processes: dict[str, str | None] = {}
    for name, dep in model_deployments.items():
        if dep.process is None:
            continue
        device = dep.device or "auto"
        if processes.setdefault(dep.process, device) != device:
            raise ValueError(f"model_deployments.{name}: process {dep.process!r} is shared by different devices")


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
    """SVC_SRUN_* variables (spec 2). HUB_TOKEN is read from the environment only and never
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
            command=shlex.split(env["SVC_SRUN_COMMAND"]) if env.get("SVC_SRUN_COMMAND") else default_command(),
            dir=Path(env["SVC_SRUN_DIR"]) if env.get("SVC_SRUN_DIR") else None,
            cache_dir=Path(env["SVC_SRUN_CACHE_DIR"]) if env.get("SVC_SRUN_CACHE_DIR") else None,
            cpu_threads=threads,
            ready_timeout_s=ready,
            result_cache=int(raw_cache) if raw_cache.isdigit() else 4096,
            autotune_cache=Path(env["SVC_SRUN_AUTOTUNE_CACHE"]) if env.get("SVC_SRUN_AUTOTUNE_CACHE") else None,
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
