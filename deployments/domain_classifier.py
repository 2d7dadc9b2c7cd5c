"""DomainClassifier deployment: Ray Serve glue around `HostedDomain` (app/runtime/hosted.py),
which serves the registry's domain-classifier model, the engine object svc-srun serves.

`classify(texts, vectors=None, threshold=None, fallback_category="other")`: the Router
passes the request's query vector it already got from the Embedding deployment (one
encoder pass per request), so this replica only runs the classification head. Texts
without vectors are encoded by the bound Embedding deployment (or, without one, by the
model's own encoder).

Batching follows deployments/embedding.py: per text, with a per-instance `@serve.batch`
queue. A missing or broken artifact does not fail the deployment: calls raise
ModelNotLoadedError (diagnostics answer 503 MODEL_NOT_LOADED, routing reports a signal
error) and `info()` says why.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.runtime.hosted import DEFAULT_MAX_BATCH_SIZE, NO_BATCH_WAIT_S, Encode, HostedDomain
from deployments.ray_compat import call, process_transport
from deployments.rollout import SHUTDOWN_POLL_S, SURGE_PERCENT


def embedding_encoder(embedding: DeploymentHandle | None) -> Encode | None:
    """The bound Embedding deployment as an encoder (None when the graph binds none)."""
    handle = process_transport(embedding)
    if handle is None:
        return None

    async def encode(texts: list[str]) -> np.ndarray:
        return np.asarray(await call(handle, "embed", texts, retries=1), dtype=np.float32)

    return encode


@serve.deployment(
    max_ongoing_requests=1024,
    ray_actor_options={"num_cpus": 0.1},
    max_surge_percent=SURGE_PERCENT,
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
class DomainClassifier:
    def __init__(self, embedding: DeploymentHandle | None = None) -> None:
        self._hosted = HostedDomain.load(embedding_encoder(embedding))
        self._classify_one = serve.batch(
            max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=NO_BATCH_WAIT_S
        )(self._classify_batch)

    async def _classify_batch(self, items: list[tuple[str, np.ndarray]]) -> list[Any]:
        return await asyncio.to_thread(self._hosted.head_batch, items)

    async def classify(
        self,
        texts: list[str],
        vectors: np.ndarray | list[list[float]] | None = None,
        threshold: float | None = None,
        fallback_category: str = "other",
    ) -> list[dict[str, Any]]:
        """DomainResult dicts {category, confidence, probabilities}, one per text.

        Below `threshold` (or for a blank text) the category is `fallback_category`.
        TypeError/ValueError on bad input; ModelNotLoadedError when the artifact is missing.
        """
        return await self._hosted.classify(texts, vectors, threshold, fallback_category, self._classify_one)

    async def info(self) -> dict[str, Any]:
        return self._hosted.info()
