"""Guard deployment: Ray Serve glue around the guard's in-process engines
(app/runtime/local_engines.py over `HostedGuard`, app/runtime/hosted_guard.py), which serve the
registry's pii-detector and jailbreak-guard models (the engine objects svc-srun serves) and the
harmful-content head.

`classify(family, request)`: the signal interface (app/runtime/signal_engine.py) that
`HandleEngine` callers use (deployments/signal_engines.py), `family` one of `pii` (token spans),
`jailbreak` (its score and verdict at the request's method, threshold and patterns), `harmful`
(category probabilities and verdict). The Router passes the request's query vector (one
encoder pass per request); texts without one are encoded by the bound Embedding deployment (or
the model's own encoder).

Each family batches per text with its per-instance `@serve.batch` queue (deployments/embedding.py
explains why per instance); HostedGuard groups a batch by settings. Each model loads
independently: a missing artifact makes only its calls raise ModelNotLoadedError (503
MODEL_NOT_LOADED in the diagnostics), and `info()` says why.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.runtime.hosted_guard import HostedGuard
from app.runtime.local_engines import LocalEngines, guard_engines
from app.runtime.signal_engine import SignalItem, SignalRequest
from app.runtime.threads import limit_blas_threads
from deployments.domain_classifier import embedding_encoder, serve_batch
from deployments.rollout import SHUTDOWN_POLL_S, SURGE_PERCENT


@serve.deployment(
    max_ongoing_requests=1024,
    ray_actor_options={"num_cpus": 0.2},
    max_surge_percent=SURGE_PERCENT,
    graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S,
)
class Guard:
    def __init__(
        self,
        embedding: DeploymentHandle | None = None,
        pii_threshold: float | None = None,
        use_ner: bool = True,
    ) -> None:
        """`pii_threshold`: the PII cutoff for calls that pass none (None: the detector's default)."""
        limit_blas_threads()  # app/runtime/threads.py
        self._hosted = HostedGuard.load(embedding_encoder(embedding), pii_threshold, use_ner)
        self._engines = LocalEngines(guard_engines(self._hosted, serve_batch))

    async def classify(self, family: str, request: SignalRequest) -> list[SignalItem]:
        """One item per text. ValueError (PIIInputError among them) on bad input: a bad
        threshold, method, category or entity type, a text over the PII length limit;
        ModelNotLoadedError when that family's model failed to load."""
        return await self._engines.classify(family, request)

    async def info(self) -> dict[str, Any]:
        return self._hosted.info()
