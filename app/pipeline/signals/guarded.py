"""Shared shape of the safety-signal evaluators (pii, jailbreak, harmful): named rules with a
per-rule threshold that falls back to the model's global one, judged by a `SignalEngine`
(app/runtime/signal_engine.py) wherever the configuration placed it.

`TextRuleEvaluator` is the whole rule walk of the families that judge one text per rule with
the request's shared vector (jailbreak, harmful); each says only what it asks its engine and
what an answer means (`_request`, `_judge`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from app.models.language import read_by_english_heads
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.band_judge import SCORING_METHODS
from app.pipeline.signals.base import SignalContext, request_vectors, unscanned_match
from app.runtime.signal_engine import SignalEngine, SignalItem, SignalRequest, UnscannedError, checked
from app.runtime.signal_readers import UnusableAnswer

RuleT = TypeVar("RuleT")


class ThresholdRuleEvaluator(Generic[RuleT]):
    """`engine`: where the family's model runs (None: none configured here)."""

    family: str = ""

    def __init__(
        self, rules: list[Any], engine: SignalEngine | None, default_threshold: float | None = None
    ) -> None:
        self._rules: dict[str, RuleT] = {rule.name: rule for rule in rules}
        self.engine = engine
        self.default_threshold = default_threshold
        # the guardrail LLM that re-judges scores in a rule's `cascade_band` (None: no cascade)
        self.cascade: Any = None

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        return None

    def threshold_of(self, rule: Any) -> float:
        """A rule's own threshold when it sets one, else the model's global threshold."""
        if "threshold" in rule.model_fields_set or self.default_threshold is None:
            return rule.threshold
        return self.default_threshold

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = [self._rules[n] for n in sorted(names) if n in self._rules]
        out = [
            SignalMatch(
                type=self.family,
                name=n,
                matched=False,
                confidence=0.0,
                error=f"no {self.family} rule named {n!r}",
            )
            for n in sorted(names)
            if n not in self._rules
        ]
        return out + await self.evaluate_rules(ctx, known)

    async def evaluate_rules(self, ctx: SignalContext, rules: Sequence[RuleT]) -> list[SignalMatch]:
        raise NotImplementedError


def cascade_band(rule: Any, text: str) -> list[float]:
    """The band in which the judge re-judges `text`'s score: the rule's `cascade_band_unread`
    for a text in a language the guard heads do not read (only asked when a rule sets one), else
    its `cascade_band` (empty: the head decides)."""
    unread: list[float] = getattr(rule, "cascade_band_unread", None) or []
    if unread and not read_by_english_heads(text):
        return unread
    band: list[float] = getattr(rule, "cascade_band", None) or []
    return band


async def ask(engine: SignalEngine, request: SignalRequest) -> list[SignalItem]:
    """The engine's items for `request`, one answered item per text (else its failure)."""
    return checked(engine, await engine.classify(request), len(request.texts))


