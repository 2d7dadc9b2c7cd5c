"""Who judges a guard score in a rule's `cascade_band` (docs/security.md, "The cascade"):
`prompt_guard.cascade_judge` names it.

- `llm` (default): the guardrail LLM (`global.model_catalog.external[]`, model_role
  guardrail; app/pipeline/signals/llm_judge.py); none configured: no cascade.
- `encoder`: the guard encoder fine-tuned whole (app/models/guard_encoder.py), int8 ONNX in
  this process. Both the jailbreak and the harmful rule may send the same text: one pass serves
  both (in flight and a small memo of recent texts).
- `multilingual`: the multilingual guard (app/models/multilingual.py: e5 vectors and a head),
  the judge of `cascade_band_unread` for the texts the English heads cannot read; served as the
  encoder is.

Either judge answers `guard(text, threshold, head_flagged) -> SignalItem` whose verdict decides
(app/pipeline/signals/guarded.py `_cascade`); `head_flagged` says the cheap head's score was at or
above its threshold (the band reaches above it), which moves the encoder to its `clear` cut.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from functools import cache
from typing import Any

from app.config.document import RouterConfig
from app.config.signals import CASCADE_JUDGES
from app.pipeline.signals import llm_judge
from app.pipeline.signals.domain import catalog_section
from app.runtime.signal_engine import SignalItem, Verdict

log = logging.getLogger(__name__)
ENCODER_METHOD = "encoder"
MULTILINGUAL_METHOD = "multilingual"
# the judges that answer with their own score at their own cut (the LLM answers a verdict)
SCORING_METHODS = frozenset({ENCODER_METHOD, MULTILINGUAL_METHOD})
MEMO_TEXTS = 256


class EncoderJudge:
    """A scoring model as a band judge (the guard encoder, or the multilingual guard: both
    give `attack_score`, `cut` and `clear`); its pass runs in a worker thread (the event loop
    keeps serving), one per text however many rules ask."""

    def __init__(self, encoder: Any, error: str | None = None, method: str = ENCODER_METHOD) -> None:
        self.encoder = encoder  # GuardEncoder / MultilingualGuard (or a test's stand-in)
        self.error = error  # why the model did not load: every ask fails, the heads decide
        self.method = method  # what a verdict and an audited refusal call it
        self._scores: OrderedDict[str, float] = OrderedDict()
        self._running: dict[str, asyncio.Future[float]] = {}

    @property
    def cut(self) -> float:
        """The attack score at which the encoder flags a text the heads let through."""
        return float(self.encoder.cut) if self.encoder is not None else 1.0

    def cut_for(self, head_flagged: bool) -> float:
        """The cut for this text: a head's block stands unless the score falls below `clear`."""
        if head_flagged and self.encoder is not None:
            return float(self.encoder.clear)
        return self.cut

    async def score(self, text: str) -> float:
        if self.encoder is None:
            raise RuntimeError(f"{self.method} judge unavailable: {self.error}")
        if text in self._scores:
            self._scores.move_to_end(text)
            return self._scores[text]
        running = self._running.get(text)
        if running is None:
            running = asyncio.ensure_future(asyncio.to_thread(self.encoder.attack_score, text))
            self._running[text] = running
            try:
                value = float(await running)
            finally:
                self._running.pop(text, None)
            self._scores[text] = value
            while len(self._scores) > MEMO_TEXTS:
                self._scores.popitem(last=False)
            return value
        return float(await asyncio.shield(running))

    async def guard(self, text: str, threshold: float, head_flagged: bool = False) -> SignalItem:
        """The encoder's attack score; flagged at its own cut (chosen on the tuning split), not
        at the rule's threshold, which belongs to the cheap heads' scale."""
        score = await self.score(text)
        verdict = Verdict(
            flagged=score >= self.cut_for(head_flagged),
            score=score,
            confidence=1.0,
            method=self.method,
            types=[self.method],
        )
        return SignalItem(scores={"jailbreak": score}, verdict=verdict)


def judge_name(config: RouterConfig) -> str:
    value = catalog_section(config, "modules", "prompt_guard").get("cascade_judge")
    return value if value in CASCADE_JUDGES else "llm"


def build_band_judge(config: RouterConfig, services: Any = None, llm: Any = None) -> Any:
    """The judge of the config's cascade bands (None: no cascade); `llm`: the guardrail LLM
    judge the caller already built (the jailbreak rules ask it too), else built here."""
    if judge_name(config) == ENCODER_METHOD:
        return encoder_judge()
    if judge_name(config) == MULTILINGUAL_METHOD:
        return multilingual_judge()
    if llm is not None:
        return llm
    return llm_judge.build_judge(config, "guardrail", getattr(services, "llm_client", None))


@cache
def encoder_judge() -> EncoderJudge:
    """The process's one encoder judge: the jailbreak and harmful rules share its passes. An
    encoder that does not load leaves the cheap heads deciding (docs/security.md, "When a
    model is unavailable"), never a failed config."""
    from app.models.guard_encoder import shared_encoder

    try:
        return EncoderJudge(shared_encoder())
    except Exception as exc:
        log.warning("guard encoder not loaded, the cascade stays off: %s", exc)
        return EncoderJudge(None, f"{type(exc).__name__}: {exc}")


@cache
def multilingual_judge() -> EncoderJudge:
    """The process's one multilingual judge; one that does not load (no AVX2, no package)
    leaves the heads deciding, as the encoder's does."""
    from app.models.multilingual import shared_guard

    try:
        return EncoderJudge(shared_guard(), method=MULTILINGUAL_METHOD)
    except Exception as exc:
        log.warning("multilingual guard not loaded, the cascade stays off: %s", exc)
        return EncoderJudge(None, f"{type(exc).__name__}: {exc}", method=MULTILINGUAL_METHOD)
