"""Phase `guard`: the chosen decision's `jailbreak` then `pii` plugins, the plan's security
summary, and the 403 block when any guard fired (spec 01 "Errors"), the global prompt
guard's `harmful` part included (code `harmful_content_detected`); a `pii` plugin whose
action is `mask` or `route` acts instead of blocking (`take_pii_action`).

The global prompt guard already ran with the signals; the decision's guards run only when
it did not fire. A guard that could not run (errored match) never blocks.
"""

from __future__ import annotations

from app.common.errors import security_violation
from app.config.routing import Decision
from app.pipeline.compiled import CompiledConfig
from app.pipeline.headers import fill_routing_headers
from app.pipeline.phases.signals import run_guards
from app.pipeline.pii_mask import build_mask
from app.pipeline.plan import ImmediateResponse, Refusal, RoutePlan, SecurityChecks, SignalMatch
from app.pipeline.plugins import DecisionPlugins, guard_rule_name
from app.pipeline.signals.base import SignalContext


async def check_decision_guards(
    state: CompiledConfig, ctx: SignalContext, decision: Decision | None, guarded: list[SignalMatch]
) -> list[SignalMatch]:
    """`guarded` (the global guard's matches) plus the decision's guard matches."""
    checks = state.guards.get(decision.name) if decision is not None else None
    if not checks or blocking_match(guarded) is not None:
        return guarded
    return guarded + await run_guards(state.evaluators, ctx, checks)


def record_guards(plan: RoutePlan, guarded: list[SignalMatch]) -> None:
    """Guard matches join the plan's signals; the security summary covers them all."""
    plan.signals.matches.extend(guarded)
    plan.signals.errors.extend(f"{m.type}:{m.name}: {m.error}" for m in guarded if m.error)
    plan.security = security_checks(plan.signals.matches)


def take_pii_action(
    state: CompiledConfig,
    plan: RoutePlan,
    ctx: SignalContext,
    decision: Decision | None,
    plugins: DecisionPlugins | None,
    guarded: list[SignalMatch],
) -> list[SignalMatch]:
    """The decision's `pii` plugin with `action: mask` or `route` (docs/security.md "PII
    actions"): its match, when it fired on text it read whole, sets `plan.pii_action` (and the
    mask) instead of blocking; the matches left to block on are returned. Unscanned input still
    blocks: a mask cannot cover what was not read."""
    if decision is None or plugins is None or plugins.pii_action not in ("mask", "route"):
        return guarded
    name = guard_rule_name(decision.name)
    match = next((m for m in guarded if m.type == "pii" and m.name == name), None)
    if match is None or not match.matched or match.error or match.detail.get("unscanned"):
        return guarded
    if plugins.pii_action == "mask":
        rule = next(r for family, r in state.guards[decision.name] if family == "pii")
        text = ctx.whole_text_for(rule.read, rule.include_history)
        denied = set(match.detail.get("denied") or [])
        spans = sorted(
            (s for s in match.detail.get("spans") or [] if s.get("type") in denied), key=lambda s: s["start"]
        )  # numbered in reading order
        plan.pii_mask = build_mask((str(s["type"]), text[int(s["start"]) : int(s["end"])]) for s in spans)
        if not plan.pii_mask:
            return guarded  # nothing to mask by (no span for a denied type): block as before
    plan.pii_action = "mask" if plugins.pii_action == "mask" else "route"
    plan.response_headers["x-vsr-pii-action"] = plan.pii_action
    return [m for m in guarded if m is not match]


def blocking_match(guarded: list[SignalMatch]) -> SignalMatch | None:
    return next((m for m in guarded if m.matched and not m.error), None)


def block_if_flagged(plan: RoutePlan, guarded: list[SignalMatch]) -> bool:
    """Turn the plan into a 403 answer when a guard fired; True when it did."""
    match = blocking_match(guarded)
    if match is None:
        return False
    block(plan, match)
    return True


def block(plan: RoutePlan, match: SignalMatch) -> None:
    """403 security_violation for a guard that fired (spec 01 data-plane error body). A guard
    whose input was not scanned (`on_unscanned: block`) blocks the same way, entities
    `unscanned`. The body's `details`, the `x-vsr-guard-*` headers and the replay record name
    the check, its score and threshold (`plan.refusal`)."""
    unscanned = bool(match.detail.get("unscanned"))
    message = f"request blocked: the content could not be scanned ({match.type})" if unscanned else None
    if match.type == "pii":
        code = "pii_detected"
        found = (
            ["unscanned"]
            if unscanned
            else [str(t) for t in match.detail.get("denied") or match.detail.get("entities") or []]
        )
        plan.reason_code = "pii_policy_denied"
        headers = {"x-vsr-pii-violation": "true", "x-vsr-pii-types": ",".join(found)}
    elif match.type == "harmful":
        code = "harmful_content_detected"
        found = ["unscanned"] if unscanned else [str(t) for t in match.detail.get("detection_types") or []]
        plan.reason_code = "harmful_content_block"
        headers = {
            "x-vsr-harmful-blocked": "true",
            "x-vsr-harmful-categories": ",".join(found),
            "x-vsr-harmful-confidence": f"{match.confidence:.4f}",
        }
    else:
        code = "jailbreak_detected"
        found = ["unscanned"] if unscanned else [str(t) for t in match.detail.get("detection_types") or []]
        plan.reason_code = "jailbreak_block"
        headers = {
            "x-vsr-jailbreak-blocked": "true",
            "x-vsr-jailbreak-type": ",".join(found),
            "x-vsr-jailbreak-confidence": f"{match.confidence:.4f}",
        }
    refusal = refusal_of(match, code, found)
    error = security_violation(code, found, message=message, refusal=refusal.model_dump(exclude_none=True))
    headers |= {"x-vsr-guard-check": refusal.check, "x-vsr-guard-score": f"{refusal.score:.4f}"}
    if refusal.threshold is not None:
        headers["x-vsr-guard-threshold"] = f"{refusal.threshold:.4f}"
    plan.refusal = refusal
    plan.selected_model = None
    plan.immediate = ImmediateResponse(kind="block", status=error.status, body=error.body(), headers=headers)
    fill_routing_headers(plan, "bypass")


def refusal_of(match: SignalMatch, code: str, found: list[str]) -> Refusal:
    threshold = match.detail.get("threshold")
    read = match.detail.get("read")
    return Refusal(
        check=f"{match.type}:{match.name}",
        code=code,
        score=round(float(match.confidence), 4),
        threshold=round(float(threshold), 4) if isinstance(threshold, int | float) else None,
        read=str(read) if read else None,
        entities=found,
    )


def security_checks(matches: list[SignalMatch]) -> SecurityChecks:
    """Detections, not only policy violations: PII that a rule allows still counts as found.
    A safety signal whose input was not scanned is no detection: it is listed in `unscanned`."""
    checks = SecurityChecks()
    for m in matches:
        if m.detail.get("unscanned"):
            if m.type not in checks.unscanned:
                checks.unscanned.append(m.type)
            continue
        if m.error or not (m.matched or (m.type == "pii" and m.detail.get("detected"))):
            continue
        if m.type == "pii":
            checks.pii_detected = True
            entities = m.detail.get("entities") or m.detail.get("types") or []
            checks.pii_entities.extend(str(e) for e in entities if str(e) not in checks.pii_entities)
        elif m.type == "jailbreak":
            checks.jailbreak_detected = True
    return checks
