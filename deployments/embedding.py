"""Embedding deployment: Ray Serve glue around `HostedEmbedding` (app/runtime/hosted.py), which
serves the registry's minilm-embedding model, the engine object svc-srun serves.

Batching is per text: `embed(texts)` enqueues each text on its own, so one batch can mix
texts from many callers (a router embeds one prompt per request) and a caller with many
texts fills several batches; the rows come back in the caller's order.

The `@serve.batch` queue is created per instance (in __init__) rather than by decorating
the method: a decorated method shares one queue, bound to one event loop, across every
instance in the process, which breaks when a process hosts the deployment twice (tests,
local testing mode). Ray 2.60's local testing mode sets no replica context, which the
batch queue reads on creation; tests/integration/test_model_deployments.py shows the
workaround.

Resources (`num_cpus`, replicas, autoscaling) come from the graph builder's options; the
decorator only sets what correctness needs.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol, cast

import numpy as np
import ray
from ray import serve

from app.runtime.hosted import HostedEmbedding
from app.runtime.threads import limit_blas_threads
from deployments.rollout import SHUTDOWN_POLL_S, SURGE_PERCENT


class TunableBatch(Protocol):
    """What `serve.batch` returns: the batched call plus its runtime knobs (not in its stubs)."""

    def __call__(self, text: str) -> Awaitable[np.ndarray]: ...

    def set_max_batch_size(self, value: int) -> None: ...

    def set_batch_wait_timeout_s(self, value: float) -> None: ...


def replica_device(device: str) -> str:
    """`auto`: CUDA when Serve gave this replica a GPU (`num_gpus` in its options, as in
    cluster/serve-config-gpu.yaml), else CPU; the same engine code runs on either."""
    if device != "auto":
        return device
    return "cuda" if ray.get_gpu_ids() else "cpu"


@serve.deployment(
    max_ongoing_requests=256,
    ray_actor_options={"num_cpus": 0.25},
    max_surge_percent=SURGE_PERCENT,
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
class Embedding:
    def __init__(self, engine: str = "auto", device: str = "auto") -> None:
        limit_blas_threads()  # app/runtime/threads.py
        self._hosted = HostedEmbedding.load(engine, replica_device(device))
        tuning = self._hosted.tuning
        batch = serve.batch(
            max_batch_size=tuning.max_batch_size, batch_wait_timeout_s=tuning.batch_wait_timeout_s
        )
        self._encode_one = cast(TunableBatch, batch(self._hosted.encode_batch))

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Accepts {max_batch_size, batch_wait_timeout_s}; raises ValueError on bad values."""
        tuning = self._hosted.tuning_from(user_config)
        self._encode_one.set_max_batch_size(tuning.max_batch_size)
        self._encode_one.set_batch_wait_timeout_s(tuning.batch_wait_timeout_s)
        self._hosted.tuning = tuning

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, shape (len(texts), dim). TypeError on non-string input."""
        return await self._hosted.embed(texts, self._encode_one)

    async def count_tokens(self, text: str) -> int:
        """Tokens including [CLS]/[SEP], as the encoder sees them (so capped at max_tokens)."""
        return await self._hosted.count_tokens(text)

    async def info(self) -> dict[str, Any]:
        return self._hosted.info()
