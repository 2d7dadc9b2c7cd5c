"""DomainClassifier deployment: Ray Serve glue around the domain classifier's in-process engine
(app/runtime/local_engines.py over `HostedDomain`, app/runtime/hosted.py), the engine object
svc-srun serves.

`classify(family, request)`: the signal interface (app/runtime/signal_engine.py) that
`HandleEngine` callers use (deployments/signal_engines.py); `family` is `domain`. The Router
passes the request's query vector it already holds (one encoder pass per request), so this
replica only runs the classification head. Texts without vectors are encoded by the bound
Embedding deployment (or, without one, by the model's own encoder).

Batching follows deployments/embedding.py: per text, with a per-instance `@serve.batch`
queue. A missing or broken artifact does not fail the deployment: calls raise
ModelNotLoadedError (diagnostics answer 503 MODEL_NOT_LOADED, routing reports a signal
error) and `info()` says why.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.runtime.hosted import DEFAULT_MAX_BATCH_SIZE, NO_BATCH_WAIT_S, Batched, Encode, HostedDomain
from app.runtime.local_engines import BatchFn, LocalEngines, domain_engine
from app.runtime.signal_engine import SignalItem, SignalRequest
from app.runtime.threads import limit_blas_threads
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


def serve_batch(fn: BatchFn) -> Batched:
    """A per-instance `@serve.batch` queue over a host's batch function. The model deployments'
    queues wait for no batch-mates: a batch is what queued while the previous one ran."""
    return serve.batch(max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=NO_BATCH_WAIT_S)(fn)


@serve.deployment(
    max_ongoing_requests=1024,
    ray_actor_options={"num_cpus": 0.1},
    max_surge_percent=SURGE_PERCENT,
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
class DomainClassifier:
    def __init__(self, embedding: DeploymentHandle | None = None) -> None:
        limit_blas_threads()  # app/runtime/threads.py
        self._hosted = HostedDomain.load(embedding_encoder(embedding))
        self._engines = LocalEngines({"domain": domain_engine(self._hosted, serve_batch)})

    async def classify(self, family: str, request: SignalRequest) -> list[SignalItem]:
        """label_probabilities, one item per text. TypeError/ValueError on bad input;
        ModelNotLoadedError when the artifact is missing."""
        return await self._engines.classify(family, request)

    async def info(self) -> dict[str, Any]:
        return self._hosted.info()