class TextRuleEvaluator(ThresholdRuleEvaluator[RuleT]):
    """Rules judged one text each (the human's ask, or with `include_history` the conversation
    text: app/common/chat_text.py), concurrently; the ask goes with the request's query vector
    to an engine on the Router's vector space, so it does not encode again. A failure is the
    rule's signal error (`on_error` decides), or unscanned (`on_unscanned`), never a 500."""

    detector = ""  # what the messages call the model: "jailbreak guard", ...

    def engine_for(self, rule: Any) -> SignalEngine | None:
        """The engine a rule asks (the family's, unless a rule's method names another)."""
        return self.engine

    def _request(self, text: str, vectors: np.ndarray | None, threshold: float, rule: Any) -> SignalRequest:
        """What the family asks its engine about one text."""
        raise NotImplementedError

    def _judge(self, item: SignalItem, threshold: float, rule: Any) -> tuple[bool, float, dict[str, Any]]:
        """(matched, confidence, detail) of one answer; UnusableAnswer when it lacks what is read."""
        raise NotImplementedError

    def _reads_planted(self, rule: Any) -> bool:
        """Whether `_planted` runs for this rule (the jailbreak family's option)."""
        return False

    def _planted(self, part: str, text: str, rule: Any) -> str | None:
        """What a rule over the text itself found in a whole part (None: nothing), which flags
        it whatever the model scored; the jailbreak family's planted instructions."""
        return None

    async def evaluate_rules(self, ctx: SignalContext, rules: Sequence[RuleT]) -> list[SignalMatch]:
        return list(await asyncio.gather(*(self._evaluate_one(ctx, rule) for rule in rules)))

    async def _judge_part(
        self,
        ctx: SignalContext,
        engine: SignalEngine,
        text: str,
        threshold: float,
        rule: Any,
        others: dict[str, np.ndarray],
    ) -> tuple[bool, float, dict[str, Any]]:
        vectors = others[text].reshape(1, -1) if text in others else await request_vectors(engine, ctx, text)
        (item,) = await ask(engine, self._request(text, vectors, threshold, rule))
        try:
            verdict = self._judge(item, threshold, rule)
        except UnusableAnswer as exc:
            raise engine.failed(str(exc)) from None
        band = cascade_band(rule, text) if self.cascade is not None else []
        if band and band[0] <= verdict[1] < band[1]:
            return await self._cascade(text, threshold, verdict)
        return verdict

    async def _cascade(
        self, text: str, threshold: float, verdict: tuple[bool, float, dict[str, Any]]
    ) -> tuple[bool, float, dict[str, Any]]:
        """The band judge's verdict on a text whose score fell in the uncertain band
        (app/pipeline/signals/band_judge.py: the guardrail LLM or the guard encoder); the
        classifier's stands when the judge cannot answer (down, slow, no verdict)."""
        matched, score, detail = verdict
        try:
            answer = await self.cascade.guard(text, threshold, head_flagged=matched)
        except Exception as exc:
            return matched, score, {**detail, "cascade": "failed", "cascade_error": str(exc)[:200]}
        judged = float(answer.scores.get("jailbreak", 0.0)) if answer.scores else 0.0
        method = answer.verdict.method if answer.verdict is not None else "llm"
        encoder = method in SCORING_METHODS
        cascaded = {
            **detail,
            # the score that decided and the cut it was held to: an audited refusal's pair
            # (a scoring judge's own cut; the LLM's verdict is at the rule's threshold)
            "threshold": self.cascade.cut_for(matched) if encoder else threshold,
            "cascade": method if encoder else "llm",
            "classifier_score": score,
            "llm_verdict": None if encoder or answer.verdict is None else list(answer.verdict.types),
        }
        flagged = answer.verdict.flagged if answer.verdict is not None else judged >= threshold
        return flagged, judged, cascaded

    async def _evaluate_one(self, ctx: SignalContext, rule: Any) -> SignalMatch:
        """Every part the rule reads (app/common/chat_text.py `guard_texts`) is judged on its own;
        the rule matches when one does, and reports the part that scored highest."""
        parts = ctx.parts_for(rule.read, rule.include_history)
        threshold = self.threshold_of(rule)
        if not parts:
            return SignalMatch(
                type=self.family,
                name=rule.name,
                matched=False,
                confidence=0.0,
                detail={"reason": "no user text"},
            )
        engine = self.engine_for(rule)
        if engine is None:
            return self._error(rule, f"no {self.detector} configured")
        others: dict[str, np.ndarray] = {}
        rest = [text for _, text in parts if text != ctx.text]
        if rest and engine.reads_vectors:
            try:  # one encoder call for every other part, shared with the other guards
                others = await ctx.part_vectors(rest)
            except Exception:  # no embedder here: the engine encodes its texts itself
                others = {}
        try:
            judged = await asyncio.gather(
                *(self._judge_part(ctx, engine, text, threshold, rule, others) for _, text in parts)
            )
        except UnscannedError as exc:  # a model runtime that did not read it all (on_unscanned)
            return unscanned_match(self.family, rule.name, exc)
        except Exception as exc:
            return self._error(rule, f"{self.family} detection failed: {exc}")
        if self._reads_planted(rule):
            # a rule over the text reads each part whole once: its windows and tail are pieces of it
            wholes = set(ctx.parts_for(rule.read, rule.include_history, windowed=False))
            for i, (part, text) in enumerate(parts):
                found = (
                    None if judged[i][0] or (part, text) not in wholes else self._planted(part, text, rule)
                )
                if found:  # a rule's hit: certain, and the model's own score kept in the detail
                    judged[i] = (
                        True,
                        1.0,
                        {**judged[i][2], "detection_types": ["planted_instruction"], "planted": found},
                    )
        best = max(range(len(parts)), key=lambda i: (judged[i][0], judged[i][1]))
        matched, confidence, detail = judged[best]
        # a refusal names it (app/pipeline/phases/guard.py); a band judge's own cut when it decided
        detail = {"threshold": threshold, **detail}
        if len(parts) > 1:
            detail = {**detail, "read": parts[best][0], "parts_judged": len(parts)}
        return SignalMatch(
            type=self.family, name=rule.name, matched=matched, confidence=confidence, detail=detail
        )

    def _error(self, rule: Any, message: str) -> SignalMatch:
        return SignalMatch(type=self.family, name=rule.name, matched=False, confidence=0.0, error=message)
