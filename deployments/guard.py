"""Guard deployment: Ray Serve glue around `HostedGuard` (app/runtime/hosted_guard.py), which
serves the registry's pii-detector and jailbreak-guard models, the engine objects svc-srun
serves.

- `detect_pii(texts, entity_types=None, threshold=None)` -> PIIResult dicts;
- `detect_jailbreak(texts, vectors=None, method="classifier", threshold=None,
  jailbreak_patterns=None, benign_patterns=None)` -> JailbreakResult dicts. The Router
  passes the request's query vector (one encoder pass per request); texts without one
  are encoded by the bound Embedding deployment (or the model's own encoder).

Both batch per text with per-instance `@serve.batch` queues (deployments/embedding.py
explains why per instance); HostedGuard groups a batch by settings. Each model loads
independently: a missing artifact makes only its calls raise ModelNotLoadedError (503
MODEL_NOT_LOADED in the diagnostics), and `info()` says why.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.runtime.hosted import DEFAULT_MAX_BATCH_SIZE, NO_BATCH_WAIT_S
from app.runtime.hosted_guard import HostedGuard
from deployments.domain_classifier import embedding_encoder
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
        self._hosted = HostedGuard.load(embedding_encoder(embedding), pii_threshold, use_ner)
        batch = serve.batch(max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=NO_BATCH_WAIT_S)
        self._pii_one = batch(self._hosted.pii_batch)
        self._jailbreak_one = batch(self._hosted.jailbreak_batch)
        self._harmful_one = batch(self._hosted.harmful_batch)

    async def detect_pii(
        self, texts: list[str], entity_types: list[str] | None = None, threshold: float | None = None
    ) -> list[dict[str, Any]]:
        """PIIResult dicts {has_pii, entities[...], masked_text}, one per text.

        PIIInputError (a ValueError) for a bad threshold, an unknown entity type or a text
        over the length limit; ModelNotLoadedError when spaCy/Presidio failed to load.
        """
        return await self._hosted.detect_pii(texts, entity_types, threshold, self._pii_one)

    async def detect_jailbreak(
        self,
        texts: list[str],
        vectors: np.ndarray | list[list[float]] | None = None,
        method: str = "classifier",
        threshold: float | None = None,
        jailbreak_patterns: list[str] | None = None,
        benign_patterns: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        """JailbreakResult dicts {is_jailbreak, score, confidence, method, patterns_detected,
        detection_types}, one per text. ValueError on an unknown method or a bad threshold."""
        return await self._hosted.detect_jailbreak(
            texts, vectors, method, threshold, jailbreak_patterns, benign_patterns, self._jailbreak_one
        )

    async def detect_harmful(
        self,
        texts: list[str],
        vectors: np.ndarray | list[list[float]] | None = None,
        threshold: float | None = None,
        categories: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        """HarmfulResult dicts {is_harmful, score, confidence, category, categories,
        detection_types}, one per text. ValueError on an unknown category or a bad threshold."""
        return await self._hosted.detect_harmful(texts, vectors, threshold, categories, self._harmful_one)

    async def info(self) -> dict[str, Any]:
        return self._hosted.info()
