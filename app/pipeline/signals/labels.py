"""Families whose rules are labels of one judgment made once per request: `modality`,
`language`, `fact_check`, `user_feedback`. A subclass says how the request is judged
(`judge`: a score per label plus what to report) and, where it has one, what to load before
traffic (`warm_up`); the rule walk is here once. `EngineLabels` is the judgment of a learned model
behind the signal interface (fact_check in process, any of them on a binding's workers).

A rule matches when its label's score is positive and reaches the rule's `threshold` (rules
without one match on any positive score); its confidence is that score. A judgment that
raises is a signal error (the rules' on_error decides), never a failed request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext, error_matches, request_vectors
from app.runtime.signal_engine import SignalEngine, SignalRequest, checked
from app.runtime.signal_readers import UnusableAnswer, label_scores


class LabelFamily:
    family = ""

    def __init__(self, rules: Sequence[Any]) -> None:
        self._rules = {rule.name: rule for rule in rules}

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        return None

    async def judge(self, ctx: SignalContext) -> tuple[dict[str, float], dict[str, Any]]:
        """(score by label, detail reported on every rule) of this request."""
        raise NotImplementedError

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = frozenset(n for n in names if n in self._rules)
        out = error_matches(self.family, names - known, f"no {self.family} rule with that name")
        if not known:
            return out
        try:
            await self.warm_up()
            scores, detail = await self.judge(ctx)
        except Exception as exc:
            return out + error_matches(self.family, known, f"{self.family} failed: {exc}")
        for name in sorted(known):
            score = scores.get(name, 0.0)
            matched = score > 0 and score >= getattr(self._rules[name], "threshold", 0.0)
            out.append(
                SignalMatch(type=self.family, name=name, matched=matched, confidence=score, detail=detail)
            )
        return out


class EngineLabels(LabelFamily):
    """A label family judged by a `SignalEngine` (app/runtime/signal_engine.py): the fact-check
    head in process, or a binding's workers. Each rule reads the score of its own label (a
    per-rule binding: of `head`, default the rule's name). The scores are reported with the
    deployment that gave them, if any."""

    def __init__(
        self,
        family: str,
        rules: Sequence[Any],
        engine: SignalEngine,
        per_rule: bool = False,
        head: str | None = None,
    ) -> None:
        super().__init__(rules)
        self.family = family
        self.engine = engine
        self.per_rule = per_rule
        self.head = head

    async def judge(self, ctx: SignalContext) -> tuple[dict[str, float], dict[str, Any]]:
        if not ctx.text.strip():
            return {}, {"reason": "no user text"}
        engine = self.engine
        request = SignalRequest(texts=[ctx.text], vectors=await request_vectors(engine, ctx))
        (item,) = checked(engine, await engine.classify(request), 1)
        try:
            scores = label_scores(item)
        except UnusableAnswer as exc:
            raise engine.failed(str(exc)) from None
        if self.per_rule:
            scores = {name: scores.get(self.head or name, 0.0) for name in self._rules}
        rounded = {k: round(v, 4) for k, v in scores.items()}
        deployment = getattr(engine, "deployment", None)
        if deployment is None:
            return scores, {"probabilities": rounded}
        return scores, {"deployment": deployment, "scores": rounded}
