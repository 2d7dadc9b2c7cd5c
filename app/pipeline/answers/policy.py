"""Outcome -> action for the response-side plugins, and their previews (plugins API).

`preview_*` are pure over supplied conditions (mode `preview`: the caller says what the
detector found, e.g. a score, and gets the action the policy would take) and call the
detector only with `probe=True` (mode `probe`), through the Router's `check_answer`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from app.config.plugins import HallucinationPlugin, ResponseJailbreakPlugin
from app.pipeline.answers.schemas import Action, AnswerChecks, AnswerVerdict, CheckOutcome

DEFAULT_JAILBREAK_THRESHOLD = 0.5  # JailbreakSignal's default, when neither plugin nor guard sets one
Checker = Callable[[AnswerChecks, str, list[str]], Awaitable[AnswerVerdict]]


def action_for(config: ResponseJailbreakPlugin | HallucinationPlugin, flagged: bool) -> Action:
    return config.action if flagged and config.enabled else "none"


def jailbreak_flagged(config: ResponseJailbreakPlugin, score: float) -> bool:
    threshold = DEFAULT_JAILBREAK_THRESHOLD if config.threshold is None else config.threshold
    return score >= threshold


def hallucination_flagged(config: HallucinationPlugin, unsupported_sentences: int) -> bool:
    return unsupported_sentences >= config.min_unsupported


def _preview(outcome: CheckOutcome, probe: bool, backend_calls: int) -> dict[str, Any]:
    return {
        "mode": "probe" if probe else "preview",
        "persisted": False,
        "backend_calls": backend_calls,
        "action": outcome.action,
        "outcome": outcome.model_dump(exclude_none=True),
    }


async def preview_response_jailbreak(
    config: ResponseJailbreakPlugin,
    answer_text: str | None = None,
    probe: bool = False,
    *,
    score: float | None = None,
    checker: Checker | None = None,
) -> dict[str, Any]:
    """mode preview: `score` (the guard's risk on the answer, 0..1) is the supplied condition;
    mode probe: the guard runs on `answer_text` via `checker` (RouterPipeline.check_answer)."""
    if probe:
        if checker is None or answer_text is None:
            raise ValueError("mode probe needs the answer text and a detector")
        verdict = await checker(AnswerChecks(decision="preview", response_jailbreak=config), answer_text, [])
        return _preview(verdict.outcomes[0], True, 1)
    if score is None:
        raise ValueError("mode preview needs the supplied condition `score`")
    flagged = jailbreak_flagged(config, score)
    outcome = CheckOutcome(
        check="response_jailbreak",
        flagged=flagged,
        score=score,
        threshold=DEFAULT_JAILBREAK_THRESHOLD if config.threshold is None else config.threshold,
        action=action_for(config, flagged),
    )
    return _preview(outcome, False, 0)


async def preview_hallucination(
    config: HallucinationPlugin,
    answer: str | None = None,
    context: list[str] | None = None,
    probe: bool = False,
    *,
    unsupported_sentences: int | None = None,
    support: float | None = None,
    checker: Checker | None = None,
) -> dict[str, Any]:
    """mode preview: the supplied condition is `unsupported_sentences` (or the lowest sentence
    `support`, flagged under the threshold); mode probe runs the detector on answer/context."""
    if probe:
        if checker is None or answer is None:
            raise ValueError("mode probe needs the answer and a detector")
        verdict = await checker(AnswerChecks(decision="preview", hallucination=config), answer, context or [])
        return _preview(verdict.outcomes[0], True, 1)
    if unsupported_sentences is None and support is None:
        raise ValueError("mode preview needs `unsupported_sentences` or `support`")
    count = (
        unsupported_sentences
        if unsupported_sentences is not None
        else int(support is not None and support < config.threshold)
    )
    flagged = hallucination_flagged(config, count)
    outcome = CheckOutcome(
        check="hallucination",
        flagged=flagged,
        score=support,
        threshold=config.threshold,
        action=action_for(config, flagged),
        detail={"unsupported_count": count},
    )
    return _preview(outcome, False, 0)
