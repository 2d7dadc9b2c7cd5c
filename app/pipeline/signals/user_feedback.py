"""User-feedback signals: `routing.signals.user_feedbacks[]` (`{name: satisfied |
need_clarification | wrong_answer | want_different, description}`; condition type
`user_feedback`).

The last user turn is judged by app/models/feedback.py when an assistant answer precedes it;
a rule matches when the turn's feedback is its label. Typical use: send `wrong_answer` and
`need_clarification` turns to a stronger model.
"""

from __future__ import annotations

from typing import Any

from app.config.models import RouterConfig
from app.config.semantic_signals import UserFeedbackSignal
from app.models.feedback import detect_feedback
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext, error_matches

FAMILY = "user_feedback"


def follows_answer(messages: list[dict[str, Any]]) -> bool:
    """An assistant message comes before the last user message."""
    seen_user = False
    for message in reversed(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user" and not seen_user:
            seen_user = True
        elif role == "assistant" and seen_user:
            return True
    return False


class UserFeedbackEvaluator:
    family = FAMILY

    def __init__(self, rules: list[UserFeedbackSignal]) -> None:
        self._rules = {rule.name: rule for rule in rules}

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> UserFeedbackEvaluator:
        return cls(config.routing.signals.user_feedbacks)

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        return None

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = frozenset(n for n in names if n in self._rules)
        out = error_matches(FAMILY, names - known, "no user_feedback rule with that name")
        label, confidence = detect_feedback(ctx.text, follows_answer(ctx.messages))
        detail = {"feedback": label or "none"}
        for name in sorted(known):
            matched = label == name
            out.append(
                SignalMatch(
                    type=FAMILY,
                    name=name,
                    matched=matched,
                    confidence=confidence if matched else 0.0,
                    detail=detail,
                )
            )
        return out
