"""The answer checks as the Router runs them: `check_answer(state, embed, checks, answer, context)`.

`response_jailbreak` runs the decision's config version's jailbreak and harmful-content
evaluators (the same ones the request guards use: the Guard deployment, in-process heads,
or a bound model runtime) on the answer as if it were a user message. `hallucination` runs
app/pipeline/answers/hallucination.py with the Router's embedder. A check that fails is
reported with `error` and never blocks (as a guard that cannot run).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from app.config.plugins import HallucinationPlugin, ResponseJailbreakPlugin
from app.config.signals import HarmfulSignal, JailbreakSignal
from app.pipeline.answers import hallucination
from app.pipeline.answers.policy import (
    DEFAULT_JAILBREAK_THRESHOLD,
    action_for,
    hallucination_flagged,
)
from app.pipeline.answers.schemas import AnswerChecks, AnswerVerdict, CheckOutcome
from app.pipeline.phases.signals import run_guards
from app.pipeline.plugins import GuardRule
from app.pipeline.signals.base import EmbedFn, SignalContext, SignalEvaluator
from app.pipeline.vector_cache import TextVectorCache

log = logging.getLogger("svc_sr.pipeline")


async def check_answer(
    evaluators: Mapping[str, SignalEvaluator],
    embed: EmbedFn | None,
    checks: AnswerChecks,
    answer: str,
    context: list[str],
    guard_threshold: float | None = None,
    context_vectors: TextVectorCache | None = None,
) -> AnswerVerdict:
    """`guard_threshold`: `prompt_guard.threshold`, the default of a plugin that sets none;
    `context_vectors`: the hallucination detector's cache of `embed`'s context vectors."""
    jobs = []
    if checks.response_jailbreak is not None and checks.response_jailbreak.enabled:
        jobs.append(
            _jailbreak(evaluators, embed, checks.response_jailbreak, checks.decision, answer, guard_threshold)
        )
    if checks.hallucination is not None and checks.hallucination.enabled:
        jobs.append(_hallucination(embed, checks.hallucination, answer, context, context_vectors))
    return AnswerVerdict(outcomes=list(await asyncio.gather(*jobs)))


async def _jailbreak(
    evaluators: Mapping[str, SignalEvaluator],
    embed: EmbedFn | None,
    config: ResponseJailbreakPlugin,
    decision: str,
    answer: str,
    guard_threshold: float | None,
) -> CheckOutcome:
    started = time.perf_counter()
    threshold = config.threshold if config.threshold is not None else guard_threshold
    threshold = DEFAULT_JAILBREAK_THRESHOLD if threshold is None else threshold
    outcome = CheckOutcome(check="response_jailbreak", threshold=threshold)
    if not answer.strip():
        outcome.skipped = "empty answer"
        return outcome
    name = f"response:{decision}"
    rules: list[GuardRule] = [("jailbreak", JailbreakSignal(name=name, threshold=threshold))]
    if config.harmful and "harmful" in evaluators:
        rules.append(("harmful", HarmfulSignal(name=name, threshold=threshold)))
    ctx = SignalContext([{"role": "user", "content": answer}], embed=embed)
    try:
        matches = await run_guards(evaluators, ctx, rules)
    finally:
        ctx.cancel()
    ran = [m for m in matches if not m.error]
    errors = [f"{m.type}: {m.error}" for m in matches if m.error]
    if not ran:
        outcome.error = "; ".join(errors) or "no detector ran"
        outcome.elapsed_ms = _ms(started)
        return outcome
    outcome.score = round(max(m.confidence for m in ran), 4)
    types: list[str] = []
    for m in ran:
        if m.matched:
            found = [str(t) for t in m.detail.get("detection_types") or []] or [m.type]
            types += [t for t in found if t not in types]
    outcome.flagged = bool(types)  # each detector matched at `threshold`
    outcome.action = action_for(config, outcome.flagged)
    outcome.detail = {
        "types": types,
        "flagged_by": [m.type for m in ran if m.matched],  # jailbreak | harmful
        "scores": {m.type: round(m.confidence, 4) for m in ran},
    }
    if errors:
        outcome.detail["errors"] = errors
    outcome.elapsed_ms = _ms(started)
    return outcome


async def _hallucination(
    embed: EmbedFn | None,
    config: HallucinationPlugin,
    answer: str,
    context: list[str],
    cache: TextVectorCache | None = None,
) -> CheckOutcome:
    started = time.perf_counter()
    outcome = CheckOutcome(check="hallucination", threshold=config.threshold)
    if not any(text.strip() for text in context):
        outcome.skipped = "no context"
        return outcome
    try:
        encoder = embed if config.use_embeddings else None
        result = await hallucination.detect(answer, context, encoder, config.threshold, cache)
    except Exception as exc:  # a detector failure never blocks an answer
        log.warning("hallucination check failed: %s", exc)
        outcome.error = f"{type(exc).__name__}: {exc}"
        outcome.elapsed_ms = _ms(started)
        return outcome
    if not result.judged:
        outcome.skipped = "no sentence to judge"
    outcome.score = result.lowest_support
    outcome.flagged = hallucination_flagged(config, len(result.unsupported))
    outcome.action = action_for(config, outcome.flagged)
    outcome.detail = {
        "judged": len(result.judged),
        "unsupported": [_sentence(s) for s in result.unsupported],
    }
    outcome.elapsed_ms = _ms(started)
    return outcome


def _sentence(score: hallucination.SentenceScore) -> dict[str, Any]:
    out: dict[str, Any] = {"text": score.text[:200], "support": score.support}
    if score.missing_numbers:
        out["missing_numbers"] = score.missing_numbers
    return out


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
