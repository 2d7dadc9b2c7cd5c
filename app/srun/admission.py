"""What the worker checks before it loads a model (docs/model-runtime.md, "The worker"), and the process
environment its options set. Nothing here loads a model or reads the network.

- family (`--family`, or the models file's `family`): every built-in has one family, its task
  (`svc-srun plugins` lists them); a forced family must be the model's, else the model fails.
- licence (`--accept-licence ID`): a model whose card marks its licence as needing acceptance
  fails unless that id was accepted. The accepted ids are reported by `/v1/models`.
- memory (`--memory-budget GIB`, or the models file's `memory_budget_gib`): the estimate is the
  size of the files the model loads on its engine (weights, heads, tokenizer; a package without
  listed files counts its installed size); a model above the budget fails before loading.
- offline (`--offline`): `offline_problems` says, per model, why it cannot be served from
  installed packages and local files; `svc-srun run --offline` exits when there is any.

A refusal is `NotReady`: the model is `failed` at once (not retried), with the reason in
`/health` and `/v1/models`; the process keeps serving its other models.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import Iterable
from pathlib import Path

from app.runtime import registry
from app.runtime.model_dir import (
    ModelDirError,
    ModelDirInfo,
    inspect_model_dir,
    looks_like_ref,
    resolve_model_ref,
)
from app.runtime.schemas import InvalidRequest, ModelNotFound, NotReady
from app.srun import catalog

GIB = 1024**3
OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def spec_of(name: str) -> registry.Builtin:
    """The built-in `name` (an alias too) names; ModelNotFound otherwise."""
    key = catalog.canonical(name)
    return registry.BUILTINS.get(key) or catalog.SPECS[key]


def licence_of(name: str) -> str | None:
    try:
        return spec_of(name).licence
    except ModelNotFound:
        return None


def families() -> list[str]:
    """The family plugins this build has: the tasks of its built-in models."""
    return sorted({str(s.task) for s in (*registry.BUILTINS.values(), *catalog.SPECS.values())})


def estimate_bytes(spec: registry.Builtin, engine: str) -> int:
    """Bytes of the files `spec` loads on `engine`: the memory it needs, roughly (weights
    dominate; activations of a batch come on top)."""
    total = 0
    for name, _version, files in spec.artifacts(engine):
        if files:
            total += sum(f.stat().st_size for f in files if f.is_file())
            continue
        # a package whose files the model does not list (spaCy's model, presidio)
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            total += sum(p.size or 0 for p in importlib.metadata.files(name) or [])
    return total


def admit(
    name: str,
    engine: str,
    device: str,
    *,
    family: str | None = None,
    memory_budget_gib: float | None = None,
    accepted_licences: Iterable[str] = (),
) -> None:
    """Raise NotReady when `name` must not load under these options (InvalidRequest for an
    engine or device it cannot use). A name the catalog does not know is left to the loader
    (which answers ModelNotFound, or serves it: in-process hosts and tests bring their own)."""
    try:
        spec = spec_of(name)
    except ModelNotFound:
        info = dir_info(name)
        if info is not None:
            _admit_dir(info, family, memory_budget_gib)
        return
    if family is not None and family != spec.task:
        raise NotReady(f"{spec.name} is a {spec.task} model; family {family!r} cannot serve it")
    if spec.licence_acceptance and spec.licence not in set(accepted_licences):
        raise NotReady(
            f"{spec.name}'s licence {spec.licence} must be accepted: run with --accept-licence {spec.licence}"
        )
    if memory_budget_gib is not None:
        chosen = registry.pick_engine(spec, engine, device)
        need = estimate_bytes(spec, chosen)
        if need > memory_budget_gib * GIB:
            raise NotReady(
                f"{spec.name} needs about {need / GIB:.3f} GiB (its files on {chosen}), "
                f"above the memory budget of {memory_budget_gib:g} GiB; not loaded"
            )


def dir_info(name: str) -> ModelDirInfo | None:
    """A model directory's checked description when `name` is not a built-in but a path or
    ORG/NAME@COMMIT (ModelDirError, a NotReady, when it cannot serve); None otherwise."""
    if catalog.is_builtin(name) or not looks_like_ref(name):
        return None
    return inspect_model_dir(resolve_model_ref(name))


def _admit_dir(info: ModelDirInfo, family: str | None, memory_budget_gib: float | None) -> None:
    if family is not None and family != info.task:
        raise NotReady(f"{info.path} is a {info.task} model; family {family!r} cannot serve it")
    if memory_budget_gib is not None:
        need = sum(f.stat().st_size for f in info.files)
        if need > memory_budget_gib * GIB:
            raise NotReady(
                f"{info.path} needs about {need / GIB:.3f} GiB (its files), "
                f"above the memory budget of {memory_budget_gib:g} GiB; not loaded"
            )


def offline_problems(models: Iterable[tuple[str, str, str]]) -> list[str]:
    """For (name, engine, device) each: why it cannot be served from installed packages and
    local files (unknown name, unusable engine, a missing file or package). Empty: all can."""
    problems = []
    for name, engine, device in models:
        try:
            if dir_info(name) is not None:
                continue  # a directory read from local files only
            spec = spec_of(name)
            chosen = registry.pick_engine(spec, engine, device)
        except (ModelNotFound, InvalidRequest, ModelDirError) as exc:
            problems.append(exc.message if isinstance(exc, ModelDirError) else f"{name}: {exc.message}")
            continue
        missing = registry.missing_artifacts(spec, chosen)
        if missing:
            problems.append(f"{name}: {missing}")
    return problems


def process_environment(
    *, offline: bool, cache_dir: Path | None, autotune_cache: Path | None
) -> dict[str, str]:
    """Environment variables `svc-srun run` sets for itself (and the libraries under it)."""
    env: dict[str, str] = {}
    if offline:
        env.update({name: "1" for name in OFFLINE_ENV})
    if cache_dir is not None:
        env["HF_HUB_CACHE"] = str(cache_dir)
    if autotune_cache is not None:
        env["SVC_SR_MODEL_CACHE"] = str(autotune_cache)  # the int8 encoder build (app/runtime/quantize.py)
    return env
