"""Preference signals: `routing.signals.preferences[]` (`{name, description, examples[],
threshold}`), routing by a user-written description of each route, as Arch-Router does.

Each rule's description and examples are embedded once per config (the embedding family's
machinery and phrase cache); a request's vector is compared with all of them, each rule
scored by its best text. Exactly one rule can match: the best-scoring one, when its score
reaches its threshold. Every rule reports its score and the winner, so previews explain why.
"""

from __future__ import annotations

from typing import Any

from app.config.document import RouterConfig
from app.config.semantic_signals import PreferenceSignal
from app.config.signals import EmbeddingSignal
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import EmbedFn, SignalContext, error_matches
from app.pipeline.signals.embedding import EmbeddingEvaluator

FAMILY = "preference"


class PreferenceEvaluator:
    family = FAMILY

    def __init__(
        self, rules: list[PreferenceSignal], embed: EmbedFn | None, phrase_cache: Any = None
    ) -> None:
        self._rules = {rule.name: rule for rule in rules}
        texts = [
            EmbeddingSignal(name=r.name, candidates=[r.description, *r.examples], threshold=r.threshold)
            for r in rules
        ]
        self._similarity = EmbeddingEvaluator(texts, embed, phrase_cache)

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> PreferenceEvaluator:
        return cls(
            config.routing.signals.preferences,
            getattr(services, "embed", None),
            getattr(services, "phrase_cache", None),
        )

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        await self._similarity.warm_up()

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = frozenset(n for n in names if n in self._rules)
        out = error_matches(FAMILY, names - known, "no preference rule with that name")
        if not known:
            return out
        # Every rule is scored: a rule wins only against all the others.
        scored = await self._similarity.evaluate(ctx, frozenset(self._rules))
        failed = next((m.error for m in scored if m.error), None)
        if failed:
            return out + error_matches(FAMILY, known, failed)
        similarity = {m.name: float(m.detail.get("similarity", 0.0)) for m in scored}
        winner = max(similarity, key=similarity.__getitem__) if ctx.text else None
        for name in sorted(known):
            score = similarity[name]
            out.append(
                SignalMatch(
                    type=FAMILY,
                    name=name,
                    matched=name == winner and score >= self._rules[name].threshold,
                    confidence=max(0.0, min(1.0, score)),
                    detail={"similarity": round(score, 4), "best_preference": winner},
                )
            )
        return out
