"""Guard learning: the refusals an operator marked wrong (or right) through the outcomes API,
and the threshold or policy changes they support, proposed and never applied.

A refused request's replay record holds its `refusal` (check, score, threshold, entities;
app/pipeline/phases/guard.py). An outcome on it whose `target` is `refusal` (or the check's
own name) says whether the refusal was right, read as every outcome is read
(app/replays/replays.py `outcome_score`): `wrong`, `bad`, ... (0) marks a false refusal;
`correct`, `good`, ... (1) a right one.

Per check with at least `min_marks` false refusals:
- a jailbreak or harmful check: `raise_threshold` to just above the highest-scored false
  refusal, capped by the lowest-scored refusal marked right (which stays refused); nothing
  when no false refusal would be let through;
- a PII check: `allow_pii_type` for a type that at least `min_marks` false refusals named and
  no right one did.
The change is written into a copy of the configuration for `svc-sr config plan/apply`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Literal

from pydantic import BaseModel

from app.config.signals import SIGNAL_FAMILIES
from app.replays.replays import outcome_score

REFUSAL_TARGET = "refusal"
GLOBAL_JAILBREAK = "jailbreak:global:prompt_guard"
GLOBAL_HARMFUL = "harmful:global:prompt_guard:harmful"


class Mark(BaseModel):
    replay_id: str
    score: float  # the check's score on the request
    right: bool  # the operator's verdict on the refusal
    entities: list[str]


class GuardEvidence(BaseModel):
    check: str
    threshold: float | None  # as recorded on the newest marked refusal
    wrong: int
    right: int


class GuardProposal(BaseModel):
    check: str
    change: Literal["raise_threshold", "allow_pii_type"]
    current: float | list[str] | None
    proposed: float | list[str]
    released: int  # false refusals the change lets through
    kept: int  # refusals marked right that stay refused
    reason: str


class GuardReport(BaseModel):
    marks: int
    checks: list[GuardEvidence]
    proposals: list[GuardProposal]
    skipped: dict[str, str]  # check -> why nothing was proposed


def refusal_marks(records: list[dict[str, Any]], outcomes: list[dict[str, Any]]) -> dict[str, list[Mark]]:
    """check -> the operator's marks on its refusals (the newest mark per request counts)."""
    refused = {str(r.get("id")): r["refusal"] for r in records if isinstance(r.get("refusal"), dict)}
    latest: dict[str, tuple[str, Mark]] = {}
    for outcome in outcomes:
        refusal = refused.get(str(outcome.get("replay_id")))
        if refusal is None or str(outcome.get("target")) not in (REFUSAL_TARGET, refusal.get("check")):
            continue
        result = outcome_score(str(outcome.get("verdict", "")), outcome.get("score"))
        if result is None or result == 0.5:
            continue
        mark = Mark(
            replay_id=str(outcome["replay_id"]),
            score=float(refusal.get("score") or 0.0),
            right=result > 0.5,
            entities=[str(e) for e in refusal.get("entities") or []],
        )
        latest[mark.replay_id] = (str(refusal.get("check")), mark)
    marks: dict[str, list[Mark]] = defaultdict(list)
    for check, mark in latest.values():
        marks[check].append(mark)
    return marks


def _threshold_proposal(check: str, current: float | None, marks: list[Mark]) -> GuardProposal | str:
    wrong = [m.score for m in marks if not m.right]
    right = [m.score for m in marks if m.right]
    above = math.ceil((max(wrong) + 1e-6) * 100) / 100  # just above the highest false refusal
    proposed = min(above, min(right, default=1.0), 1.0)
    released = sum(1 for s in wrong if s < proposed)
    if released == 0 or (current is not None and proposed <= current):
        return "no threshold lets a false refusal through while every right one stays refused"
    return GuardProposal(
        check=check,
        change="raise_threshold",
        current=current,
        proposed=round(proposed, 4),
        released=released,
        kept=len(right),
        reason=f"{released} of {len(wrong)} refusals marked wrong scored below {proposed:.2f}; "
        f"{len(right)} marked right score at least that",
    )


