"""Complexity signals: `routing.signals.complexity[]` (docs/configuration.md), judged by
prototype scoring on the router's sentence vector.

A rule's `hard` and `easy` candidates are embedded once per config (the embedding family's
machinery and phrase cache). A request's score is its similarity to the hard side minus its
similarity to the easy side (each side: best candidate, or their mean with
`prototype_scoring.aggregation: mean`). Above `hard_above` (default +threshold) the request
is hard, below `easy_below` (default -threshold) easy, else medium. A decision condition
names `<rule>:hard`, `<rule>:medium` or `<rule>:easy` (validation rejects a bare name: the
reference router's bare name silently never matched).
"""

from __future__ import annotations

from typing import Any

from app.config.document import RouterConfig
from app.config.semantic_signals import COMPLEXITY_LEVELS, ComplexitySignal
from app.config.signals import EmbeddingSignal
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import EmbedFn, SignalContext, error_matches
from app.pipeline.signals.embedding import EmbeddingEvaluator

FAMILY = "complexity"
_SIDE = "\x00"  # joins a rule's name and its side in the inner similarity rules


def level_of(score: float, rule: ComplexitySignal) -> str:
    hard_above, easy_below = rule.cut_points()
    if score > hard_above:
        return "hard"
    if score < easy_below:
        return "easy"
    return "medium"


class ComplexityEvaluator:
    family = FAMILY

    def __init__(
        self, rules: list[ComplexitySignal], embed: EmbedFn | None, phrase_cache: Any = None
    ) -> None:
        self._rules = {rule.name: rule for rule in rules}
        sides = []
        for rule in rules:
            aggregation = rule.prototype_scoring.aggregation
            for side, prototypes in (("hard", rule.hard), ("easy", rule.easy)):
                sides.append(
                    EmbeddingSignal(
                        name=f"{rule.name}{_SIDE}{side}",
                        candidates=prototypes.candidates,
                        aggregation_method=aggregation,
                        threshold=0.0,
                    )
                )
        self._similarity = EmbeddingEvaluator(sides, embed, phrase_cache)

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> ComplexityEvaluator:
        return cls(
            config.routing.signals.complexity,
            getattr(services, "embed", None),
            getattr(services, "phrase_cache", None),
        )

    def rule_names(self) -> list[str]:
        return [f"{name}:{level}" for name in self._rules for level in COMPLEXITY_LEVELS]

    async def warm_up(self) -> None:
        await self._similarity.warm_up()

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        wanted: dict[str, tuple[str, str]] = {}
        out: list[SignalMatch] = []
        for name in names:
            rule, _, level = name.rpartition(":")
            if rule in self._rules and level in COMPLEXITY_LEVELS:
                wanted[name] = (rule, level)
            else:
                out += error_matches(FAMILY, {name}, "expected <complexity rule>:hard|medium|easy")
        if not wanted:
            return out
        rules = {rule for rule, _ in wanted.values()}
        inner = frozenset(f"{rule}{_SIDE}{side}" for rule in rules for side in ("hard", "easy"))
        scored = {m.name: m for m in await self._similarity.evaluate(ctx, inner)}
        for name, (rule, level) in sorted(wanted.items()):
            hard, easy = scored[f"{rule}{_SIDE}hard"], scored[f"{rule}{_SIDE}easy"]
            if hard.error or easy.error or not ctx.text:
                reason = hard.error or easy.error
                why = {} if reason else {"reason": "no user text"}
                out.append(
                    SignalMatch(
                        type=FAMILY, name=name, matched=False, confidence=0.0, error=reason, detail=why
                    )
                )
                continue
            hard_sim = float(hard.detail["similarity"])
            easy_sim = float(easy.detail["similarity"])
            score = hard_sim - easy_sim
            judged = level_of(score, self._rules[rule])
            detail: dict[str, Any] = {
                "level": judged,
                "score": round(score, 4),
                "hard_similarity": round(hard_sim, 4),
                "easy_similarity": round(easy_sim, 4),
            }
            confidence = min(1.0, abs(score)) if judged != "medium" else 1.0 - min(1.0, abs(score))
            out.append(
                SignalMatch(
                    type=FAMILY,
                    name=name,
                    matched=judged == level,
                    confidence=confidence if judged == level else 0.0,
                    detail=detail,
                )
            )
        return out
