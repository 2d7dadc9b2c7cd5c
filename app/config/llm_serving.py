"""`providers.models[].llm_config`: a model served by vLLM inside the Serve application.

Field names follow Ray Serve LLM's `LLMConfig`, so a user of ray.serve.llm writes the same
block: `model_loading_config` (model_id, model_source), `engine_kwargs` (vLLM engine
arguments by name), `accelerator_type`, `deployment_config` (Serve deployment options:
num_replicas, autoscaling_config, max_ongoing_requests, ray_actor_options) and
`runtime_env` (e.g. `py_executable`, the interpreter of an environment with vLLM). The
model's `backend_refs`, when it has any, are the HTTP fallback behind the in-cluster engine.

This module only imports pydantic: the vLLM replica, in its own environment, validates the
same block.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The deployment options Serve takes from a config (the rest would be code: refused here).
DEPLOYMENT_OPTION_KEYS = frozenset(
    {
        "num_replicas",
        "autoscaling_config",
        "max_ongoing_requests",
        "max_queued_requests",
        "ray_actor_options",
        "placement_group_bundles",
        "placement_group_strategy",
        "health_check_period_s",
        "health_check_timeout_s",
        "graceful_shutdown_timeout_s",
        "graceful_shutdown_wait_loop_s",
        "max_surge_percent",
        "rolling_update_percentage",
    }
)
# Where the vLLM environment's interpreter is, when the config does not say
# (scripts/vllm-venv.sh makes one); unset: the replicas' own interpreter.
VLLM_PYTHON_ENV = "SVC_SR_VLLM_PYTHON"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ModelLoadingConfig(_Strict):
    model_id: str | None = Field(
        None, description="The name vLLM serves it under (default: the model's name)."
    )
    model_source: str = Field(
        min_length=1, description="A local checkpoint directory (or a hub id already cached)."
    )


class LLMServingConfig(_Strict):
    model_loading_config: ModelLoadingConfig
    llm_engine: str = "vLLM"
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    accelerator_type: str | None = Field(None, description="A Ray accelerator type, e.g. L4, A10G, H100.")
    deployment_config: dict[str, Any] = Field(default_factory=dict)
    runtime_env: dict[str, Any] = Field(default_factory=dict)

    @field_validator("llm_engine")
    @classmethod
    def _vllm_only(cls, value: str) -> str:
        if value.strip().lower() != "vllm":
            raise ValueError(f"llm_engine {value!r}: only vLLM is supported")
        return "vLLM"

    @field_validator("deployment_config")
    @classmethod
    def _known_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - DEPLOYMENT_OPTION_KEYS)
        if unknown:
            raise ValueError(
                f"unknown deployment option(s) {unknown}; allowed: {sorted(DEPLOYMENT_OPTION_KEYS)}"
            )
        return value

    def served_name(self, model_name: str) -> str:
        return self.model_loading_config.model_id or model_name

    def deployment_options(self) -> dict[str, Any]:
        """Serve options of the model's deployment: deployment_config, the accelerator as a
        resource and the vLLM environment's interpreter."""
        options = dict(self.deployment_config)
        actor = dict(options.get("ray_actor_options") or {})
        if self.accelerator_type:
            actor.setdefault("accelerator_type", self.accelerator_type)
        runtime_env = {**(actor.get("runtime_env") or {}), **self.runtime_env}
        python = os.environ.get(VLLM_PYTHON_ENV)
        if python and "py_executable" not in runtime_env:
            runtime_env["py_executable"] = python
        if runtime_env:
            actor["runtime_env"] = runtime_env
        if actor:
            options["ray_actor_options"] = actor
        return options
