"""POST /api/v1/diagnostics/classify/fact-check and /user-feedback (spec 01 "Routing and
diagnostics"): the fact_check and user_feedback signal families' models on one text.

fact-check embeds the text with the graph's encoder (the backend's `embed`, the Embedding
deployment) and reads the fact-check head on it in this process (a dot product); without an
encoder it is 503 MODEL_NOT_LOADED, like the other classifiers. user-feedback is rules, run
here; `options.follows_answer` (default true) says whether an assistant answer precedes the
text, since a conversation's first turn is never feedback.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from app.api.classify_schemas import Text, Threshold, _Options, _Request
from app.api.diagnostics_service import Diagnostics, _elapsed_ms
from app.models.fact_check import shared_fact_check_head
from app.models.feedback import detect_feedback


class FactCheckOptions(_Options):
    confidence_threshold: Threshold = 0.5


class FactCheckRequest(_Request):
    text: Text
    options: FactCheckOptions = Field(default_factory=FactCheckOptions)
    recipe: str | None = None


class FactCheckResponse(BaseModel):
    needs_fact_check: bool
    label: str  # needs_fact_check | no_fact_check_needed
    confidence: float
    probabilities: dict[str, float]
    processing_time_ms: float


class UserFeedbackOptions(_Options):
    follows_answer: bool = True


class UserFeedbackRequest(_Request):
    text: Text
    options: UserFeedbackOptions = Field(default_factory=UserFeedbackOptions)
    recipe: str | None = None


class UserFeedbackResponse(BaseModel):
    feedback: str  # satisfied | need_clarification | wrong_answer | want_different | none
    is_feedback: bool
    confidence: float
    processing_time_ms: float


class FeedbackDiagnostics:
    def __init__(self, diagnostics: Diagnostics) -> None:
        self._diagnostics = diagnostics

    async def fact_check(self, request: FactCheckRequest) -> FactCheckResponse:
        started = time.perf_counter()
        (vector,) = await self._diagnostics.embed([request.text])
        labels = shared_fact_check_head().labels(vector)
        needs = labels["needs_fact_check"] >= request.options.confidence_threshold
        label = "needs_fact_check" if needs else "no_fact_check_needed"
        return FactCheckResponse(
            needs_fact_check=needs,
            label=label,
            confidence=round(labels[label], 4),
            probabilities={name: round(p, 4) for name, p in labels.items()},
            processing_time_ms=_elapsed_ms(started),
        )

    async def user_feedback(self, request: UserFeedbackRequest) -> UserFeedbackResponse:
        started = time.perf_counter()
        label, confidence = detect_feedback(request.text, request.options.follows_answer)
        return UserFeedbackResponse(
            feedback=label or "none",
            is_feedback=label is not None,
            confidence=round(confidence, 4),
            processing_time_ms=_elapsed_ms(started),
        )
