"""Routing headers of a RoutePlan (spec 01 "Routing headers", reference x-vsr-* set).

Response (client) headers: x-selected-model, x-routing-confidence, x-request-id,
x-cache-status (hit|miss|bypass), x-vsr-selected-{recipe,decision,model,confidence,reasoning},
x-vsr-matched-<family> (comma list of matched rule names: keywords, embeddings,
context, domains, pii, jailbreak, ...), x-security-checks, x-vsr-unscanned (safety
families whose input a model runtime did not scan, e.g. `jailbreak`; only when there are
some), x-vsr-session / x-vsr-session-reason (session-aware routing's action and why,
app/pipeline/sessions.py), x-tools-selected, x-classification-time (ms). x-processing-time is the front door's (it alone knows
when the answer ended).

Upstream (request) headers: x-selected-model, x-routing-confidence, x-request-id,
x-cache-status (the spec's "added to the request" set), then header_mutation results.
"""

from __future__ import annotations

import re

from app.pipeline.plan import RoutePlan

# condition type -> header suffix (the reference router's plural forms)
MATCHED_HEADER_SUFFIX = {
    "keyword": "keywords",
    "embedding": "embeddings",
    "domain": "domains",
    "context": "context",
    "pii": "pii",
    "jailbreak": "jailbreak",
    "harmful": "harmful",
    "fact_check": "fact-check",
    "user_feedback": "user-feedback",
}
_UNSAFE = re.compile(r"[^\x20-\x7e]")


def header_value(value: object) -> str:
    """Printable ASCII only: rule names come from user files and must not break HTTP framing."""
    return _UNSAFE.sub("?", str(value))


def fill_routing_headers(plan: RoutePlan, cache_status: str) -> None:
    model = plan.selected_model or ""
    confidence = f"{plan.confidence:.4f}"
    common = {
        "x-selected-model": header_value(model),
        "x-routing-confidence": confidence,
        "x-request-id": header_value(plan.request_id),
        "x-cache-status": cache_status,
    }
    response = plan.response_headers
    response.update(common)
    if plan.recipe:
        response["x-vsr-selected-recipe"] = header_value(plan.recipe)
    if plan.decision:
        response["x-vsr-selected-decision"] = header_value(plan.decision)
    if model:
        response["x-vsr-selected-model"] = header_value(model)
    if plan.auto:
        response["x-vsr-selected-confidence"] = confidence
    if plan.reasoning:
        response["x-vsr-selected-reasoning"] = "on" if plan.reasoning.get("enabled") else "off"
    families: dict[str, list[str]] = {}
    for match in plan.signals.matches:
        if match.matched and match.error is None:
            families.setdefault(match.type, []).append(match.name)
    for family, names in families.items():
        suffix = MATCHED_HEADER_SUFFIX.get(family, family)
        response[f"x-vsr-matched-{suffix}"] = header_value(",".join(names))
    response["x-security-checks"] = plan.security.header()
    if plan.security.unscanned:
        response["x-vsr-unscanned"] = ",".join(plan.security.unscanned)
    if plan.session is not None:  # session-aware routing: kept / switched / started / per_turn, why
        response["x-vsr-session"] = plan.session.action
        response["x-vsr-session-reason"] = plan.session.reason
    response["x-tools-selected"] = str(plan.tools_selected)
    response["x-classification-time"] = f"{plan.classification_ms:.2f}"
    plan.upstream_headers.update(common)
