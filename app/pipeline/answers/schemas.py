"""Wire shapes of the answer checks: the policy on the plan, the verdict from the Router."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.config.plugins import HallucinationPlugin, ResponseJailbreakPlugin

Action = Literal["none", "header", "annotate", "block"]
CheckName = Literal["response_jailbreak", "hallucination"]
# The strongest configured action wins when both checks flag one answer.
ACTION_RANK: dict[str, int] = {"none": 0, "header": 1, "annotate": 2, "block": 3}


class AnswerChecks(BaseModel):
    """The chosen decision's response-side plugins, carried by the plan to the front door
    (which decides from it whether to hold a stream) and back to the Router's checker."""

    decision: str
    recipe: str | None = None  # whose evaluators run the checks
    response_jailbreak: ResponseJailbreakPlugin | None = None
    hallucination: HallucinationPlugin | None = None

    @property
    def blocks(self) -> bool:
        """A `block` action is configured: the front door holds the whole answer first."""
        return any(
            c is not None and c.action == "block" for c in (self.response_jailbreak, self.hallucination)
        )


class CheckOutcome(BaseModel):
    """One check's result on one answer. `score`: response_jailbreak's highest risk (higher
    is worse); hallucination's lowest sentence support (lower is worse). `skipped`: why it
    did not run (no context, no fact-check need, empty answer); `error`: it failed (never blocks)."""

    check: CheckName
    flagged: bool = False
    score: float | None = None
    threshold: float | None = None
    action: Action = "none"  # what the policy does with this outcome
    detail: dict[str, Any] = Field(default_factory=dict)
    skipped: str | None = None
    error: str | None = None
    elapsed_ms: float = 0.0


class AnswerVerdict(BaseModel):
    outcomes: list[CheckOutcome] = Field(default_factory=list)

    @property
    def action(self) -> Action:
        best: Action = "none"
        for outcome in self.outcomes:
            if ACTION_RANK[outcome.action] > ACTION_RANK[best]:
                best = outcome.action
        return best

    @property
    def flagged(self) -> list[CheckOutcome]:
        return [o for o in self.outcomes if o.flagged]

    def warnings_header(self) -> str:
        """x-vsr-response-warnings: `<check>;score=<4 decimals>[;<key>=<value>]`, one item
        per flagged check, comma-separated, e.g.
        `response_jailbreak;score=0.9731;types=jailbreak, hallucination;score=0.2140;sentences=2`."""
        items = []
        for outcome in self.flagged:
            parts: list[str] = [outcome.check]
            if outcome.score is not None:
                parts.append(f"score={outcome.score:.4f}")
            if outcome.check == "response_jailbreak":
                parts.append("types=" + "|".join(outcome.detail.get("types") or []))
            else:
                parts.append(f"sentences={len(outcome.detail.get('unsupported') or [])}")
            items.append(";".join(parts))
        return ", ".join(items)

    def summary(self) -> dict[str, Any]:
        """What routing_metadata.response_checks and replay records show."""
        return {
            "action": self.action,
            "flagged": [o.check for o in self.flagged],
            "checks": [o.model_dump(exclude_none=True) for o in self.outcomes],
        }
