"""The user's own models a configuration's bindings name, checked before it is accepted
(docs/model-runtime.md "Bindings to your own models").

A binding's deployment whose `artifact` is a local directory (or a hub repository pinned to a
commit, from the managed workers' hub cache, `SVC_SRUN_CACHE_DIR`) is read from its small
files (`inspect_model_dir`: no weights load): a directory that cannot load, a model whose task
is not what the binding reads (an `embedding` binding reads `embeddings`: a sentence encoder,
never a classifier), or labels that do not fit the config's label map
(app/config/binding_checks.py) are validation errors naming the path to fix, so a bad model is
refused when the configuration is submitted, never on a request. A deployment attached to an
`endpoint` runs elsewhere and is not read here.

`check_bound_models` is the one check every entry runs: PATCH/PUT (app/management/documents.py),
`svc-sr config validate` and `svc-sr serve`'s start, before Ray starts.
"""

from __future__ import annotations

from pathlib import Path

from app.config.binding_checks import binding_path, model_label_issues
from app.config.builtin_models import builtin_task
from app.config.document import RouterConfig
from app.config.errors import ConfigError, ConfigIssue
from app.config.model_deployments import BINDINGS, ModelDeployment, read_bindings
from app.runtime.model_dir import ModelDirError, ModelDirInfo, inspect_model_dir, resolve_model_ref
from app.srun.settings import SrunEnvironment


def model_ref(deployment: ModelDeployment) -> str | None:
    """The directory or pinned hub reference a managed deployment loads; None: a built-in, or
    a deployment that only attaches to endpoints."""
    if not deployment.managed or builtin_task(deployment.artifact) is not None:
        return None
    if deployment.revision is not None:
        return f"{deployment.artifact}@{deployment.revision}"
    return deployment.artifact


def _issue(path: str, message: str, code: str) -> ConfigIssue:
    return ConfigIssue(path=path, message=message, code=code, stage="validate")


def bound_model_issues(config: RouterConfig, cache_dir: Path | None = None) -> list[ConfigIssue]:
    """Errors of the models the bindings name (none for built-ins); each model is read once."""
    rule_specs = config.rule_binding_specs()
    seen: dict[str, ModelDirInfo | None] = {}
    issues: list[ConfigIssue] = []
    for name, binding in read_bindings(config.global_.model_catalog).items():
        ref = model_ref(config.model_deployments[binding.deployment])
        if ref is None:
            continue
        if binding.deployment not in seen:
            try:
                seen[binding.deployment] = inspect_model_dir(resolve_model_ref(ref, cache_dir))
            except ModelDirError as exc:
                seen[binding.deployment] = None
                issues.append(
                    _issue(f"model_deployments.{binding.deployment}.artifact", str(exc), "model_dir")
                )
        info = seen[binding.deployment]
        if info is None:
            continue
        spec = rule_specs.get(name) or BINDINGS[name]
        wanted = binding.contract or spec.contracts[0]
        if info.task != wanted:
            issues.append(
                _issue(
                    f"{binding_path(spec)}.deployment",
                    f"the model at {info.path} answers {info.task}; the {name} binding reads {wanted}"
                    + (f" (set contract: {info.task})" if info.task in spec.contracts else ""),
                    "binding_contract",
                )
            )
        elif spec.family in ("domain", "pii"):
            issues += model_label_issues(config, name, info.served_labels, str(info.path))
    return issues


def check_bound_models(config: RouterConfig, source: str = "<memory>") -> None:
    """ConfigError naming each bound model that cannot load or does not fit its binding, read
    through the managed workers' hub cache (SVC_SRUN_CACHE_DIR)."""
    issues = bound_model_issues(config, SrunEnvironment.from_env().cache_dir)
    if issues:
        raise ConfigError(issues, source=source)