def _pii_proposal(check: str, allowed: list[str], marks: list[Mark], min_marks: int) -> GuardProposal | str:
    confirmed = {e for m in marks if m.right for e in m.entities}
    counts: dict[str, int] = defaultdict(int)
    for mark in marks:
        if not mark.right:
            for entity in set(mark.entities):
                counts[entity] += 1
    types = sorted(t for t, n in counts.items() if n >= min_marks and t not in confirmed and t != "unscanned")
    if not types:
        return f"no PII type has {min_marks} refusals marked wrong and none marked right"
    released = sum(1 for m in marks if not m.right and set(m.entities) <= set(types) | set(allowed))
    return GuardProposal(
        check=check,
        change="allow_pii_type",
        current=allowed,
        proposed=sorted(set(allowed) | set(types)),
        released=released,
        kept=sum(1 for m in marks if m.right),
        reason=f"refusals marked wrong named {', '.join(f'{t} ({counts[t]})' for t in types)}; "
        "no refusal marked right did",
    )


def _settings(document: dict[str, Any], check: str) -> dict[str, Any] | None:
    """The mapping in `document` that holds `check`'s threshold (and PII allow list); None
    when the active configuration has no such check any more."""
    family, _, rule = check.partition(":")
    modules = ((document.get("global") or {}).get("model_catalog") or {}).get("modules") or {}
    if check == GLOBAL_JAILBREAK:
        return modules.get("prompt_guard") if isinstance(modules.get("prompt_guard"), dict) else None
    if check == GLOBAL_HARMFUL:
        guard = modules.get("prompt_guard")
        if not isinstance(guard, dict) or not guard.get("harmful"):
            return None
        if guard["harmful"] is True:
            guard["harmful"] = {"enabled": True}
        return guard["harmful"] if isinstance(guard["harmful"], dict) else None
    routing = document.get("routing") or {}
    if rule.startswith("plugin:"):
        decision = next((d for d in routing.get("decisions", []) if d.get("name") == rule[7:]), None)
        for plugin in (decision or {}).get("plugins", []):
            if plugin.get("type") == family:
                return plugin.setdefault("configuration", {})
        return None
    rules = (routing.get("signals") or {}).get(SIGNAL_FAMILIES.get(family, family)) or []
    return next((r for r in rules if r.get("name") == rule), None)


def learn_guards(
    document: dict[str, Any],
    records: list[dict[str, Any]],
    outcomes: list[dict[str, Any]],
    min_marks: int,
) -> tuple[GuardReport, bool]:
    """The report, and whether `document` (changed in place: a copy the caller owns) now holds
    a proposed change."""
    marks = refusal_marks(records, outcomes)
    evidence: list[GuardEvidence] = []
    proposals: list[GuardProposal] = []
    skipped: dict[str, str] = {}
    recorded = {r["refusal"]["check"]: r["refusal"] for r in records if isinstance(r.get("refusal"), dict)}
    for check, marked in sorted(marks.items()):
        wrong = sum(1 for m in marked if not m.right)
        evidence.append(
            GuardEvidence(
                check=check,
                threshold=recorded[check].get("threshold"),
                wrong=wrong,
                right=len(marked) - wrong,
            )
        )
        if wrong < min_marks:
            skipped[check] = f"{wrong} refusals marked wrong, fewer than {min_marks}"
            continue
        settings = _settings(document, check)
        if settings is None:
            skipped[check] = "the active configuration has no such check"
            continue
        if check.startswith("pii:"):
            allowed = [str(t) for t in settings.get("pii_types_allowed") or []]
            found = _pii_proposal(check, allowed, marked, min_marks)
        else:
            found = _threshold_proposal(check, recorded[check].get("threshold"), marked)
        if isinstance(found, str):
            skipped[check] = found
            continue
        proposals.append(found)
        key = "pii_types_allowed" if found.change == "allow_pii_type" else "threshold"
        settings[key] = found.proposed
    return GuardReport(
        marks=sum(len(m) for m in marks.values()), checks=evidence, proposals=proposals, skipped=skipped
    ), bool(proposals)
