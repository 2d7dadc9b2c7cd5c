"""User-feedback signals: `routing.signals.user_feedbacks[]` (`{name: satisfied |
need_clarification | wrong_answer | want_different, description}`; condition type
`user_feedback`).

The human's ask is judged by app/models/feedback.py when an assistant answer precedes it;
a rule matches when the turn's feedback is its label. Typical use: send `wrong_answer` and
`need_clarification` turns to a stronger model.
"""

from __future__ import annotations

from typing import Any

from app.common.chat_text import ask_index
from app.config.document import RouterConfig
from app.models.feedback import detect_feedback
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.labels import LabelFamily

FAMILY = "user_feedback"


def follows_answer(messages: list[dict[str, Any]]) -> bool:
    """An assistant message comes before the human's ask."""
    index = ask_index(messages)
    return any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages[: max(index, 0)])


class UserFeedbackEvaluator(LabelFamily):
    family = FAMILY

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> UserFeedbackEvaluator:
        return cls(config.routing.signals.user_feedbacks)

    async def judge(self, ctx: SignalContext) -> tuple[dict[str, float], dict[str, Any]]:
        label, confidence = detect_feedback(ctx.text, follows_answer(ctx.messages))
        return ({label: confidence} if label else {}), {"feedback": label or "none"}
