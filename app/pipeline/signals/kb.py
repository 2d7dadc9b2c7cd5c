"""Knowledge-base signals: `routing.signals.kb[]` ({name, kb, threshold, labels[], method, top_k}).

A rule names a knowledge base of labelled exemplars (kept in the management store, see
kb_data.py); the request's vector (the same one the embedding signal uses: one encoder pass
per request) is compared with the base's exemplar vectors and the winning label is the
signal's value (detail `label`). The rule matches when that label is one of `labels` (any,
when empty) and its score reaches `threshold`; the confidence is the score.

Knowledge bases live outside the configuration document (they are created through
/api/v1/storage/knowledge-bases, and change without a config version), so a rule naming a
base that does not exist or is not active yet does not fail validation: it does not match and
says why in its detail (`warning`). Without a knowledge-base store in this process the rules
error (the decision's on_error decides).

`KnowledgeBaseFeed` is what a Router replica holds: the store's revision is checked at most
every `refresh_s`, and a base is (re)read only when it turned active with a new content hash,
so a request costs one matrix-vector product per rule.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from app.config.document import RouterConfig
from app.config.signals import KnowledgeBaseSignal
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext, error_matches
from app.pipeline.signals.kb_data import KbVectors, KnowledgeBasesDocument, LoadedKb, score_labels

log = logging.getLogger("svc_sr.pipeline.kb")

FAMILY = "kb"
KB_REFRESH_S = 1.0


class KnowledgeBaseSource(Protocol):
    """What a feed reads (app/storage/knowledge_bases.py KnowledgeBaseStore)."""

    def revision(self) -> int: ...

    def load(self) -> KnowledgeBasesDocument: ...

    def vectors(self, name: str) -> KbVectors | None: ...


class KnowledgeBaseFeed:
    """The active knowledge bases a Router replica last read (see the module doc)."""

    def __init__(
        self,
        source: KnowledgeBaseSource,
        refresh_s: float = KB_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.refresh_s = refresh_s
        self._clock = clock
        self._revision = -1
        self._checked_at: float | None = None
        self._loaded: dict[str, LoadedKb] = {}
        self._lock = asyncio.Lock()

    async def current(self) -> dict[str, LoadedKb]:
        """The active bases, re-read first when the last check is older than `refresh_s`;
        a store that fails leaves the bases last read."""
        now = self._clock()
        if self._checked_at is None or now - self._checked_at >= self.refresh_s:
            async with self._lock:
                if self._checked_at is None or self._clock() - self._checked_at >= self.refresh_s:
                    await self.refresh()
        return self._loaded

    async def refresh(self) -> None:
        self._checked_at = self._clock()
        try:
            revision = await asyncio.to_thread(self.source.revision)
            if revision != self._revision:
                self._loaded = await asyncio.to_thread(self._read)
                self._revision = revision
        except Exception as exc:  # the store down or corrupt: keep scoring on what we have
            log.warning("knowledge bases not refreshed (%s); using the last ones read", exc)

    def _read(self) -> dict[str, LoadedKb]:
        document = self.source.load()
        loaded: dict[str, LoadedKb] = {}
        for name, base in document.bases.items():
            kept = self._loaded.get(name)
            if base.status != "active":
                # an update being embedded: keep serving what was active before it
                if kept is not None and base.operation == "update" and kept.content_hash == base.active_hash:
                    loaded[name] = kept
                continue
            if kept is not None and kept.content_hash == base.content_hash:
                loaded[name] = kept
                continue
            vectors = self.source.vectors(name)
            if vectors is None or vectors.content_hash != base.content_hash:
                continue  # written before the base turned active: never pair other entries
            matrix = vectors.matrix()
            if matrix.shape[0] == len(base.entries):
                loaded[name] = LoadedKb(base, matrix)
        return loaded


class KnowledgeBaseEvaluator:
    family = FAMILY

    def __init__(self, rules: list[KnowledgeBaseSignal], feed: KnowledgeBaseFeed | None) -> None:
        self._rules = {rule.name: rule for rule in rules}
        self._feed = feed

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> KnowledgeBaseEvaluator:
        return cls(config.routing.signals.kb, getattr(services, "knowledge_bases", None))

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        if self._rules and self._feed is not None:
            await self._feed.current()

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = frozenset(n for n in names if n in self._rules)
        out = error_matches(FAMILY, names - known, "no kb rule with that name")
        if not known:
            return out
        if self._feed is None:
            return out + error_matches(FAMILY, known, "no knowledge-base store in this process")
        if not ctx.text:
            return out + [
                SignalMatch(
                    type=FAMILY, name=n, matched=False, confidence=0.0, detail={"reason": "no user text"}
                )
                for n in sorted(known)
            ]
        try:
            bases = await self._feed.current()
            query = await ctx.query_vector()
        except Exception as exc:  # the encoder down is a signal error, not a 500
            return out + error_matches(FAMILY, known, f"kb failed: {exc}")
        for name in sorted(known):
            out.append(self._judge(self._rules[name], bases.get(self._rules[name].kb), query))
        return out

    @staticmethod
    def _judge(rule: KnowledgeBaseSignal, kb: LoadedKb | None, query: Any) -> SignalMatch:
        if kb is None or len(kb) == 0:
            warning = f"knowledge base {rule.kb!r} does not exist, is not active yet, or is empty"
            return SignalMatch(
                type=FAMILY, name=rule.name, matched=False, confidence=0.0, detail={"warning": warning}
            )
        scores, detail = score_labels(kb, query, rule.method, rule.top_k)
        label = max(scores, key=scores.__getitem__)
        score = scores[label]
        matched = score >= rule.threshold and (not rule.labels or label in rule.labels)
        detail = {**detail, "label": label, "similarity": round(score, 4), "method": rule.method}
        return SignalMatch(
            type=FAMILY, name=rule.name, matched=matched, confidence=max(0.0, min(1.0, score)), detail=detail
        )
