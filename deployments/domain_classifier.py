"""DomainClassifier deployment: a thin Ray Serve host for the 14-category domain classifier.

`classify(texts, vectors=None, threshold=None, fallback_category="other")`: the Router
passes the request's query vector it already got from the Embedding deployment (one
encoder pass per request), so this replica only runs the classification head. Texts
without vectors are encoded by the bound Embedding deployment (or, without one, by an
in-process encoder loaded on first need).

Batching follows deployments/embedding.py: per text, with a per-instance `@serve.batch`
queue (see that module for why); threshold and fallback are applied per caller after the
batched head, so callers with different settings share batches.

A missing or broken artifact does not fail the deployment: calls raise
ModelNotLoadedError (diagnostics answer 503 MODEL_NOT_LOADED, routing reports a signal
error) and `info()` says why.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.api.classify_models import ModelNotLoadedError
from app.models.domain import DomainClassifier as DomainModel
from app.models.domain import DomainResult
from deployments.serve_env import process_transport

log = logging.getLogger("svc_sr.domain_classifier")

DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.002


def check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, list | tuple):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] is {type(text).__name__}, not str")
    return list(texts)


def check_vectors(vectors: Any, n: int) -> np.ndarray | None:
    if vectors is None:
        return None
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim == 1 and n == 1:
        array = array.reshape(1, -1)
    if array.ndim != 2 or array.shape[0] != n:
        raise ValueError(f"vectors must have shape ({n}, dim), got {array.shape}")
    return array


async def encode_missing(texts: list[str], embedding: DeploymentHandle | None, local: Any) -> np.ndarray:
    """Vectors for texts that came without any: the Embedding deployment, else `local()`'s encoder."""
    if embedding is not None:
        return np.asarray(await embedding.embed.remote(texts), dtype=np.float32)
    encoder = local()
    return await asyncio.to_thread(encoder.encode, texts)


@serve.deployment(max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0.1})
class DomainClassifier:
    def __init__(self, embedding: DeploymentHandle | None = None) -> None:
        self._embedding = process_transport(embedding)
        self._model: DomainModel | None = None
        self._error: str | None = None
        try:
            self._model = DomainModel()
        except Exception as exc:  # serve what we can; calls say the model is not loaded
            self._error = f"{type(exc).__name__}: {exc}"
            log.error("domain classifier not loaded: %s", self._error)
        # What callers see: the failure's kind, not server paths (those stay in the log and info()).
        self._public_error = self._error.split(":", 1)[0] if self._error else None
        self._classify_one = serve.batch(
            max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S
        )(self._classify_batch)

    def _require(self) -> DomainModel:
        if self._model is None:
            raise ModelNotLoadedError(f"domain classifier not loaded ({self._public_error})")
        return self._model

    async def _classify_batch(self, items: list[tuple[str, np.ndarray]]) -> list[DomainResult]:
        model = self._require()
        texts = [text for text, _ in items]
        vectors = np.stack([vector for _, vector in items])
        return await asyncio.to_thread(model.classify_vectors, vectors, texts)

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
        items = check_texts(texts)
        given = check_vectors(vectors, len(items))
        if threshold is not None and (isinstance(threshold, bool) or not 0.0 <= float(threshold) <= 1.0):
            raise ValueError(f"threshold must be within [0, 1], got {threshold!r}")
        model = self._require()
        if not items:
            return []
        if given is None:
            given = await encode_missing(items, self._embedding, lambda: model.encoder)
        results = await asyncio.gather(*(self._classify_one((t, v)) for t, v in zip(items, given, strict=True)))
        out = []
        for text, result in zip(items, results, strict=True):
            category = result.category
            if not text.strip() or (threshold is not None and result.confidence < threshold):
                category = fallback_category
            out.append({"category": category, "confidence": result.confidence,
                        "probabilities": result.probabilities})
        return out

    async def info(self) -> dict[str, Any]:
        return {
            "name": "domain_classifier",
            "loaded": self._model is not None,
            "error": self._error,
            "model": self._model.info() if self._model is not None else None,
        }
