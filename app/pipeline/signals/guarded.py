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

from app.pipeline.plan import SignalMatch
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


async def ask(engine: SignalEngine, request: SignalRequest) -> list[SignalItem]:
    """The engine's items for `request`, one answered item per text (else its failure)."""
    return checked(engine, await engine.classify(request), len(request.texts))


class TextRuleEvaluator(ThresholdRuleEvaluator[RuleT]):
    """Rules judged one text each (the human's ask, or with `include_history` the conversation
    text: app/common/chat_text.py), concurrently; the ask goes with the request's query vector
    to an engine on the Router's vector space, so it does not encode again. A failure is the
    rule's signal error (`on_error` decides), or unscanned (`on_unscanned`), never a 500."""

    detector = ""  # what the messages call the model: "jailbreak guard", ...

    def _text(self, ctx: SignalContext, rule: Any) -> str:
        raise NotImplementedError

    def engine_for(self, rule: Any) -> SignalEngine | None:
        """The engine a rule asks (the family's, unless a rule's method names another)."""
        return self.engine

    def _request(self, text: str, vectors: np.ndarray | None, threshold: float, rule: Any) -> SignalRequest:
        """What the family asks its engine about one text."""
        raise NotImplementedError

    def _judge(self, item: SignalItem, threshold: float, rule: Any) -> tuple[bool, float, dict[str, Any]]:
        """(matched, confidence, detail) of one answer; UnusableAnswer when it lacks what is read."""
        raise NotImplementedError

    async def evaluate_rules(self, ctx: SignalContext, rules: Sequence[RuleT]) -> list[SignalMatch]:
        return list(await asyncio.gather(*(self._evaluate_one(ctx, rule) for rule in rules)))

    async def _evaluate_one(self, ctx: SignalContext, rule: Any) -> SignalMatch:
        text = self._text(ctx, rule)
        threshold = self.threshold_of(rule)
        if not text.strip():
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
        try:
            vectors = await request_vectors(engine, ctx, text)
            (item,) = await ask(engine, self._request(text, vectors, threshold, rule))
            try:
                matched, confidence, detail = self._judge(item, threshold, rule)
            except UnusableAnswer as exc:
                raise engine.failed(str(exc)) from None
        except UnscannedError as exc:  # a model runtime that did not read it all (on_unscanned)
            return unscanned_match(self.family, rule.name, exc)
        except Exception as exc:
            return self._error(rule, f"{self.family} detection failed: {exc}")
        return SignalMatch(
            type=self.family, name=rule.name, matched=matched, confidence=confidence, detail=detail
        )

    def _error(self, rule: Any, message: str) -> SignalMatch:
        return SignalMatch(type=self.family, name=rule.name, matched=False, confidence=0.0, error=message)
