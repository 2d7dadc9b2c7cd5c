"""In-cluster LLMs: one LLMServer deployment per `providers.models[]` entry with `llm_config`,
and the LLMServers deployment that keeps them in the graph.

LLMServer is a thin host over app/llm/vllm_engine.py's VLLMEngine (as Ray Serve LLM's
LLMServer hosts its VLLMEngine): it starts the engine in the constructor and answers
`exchange()`, one HTTP request to vLLM's own OpenAI app, streamed back as the response head
and then the body's chunks. Its replicas run in the vLLM environment (`runtime_env`
`py_executable`, scripts/vllm-venv.sh), so this module imports nothing but Ray and app.llm.

The front doors never bind the LLMServer handles: they reach a deployment by name
(deployments/llm_transport.py), so adding a model does not change the Ingress's arguments.
LLMServers anchors them in the graph (Serve deploys what the ingress reaches) and is bound
to the Router, whose arguments change only when the first in-cluster model is added.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.llm.asgi_call import ResponseHead
from app.llm.vllm_engine import VLLMEngine

log = logging.getLogger("svc_sr.llm_server")


@serve.deployment(
    max_ongoing_requests=64,
    ray_actor_options={"num_cpus": 1},
    # The first start loads the model (and compiles kernels on a GPU): minutes, not seconds.
    health_check_period_s=10,
    health_check_timeout_s=60,
    graceful_shutdown_timeout_s=30,
)
class LLMServer:
    # The replica takes requests once the engine is up.
    async def __init__(self, model_source: str, model_id: str, engine_kwargs: dict[str, Any]) -> None:  # type: ignore[misc]  # Serve awaits async constructors
        self._engine = VLLMEngine(model_source, model_id, engine_kwargs)
        await self._engine.start()

    async def exchange(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> AsyncIterator[dict[str, Any] | bytes]:
        """One request to vLLM's OpenAI API: {"status", "headers"} first, then body chunks."""
        async for item in self._engine.exchange(method, path, headers, body):
            if isinstance(item, ResponseHead):
                yield {"status": item.status, "headers": item.headers}
            else:
                yield item

    async def check_health(self) -> None:
        await self._engine.check_health()

    async def process(self) -> dict[str, Any]:
        """Where this replica runs: its pid and Python environment (the vLLM one)."""
        return {"pid": os.getpid(), "prefix": sys.prefix, "model_id": self._engine.model_id}

    async def __del__(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            await engine.shutdown()


@serve.deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 0})
class LLMServers:
    """Holds the graph's LLMServer deployments as arguments, so Serve deploys them; nothing
    calls it (front doors reach each LLMServer by name)."""

    def __init__(self, servers: dict[str, DeploymentHandle]) -> None:
        del servers
