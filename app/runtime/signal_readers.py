"""Reading a `SignalItem` (app/runtime/signal_engine.py) into a family's result, whichever engine
answered: the signal families and the classification diagnostics read through these, so one
answer means one thing everywhere.

An engine's own `verdict` (a guard that judged at the request's threshold) is taken as it is;
otherwise the verdict is read from the answer's scores the way a bound model runtime's always
was (docs/model-runtime.md "Routing bindings"). `UnusableAnswer` names what the answer lacks;
the family turns it into its engine's failure (`SignalEngine.failed`).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.models.domain import DomainResult
from app.models.harmful import BENIGN, HarmfulResult
from app.models.jailbreak import JailbreakResult
from app.models.pii import PIIEntity, PIIResult, mask
from app.runtime.signal_engine import SignalItem, Verdict

JAILBREAK_HEAD = "jailbreak"  # the label of the built-in guard's score


class UnusableAnswer(Exception):
    """An answer without what the family reads (no spans, no score for its label, ...)."""


def _unit(value: float) -> float:
    return min(1.0, max(0.0, float(value)))


def domain_result(item: SignalItem, text: str, threshold: float | None, fallback: str) -> DomainResult:
    """The best label, or `fallback` for a blank text, no label, or a best probability below
    `threshold` (`modules.classifier.domain`)."""
    probabilities = {str(k): float(v) for k, v in (item.probabilities or {}).items()}
    label = item.label or (max(probabilities, key=probabilities.__getitem__) if probabilities else None)
    confidence = (
        float(item.confidence) if item.confidence is not None else probabilities.get(label or "", 0.0)
    )
    weak = threshold is not None and confidence < threshold
    category = fallback if label is None or weak or not text.strip() else label
    return DomainResult(category=category, confidence=confidence, probabilities=probabilities)


def pii_result(
    item: SignalItem, text: str, entity_types: Sequence[str] | None, threshold: float | None
) -> PIIResult:
    """The spans of the asked types at or above `threshold` as entities, and the masked text."""
    if item.spans is None:
        raise UnusableAnswer("no spans in the answer")
    entities = [
        PIIEntity(
            type=span.label,
            value=span.text,
            confidence=span.probability,
            start=span.start,
            end=span.end,
            masked_value=f"<{span.label}>",
        )
        for span in item.spans
        if (threshold is None or span.probability >= threshold)
        and (not entity_types or span.label in entity_types)
    ]
    return PIIResult(has_pii=bool(entities), entities=entities, masked_text=mask(text, entities))


def judged(score: float, threshold: float, label: str) -> Verdict:
    """The verdict of a score against `threshold`, flagged as `label` (an engine that answers
    scores only: a model runtime's score decides alone, no method, no pattern lists)."""
    flagged = score >= threshold
    confidence = score if flagged else 1.0 - score
    return Verdict(flagged=flagged, score=score, confidence=confidence, types=[label] if flagged else [])


def jailbreak_result(item: SignalItem, threshold: float, head: str = JAILBREAK_HEAD) -> JailbreakResult:
    """The engine's verdict, else the score of label `head` against `threshold`."""
    verdict = item.verdict
    if verdict is None:
        scores = item.label_scores()
        if not isinstance(scores, dict) or head not in scores:
            field = "probabilities" if item.scores is None and item.probabilities is not None else "scores"
            raise UnusableAnswer(f"no {field} for head {head!r} in the answer")
        verdict = judged(_unit(scores[head]), threshold, head)
    return JailbreakResult(
        is_jailbreak=verdict.flagged,
        score=verdict.score,
        confidence=verdict.confidence,
        method=verdict.method or "classifier",
        patterns_detected=list(verdict.patterns),
        detection_types=list(verdict.types),
    )


def harmful_result(item: SignalItem, threshold: float, categories: Sequence[str] = ()) -> HarmfulResult:
    """The engine's verdict, else the summed probability of `categories` (every harm category
    when empty) against `threshold`, flagged as the most probable of them."""
    per = {k: v for k, v in (item.label_scores() or {}).items() if k != BENIGN}
    verdict, category = item.verdict, item.label
    if verdict is None:
        wanted = [c for c in per if not categories or c in categories]
        if not wanted:
            raise UnusableAnswer("no scores for the harm categories asked in the answer")
        category = max(wanted, key=per.__getitem__)
        verdict = judged(_unit(sum(per[c] for c in wanted)), threshold, category)
    return HarmfulResult(
        is_harmful=verdict.flagged,
        score=verdict.score,
        confidence=verdict.confidence,
        category=category,
        categories=per,
        detection_types=list(verdict.types),
    )


def label_scores(item: SignalItem) -> dict[str, float]:
    """Score by label in [0, 1] (`scores`, else `probabilities`)."""
    scores = item.label_scores()
    if not isinstance(scores, dict) or not scores:
        field = "probabilities" if item.scores is None and item.probabilities is not None else "scores"
        raise UnusableAnswer(f"no {field} in the answer")
    return {str(k): _unit(v) for k, v in scores.items()}
