"""Language signals: `routing.signals.language[]` (`{name: ISO 639-1 code, threshold}`).

The human's ask's language is identified once per request (app/models/language.py); a
rule matches when that language is the rule's and its probability reaches the threshold.
The detected language and probability are reported on every rule, matched or not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.config.document import RouterConfig
from app.config.semantic_signals import LanguageSignal
from app.models.language import LanguageDetector
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.labels import LabelFamily

FAMILY = "language"


class LanguageEvaluator(LabelFamily):
    family = FAMILY

    def __init__(self, rules: list[LanguageSignal]) -> None:
        super().__init__(rules)
        self._detector: LanguageDetector | None = None

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> LanguageEvaluator:
        return cls(config.routing.signals.language)

    async def warm_up(self) -> None:
        if self._rules and self._detector is None:
            self._detector = await asyncio.to_thread(LanguageDetector, list(self._rules))

    async def judge(self, ctx: SignalContext) -> tuple[dict[str, float], dict[str, Any]]:
        assert self._detector is not None
        # At most MAX_CHARS read: well under a millisecond, on the event loop.
        language, probability = self._detector.detect(ctx.text)
        return {language: probability}, {"detected": language, "probability": round(probability, 4)}
