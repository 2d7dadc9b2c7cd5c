"""The Guard deployment's Ray-free state: the pii-detector and jailbreak-guard engine models
(app/runtime/tasks.py) and the harmful-content head (app/models/harmful.py, a head on the same
MiniLM vector, so it rides along without an engine model of its own), each loaded independently (a missing artifact makes only its calls
raise ModelNotLoadedError), and the two methods' checks and batching.

A batch groups its items by settings (entity types and threshold; method, threshold and
pattern lists) and makes one model call per group; a group that fails hands its error to
its own callers only. See app/runtime/hosted.py for the shared conventions.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Hashable
from typing import Any, cast

import numpy as np

from app.models.harmful import HarmfulClassifier, check_categories
from app.models.jailbreak import METHODS, Method
from app.models.pii import DEFAULT_MAX_CHARS, PII_ENTITY_TYPES, PIIInputError
from app.runtime.hosted import (
    Batched,
    Encode,
    Loaded,
    check_texts,
    check_threshold,
    check_vectors,
    encode_texts,
    expect_type,
)
from app.runtime.registry import load_model
from app.runtime.tasks import LabelScoreModel, SpanModel

# The Guard's per-text limit: the detector's own default, below the engine's window-sized
# pii-detector limit, so a diagnostics call cannot stall a replica on one huge text.
GUARD_PII_MAX_CHARS = DEFAULT_MAX_CHARS

# The signal families a HostedGuard serves.
GUARD_FAMILIES = frozenset({"pii", "jailbreak", "harmful"})

PIIItem = tuple[str, tuple[str, ...] | None, float | None]
JailbreakItem = tuple[str, np.ndarray, Method, float | None, tuple[str, ...], tuple[str, ...]]
HarmfulItem = tuple[str, np.ndarray, float | None, tuple[str, ...]]


async def grouped(
    items: list[Any], key: Callable[[Any], Hashable], run: Callable[[list[Any]], list[Any]]
) -> list[Any]:
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


def raise_errors(results: list[Any]) -> None:
    for result in results:
        if isinstance(result, BaseException):
            raise result


def check_entity_types(entity_types: Any) -> tuple[str, ...] | None:
    """Sorted, de-duplicated type names (None for all); PIIInputError for unknown ones."""
    if not entity_types:
        return None
    if isinstance(entity_types, str):
        raise PIIInputError("entity_types must be a list of type names")
    unknown = sorted(set(entity_types) - set(PII_ENTITY_TYPES))
    if unknown:
        raise PIIInputError(f"unknown entity types: {', '.join(unknown)}")
    return tuple(sorted(set(entity_types)))


class HostedGuard:
    """PII detection and jailbreak detection for the Guard deployment.

    `pii_threshold`: the cutoff for calls that pass none (None: the detector's default)."""

    def __init__(
        self,
        pii: Loaded[SpanModel],
        jailbreak: Loaded[LabelScoreModel],
        encode: Encode | None = None,
        pii_threshold: float | None = None,
        harmful: Loaded[HarmfulClassifier] | None = None,
    ) -> None:
        self.pii = pii
        self.jailbreak = jailbreak
        self.harmful = (
            harmful if harmful is not None else Loaded("harmful-content classifier", None, "not loaded")
        )
        self.encode = encode
        self.pii_threshold = check_threshold(pii_threshold)

    @classmethod
    def load(
        cls,
        encode: Encode | None = None,
        pii_threshold: float | None = None,
        use_ner: bool = True,
        families: frozenset[str] = GUARD_FAMILIES,
    ) -> HostedGuard:
        """The guard's models; only `families` are loaded (a host that judges only the vector
        heads, the Router, skips spaCy and Presidio), the others answer ModelNotLoadedError."""

        def pii() -> SpanModel:
            return expect_type(load_model("pii-detector", use_ner=use_ner), SpanModel)

        def jailbreak() -> LabelScoreModel:
            # The Router hands this host a vector with every text: no encoder unless one is missing.
            return expect_type(load_model("jailbreak-guard", lazy_encoder=True), LabelScoreModel)

        def harmful() -> HarmfulClassifier:
            # No encoder given: the head builds the shared one only if a call comes without vectors.
            return HarmfulClassifier()

        def loaded(family: str, label: str, build: Callable[[], Any]) -> Loaded[Any]:
            if family not in families:
                return Loaded(label, None, "NotHosted: served by another deployment")
            return Loaded.load(label, build)

        return cls(
            loaded("pii", "PII detector", pii),
            loaded("jailbreak", "jailbreak guard", jailbreak),
            encode,
            pii_threshold,
            loaded("harmful", "harmful-content classifier", harmful),
        )

    # -------------------------------------------------------------- PII

    async def pii_batch(self, items: list[PIIItem]) -> list[Any]:
        model = self.pii.require()

        def run(group: list[PIIItem]) -> list[Any]:
            _, types, threshold = group[0]
            return model.detect([text for text, _, _ in group], list(types) if types else None, threshold)

        return await grouped(items, lambda item: (item[1], item[2]), run)

    async def detect_pii(
        self, texts: Any, entity_types: Any, threshold: Any, batched: Batched
    ) -> list[dict[str, Any]]:
        """PIIResult dicts {has_pii, entities[...], masked_text}, one per text.

        PIIInputError (a ValueError) for a bad threshold, an unknown entity type or a text
        over the length limit; ModelNotLoadedError when spaCy/Presidio failed to load."""
        items = check_texts(texts)
        cutoff = check_threshold(threshold)
        if cutoff is None:
            cutoff = self.pii_threshold
        self.pii.require()
        types = check_entity_types(entity_types)
        for index, text in enumerate(items):  # checked here so one bad text fails only its caller
            if len(text) > GUARD_PII_MAX_CHARS:
                raise PIIInputError(
                    f"texts[{index}] has {len(text)} characters; the limit is {GUARD_PII_MAX_CHARS}"
                )
        results = await asyncio.gather(*(batched((text, types, cutoff)) for text in items))
        raise_errors(results)
        return [r.model_dump() for r in results]

    # -------------------------------------------------------------- jailbreak

    async def jailbreak_batch(self, items: list[JailbreakItem]) -> list[Any]:
        model = self.jailbreak.require()

        def run(group: list[JailbreakItem]) -> list[Any]:
            _, _, method, threshold, jailbreak, benign = group[0]
            vectors = np.stack([item[1] for item in group])
            texts = [item[0] for item in group]
            return model.detect_vectors(
                vectors, texts, method, threshold, list(jailbreak) or None, list(benign) or None
            )

        return await grouped(items, lambda item: item[2:], run)

    async def detect_jailbreak(
        self,
        texts: Any,
        vectors: Any,
        method: Any,
        threshold: Any,
        jailbreak_patterns: Any,
        benign_patterns: Any,
        batched: Batched,
    ) -> list[dict[str, Any]]:
        """JailbreakResult dicts {is_jailbreak, score, confidence, method, patterns_detected,
        detection_types}, one per text. ValueError on an unknown method or a bad threshold."""
        items = check_texts(texts)
        given = check_vectors(vectors, len(items))
        if method not in METHODS:
            raise ValueError(f"unknown jailbreak method {method!r}; expected one of {METHODS}")
        cutoff = check_threshold(threshold)
        patterns = tuple(check_texts(list(jailbreak_patterns or [])))
        benign = tuple(check_texts(list(benign_patterns or [])))
        model = self.jailbreak.require()
        if not items:
            return []
        given = await self._vectors_for(items, given, model)
        chosen = cast(Method, method)
        results = await asyncio.gather(
            *(
                batched((text, vector, chosen, cutoff, patterns, benign))
                for text, vector in zip(items, given, strict=True)
            )
        )
        raise_errors(results)
        return [r.model_dump() for r in results]

    async def _vectors_for(self, items: list[str], given: np.ndarray | None, model: Any) -> np.ndarray:
        """The request's vectors, or one encoder pass for texts that came without (the
        jailbreak guard and the harmful classifier read the same MiniLM vector)."""
        if given is not None:
            return given
        vectors = np.zeros((len(items), model.dim), np.float32)
        live = [i for i, text in enumerate(items) if text.strip()]  # blank texts need no encoder pass
        if live:
            vectors[live] = await encode_texts([items[i] for i in live], self.encode, model.encoder.encode)
        return vectors

    # -------------------------------------------------------------- harmful content

    async def harmful_batch(self, items: list[HarmfulItem]) -> list[Any]:
        model = self.harmful.require()

        def run(group: list[HarmfulItem]) -> list[Any]:
            _, _, threshold, categories = group[0]
            vectors = np.stack([item[1] for item in group])
            return model.detect_vectors(vectors, [item[0] for item in group], threshold, list(categories))

        return await grouped(items, lambda item: item[2:], run)

    async def detect_harmful(
        self, texts: Any, vectors: Any, threshold: Any, categories: Any, batched: Batched
    ) -> list[dict[str, Any]]:
        """HarmfulResult dicts {is_harmful, score, confidence, category, categories,
        detection_types}, one per text. ValueError on an unknown category or a bad threshold."""
        items = check_texts(texts)
        given = check_vectors(vectors, len(items))
        cutoff = check_threshold(threshold)
        model = self.harmful.require()
        wanted = check_categories(list(categories or []), model.labels) if categories else ()
        if not items:
            return []
        given = await self._vectors_for(items, given, model)
        results = await asyncio.gather(
            *(batched((text, vector, cutoff, wanted)) for text, vector in zip(items, given, strict=True))
        )
        raise_errors(results)
        return [r.model_dump() for r in results]

    def info(self) -> dict[str, Any]:
        pii_info = None
        if self.pii.model is not None:
            # What this host enforces: its own text limit, its default cutoff.
            pii_info = self.pii.model.info() | {"max_chars": GUARD_PII_MAX_CHARS}
            if self.pii_threshold is not None:
                pii_info["threshold"] = self.pii_threshold
        jailbreak = self.jailbreak.model
        return {
            "name": "guard",
            # what this process runs its models on (the inventory's device)
            "device": jailbreak.card.device if jailbreak is not None else None,
            "pii": {"loaded": self.pii.loaded, "error": self.pii.error, "model": pii_info},
            "jailbreak": {
                "loaded": self.jailbreak.loaded,
                "error": self.jailbreak.error,
                "model": jailbreak.info() if jailbreak is not None else None,
            },
            "harmful": {
                "loaded": self.harmful.loaded,
                "error": self.harmful.error,
                "model": self.harmful.model.info() if self.harmful.model is not None else None,
            },
        }
