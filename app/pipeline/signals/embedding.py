"""Embedding signals: `routing.signals.embeddings[]`.

Each rule holds candidate phrases; the query (the human's ask) matches when its cosine
similarity to the candidates, aggregated by `aggregation_method`, reaches `threshold`:
- `max` (default): best similarity >= threshold;
- `mean` / `avg`: mean similarity over all candidates >= threshold;
- `any`: at least one candidate >= threshold (same outcome as `max`).
The confidence is the aggregated similarity (the best one for `max`/`any`), reported
also when the rule does not match, so `NOT` and previews can use it.

Candidates are embedded once per config (at warm-up, or lazily on the first request)
into one matrix; a request costs one query embedding (shared with the cache and any
other signal through `SignalContext.semantic_vector`) and one matrix-vector product.
Vectors of phrases are kept in a phrase -> vector cache shared across config
versions, so a hot reload only embeds phrases it has not seen.

The space is the graph's MiniLM, or the encoder an `embedding` binding names
(app/srun/worker_embedder.py, docs/model-runtime.md "Bindings to your own models"): then the
candidates are embedded by that encoder, into a phrase cache of its own per encoder digest
(`bound`), kept across config versions as the graph's is.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import numpy as np

from app.config.document import RouterConfig
from app.config.signals import EmbeddingSignal
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import EmbedFn, SignalContext, error_matches


class BoundEncoder(Protocol):
    """The `embedding` binding's encoder as these rules use it (app/srun/worker_embedder.py)."""

    @property
    def identity(self) -> str: ...

    async def embed(self, texts: list[str]) -> np.ndarray: ...


FAMILY = "embedding"
EMBED_CHUNK = 64  # the encoder's efficient batch size on CPU


class EmbeddingEvaluator:
    family = FAMILY

    def __init__(
        self,
        rules: list[EmbeddingSignal],
        embed: EmbedFn | None,
        phrase_cache: dict[str, np.ndarray] | None = None,
    ) -> None:
        self._rules = {rule.name: rule for rule in rules}
        self._embed = embed
        self._phrase_cache = phrase_cache if phrase_cache is not None else {}
        self._matrix: np.ndarray | None = None
        self._slices: dict[str, slice] = {}
        self._lock = asyncio.Lock()
        self._space: tuple[BoundEncoder, dict[str, dict[str, np.ndarray]]] | None = None

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> EmbeddingEvaluator:
        embed = getattr(services, "embed", None)
        cache = getattr(services, "phrase_cache", None)
        return cls(config.routing.signals.embeddings, embed, cache)

    @classmethod
    def bound(
        cls, config: RouterConfig, encoder: BoundEncoder, caches: dict[str, dict[str, np.ndarray]]
    ) -> EmbeddingEvaluator:
        """The rules over a bound encoder: its phrase vectors are its own, kept across config
        versions per encoder digest (read at warm-up: the config's warm-up reads the encoder's
        card first), so a reload with the same encoder embeds only new phrases."""
        evaluator = cls(config.routing.signals.embeddings, encoder.embed, None)
        evaluator._space = (encoder, caches)
        return evaluator

    def rule_names(self) -> list[str]:
        return list(self._rules)

    @property
    def ready(self) -> bool:
        return self._matrix is not None or not self._rules

    async def warm_up(self) -> None:
        if self._matrix is not None or not self._rules:
            return
        async with self._lock:
            if self._matrix is not None:
                return
            if self._embed is None:
                raise RuntimeError("embedding signals need an embedding service")
            if self._space is not None:
                encoder, caches = self._space
                # only a digest names the weights; a name alone may stand for another model after a swap
                if encoder.identity.startswith("sha256:"):
                    self._phrase_cache = caches.setdefault(encoder.identity, {})
            phrases: list[str] = []
            slices: dict[str, slice] = {}
            for name, rule in self._rules.items():
                slices[name] = slice(len(phrases), len(phrases) + len(rule.candidates))
                phrases.extend(rule.candidates)
            missing = list(dict.fromkeys(p for p in phrases if p not in self._phrase_cache))
            for start in range(0, len(missing), EMBED_CHUNK):
                chunk = missing[start : start + EMBED_CHUNK]
                vectors = np.asarray(await self._embed(chunk), dtype=np.float32)
                if vectors.shape[0] != len(chunk):
                    raise RuntimeError(
                        f"embedding service returned {vectors.shape[0]} vectors for {len(chunk)} texts"
                    )
                for phrase, vector in zip(chunk, vectors, strict=True):
                    self._phrase_cache[phrase] = vector
            self._slices = slices
            self._matrix = np.stack([self._phrase_cache[p] for p in phrases]).astype(np.float32)

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = frozenset(n for n in names if n in self._rules)
        out = [
            SignalMatch(
                type=FAMILY, name=n, matched=False, confidence=0.0, error=f"no embedding rule named {n!r}"
            )
            for n in sorted(names - known)
        ]
        if not known:
            return out
        if not ctx.text:  # nothing to compare: a clean non-match, not an error
            return out + [
                SignalMatch(
                    type=FAMILY, name=n, matched=False, confidence=0.0, detail={"reason": "no user text"}
                )
                for n in sorted(known)
            ]
        texts = {name: ctx.whole_text_for(self._rules[name].read) for name in known}
        try:
            await self.warm_up()
            # the ask's vector is the request's one semantic vector; a rule reading more parts
            # embeds its text beside it, once per request (SignalContext.semantic_part_vectors)
            vectors = await ctx.semantic_part_vectors([t for t in set(texts.values()) if t != ctx.text])
            if ctx.text in texts.values():
                vectors[ctx.text] = await ctx.semantic_vector()
        except Exception as exc:  # the encoder being down is a signal error, not a 500
            return out + error_matches(FAMILY, known, f"embedding failed: {exc}")
        assert self._matrix is not None
        for name in sorted(known):
            sims = self._matrix[self._slices[name]] @ vectors[texts[name]]
            out.append(self._judge(self._rules[name], sims))
        return out

    @staticmethod
    def _judge(rule: EmbeddingSignal, sims: np.ndarray) -> SignalMatch:
        best_index = int(np.argmax(sims))
        best = float(sims[best_index])
        # max / any: the same test, and the best similarity is the score
        score = float(np.mean(sims)) if rule.aggregation_method in ("mean", "avg") else best
        matched = score >= rule.threshold
        detail = {
            "similarity": round(score, 4),
            "best_candidate": rule.candidates[best_index],
            "best_similarity": round(best, 4),
            "aggregation": rule.aggregation_method,
        }
        return SignalMatch(
            type=FAMILY, name=rule.name, matched=matched, confidence=max(0.0, min(1.0, score)), detail=detail
        )
