"""Guard deployment: a thin Ray Serve host for the PII detector and the jailbreak guard.

- `detect_pii(texts, entity_types=None, threshold=None)` -> PIIResult dicts;
- `detect_jailbreak(texts, vectors=None, method="classifier", threshold=None,
  jailbreak_patterns=None, benign_patterns=None)` -> JailbreakResult dicts. The Router
  passes the request's query vector (one encoder pass per request); texts without one
  are encoded by the bound Embedding deployment (or an in-process encoder).

Both batch per text with per-instance `@serve.batch` queues (deployments/embedding.py
explains why per instance); a batch groups its items by settings (entity types and
threshold; method, threshold and pattern lists) and makes one model call per group. A
group that fails hands its error to its own callers only.

Each model loads independently: a missing artifact makes only its calls raise
ModelNotLoadedError (503 MODEL_NOT_LOADED in the diagnostics), and `info()` says why.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from app.api.classify_models import ModelNotLoadedError
from app.models.jailbreak import METHODS, JailbreakGuard, JailbreakResult
from app.models.pii import PII_ENTITY_TYPES, PIIDetector, PIIInputError, PIIResult
from deployments.domain_classifier import check_texts, check_vectors, encode_missing
from deployments.serve_env import process_transport

log = logging.getLogger("svc_sr.guard")

DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.002

PIIItem = tuple[str, tuple[str, ...] | None, float | None]
JailbreakItem = tuple[str, np.ndarray, str, float | None, tuple[str, ...], tuple[str, ...]]


def _load(name: str, build: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return build(), None
    except Exception as exc:  # serve what we can; calls to this model say it is not loaded
        error = f"{type(exc).__name__}: {exc}"
        log.error("%s not loaded: %s", name, error)
        return None, error


def _kind(error: str | None) -> str:
    """The failure's kind for callers; paths and details stay in the log and info()."""
    return (error or "unknown").split(":", 1)[0]


def _check_threshold(threshold: Any) -> float | None:
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a number within [0, 1], got {threshold!r}")
    return float(threshold)


async def _grouped(items: list[Any], key: Callable[[Any], Hashable], run: Callable[[list[Any]], list[Any]]) -> list[Any]:
    """One `run(group)` per settings group (in a thread); a failing group returns its exception."""
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for index, item in enumerate(items):
        groups[key(item)].append(index)
    out: list[Any] = [None] * len(items)
    for indices in groups.values():
        try:
            results = await asyncio.to_thread(run, [items[i] for i in indices])
        except Exception as exc:
            results = [exc] * len(indices)
        for i, result in zip(indices, results, strict=True):
            out[i] = result
    return out


def _raise_errors(results: list[Any]) -> None:
    for result in results:
        if isinstance(result, BaseException):
            raise result


@serve.deployment(max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0.2})
class Guard:
    def __init__(self, embedding: DeploymentHandle | None = None, pii_threshold: float = 0.5,
                 use_ner: bool = True) -> None:
        self._embedding = process_transport(embedding)
        self._pii, self._pii_error = _load("PII detector", lambda: PIIDetector(pii_threshold, use_ner=use_ner))
        self._jailbreak, self._jailbreak_error = _load("jailbreak guard", JailbreakGuard)
        batch = serve.batch(max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S)
        self._pii_one = batch(self._pii_batch)
        self._jailbreak_one = batch(self._jailbreak_batch)

    # -------------------------------------------------------------- PII
    def _pii_model(self) -> PIIDetector:
        if self._pii is None:
            raise ModelNotLoadedError(f"PII detector not loaded ({_kind(self._pii_error)})")
        return self._pii

    async def _pii_batch(self, items: list[PIIItem]) -> list[Any]:
        detector = self._pii_model()

        def run(group: list[PIIItem]) -> list[PIIResult]:
            _, types, threshold = group[0]
            return detector.detect_many([text for text, _, _ in group], list(types) if types else None, threshold)

        return await _grouped(items, lambda item: (item[1], item[2]), run)

    async def detect_pii(
        self, texts: list[str], entity_types: list[str] | None = None, threshold: float | None = None
    ) -> list[dict[str, Any]]:
        """PIIResult dicts {has_pii, entities[...], masked_text}, one per text.

        PIIInputError (a ValueError) for a bad threshold, an unknown entity type or a text
        over the detector's length limit; ModelNotLoadedError when spaCy/Presidio failed to load.
        """
        items = check_texts(texts)
        cutoff = _check_threshold(threshold)
        detector = self._pii_model()
        types: tuple[str, ...] | None = None
        if entity_types:
            if isinstance(entity_types, str):
                raise PIIInputError("entity_types must be a list of type names")
            unknown = sorted(set(entity_types) - set(PII_ENTITY_TYPES))
            if unknown:
                raise PIIInputError(f"unknown entity types: {', '.join(unknown)}")
            types = tuple(sorted(set(entity_types)))
        for index, text in enumerate(items):  # checked here so one bad text fails only its caller
            if len(text) > detector.max_chars:
                raise PIIInputError(f"texts[{index}] has {len(text)} characters; the limit is {detector.max_chars}")
        results = await asyncio.gather(*(self._pii_one((text, types, cutoff)) for text in items))
        _raise_errors(results)
        return [r.model_dump() for r in results]

    # -------------------------------------------------------------- jailbreak
    def _jailbreak_model(self) -> JailbreakGuard:
        if self._jailbreak is None:
            raise ModelNotLoadedError(f"jailbreak guard not loaded ({_kind(self._jailbreak_error)})")
        return self._jailbreak

    async def _jailbreak_batch(self, items: list[JailbreakItem]) -> list[Any]:
        guard = self._jailbreak_model()

        def run(group: list[JailbreakItem]) -> list[JailbreakResult]:
            _, _, method, threshold, jailbreak, benign = group[0]
            vectors = np.stack([item[1] for item in group])
            return guard.detect_vectors(vectors, [item[0] for item in group], method, threshold,  # type: ignore[arg-type]
                                        list(jailbreak) or None, list(benign) or None)

        return await _grouped(items, lambda item: item[2:], run)

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
        items = check_texts(texts)
        given = check_vectors(vectors, len(items))
        if method not in METHODS:
            raise ValueError(f"unknown jailbreak method {method!r}; expected one of {METHODS}")
        cutoff = _check_threshold(threshold)
        patterns = tuple(check_texts(list(jailbreak_patterns or [])))
        benign = tuple(check_texts(list(benign_patterns or [])))
        guard = self._jailbreak_model()
        if not items:
            return []
        if given is None:
            given = np.zeros((len(items), 384), np.float32)
            live = [i for i, text in enumerate(items) if text.strip()]  # blank texts need no encoder pass
            if live:
                given[live] = await encode_missing([items[i] for i in live], self._embedding, lambda: guard.encoder)
        results = await asyncio.gather(*(
            self._jailbreak_one((text, vector, method, cutoff, patterns, benign))
            for text, vector in zip(items, given, strict=True)
        ))
        _raise_errors(results)
        return [r.model_dump() for r in results]

    async def info(self) -> dict[str, Any]:
        return {
            "name": "guard",
            "pii": {"loaded": self._pii is not None, "error": self._pii_error,
                    "model": self._pii.info() if self._pii is not None else None},
            "jailbreak": {"loaded": self._jailbreak is not None, "error": self._jailbreak_error,
                          "model": self._jailbreak.info() if self._jailbreak is not None else None},
        }
