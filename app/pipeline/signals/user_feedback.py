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
from app.models.feedback import detect_feedback
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.labels import LabelFamily

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


class UserFeedbackEvaluator(LabelFamily):
    family = FAMILY

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> UserFeedbackEvaluator:
        return cls(config.routing.signals.user_feedbacks)

    async def judge(self, ctx: SignalContext) -> tuple[dict[str, float], dict[str, Any]]:
        label, confidence = detect_feedback(ctx.text, follows_answer(ctx.messages))
        return ({label: confidence} if label else {}), {"feedback": label or "none"}
