"""What every front door adds to an answer: the client-side routing headers and the
`routing_metadata` object the contract fixes. One copy, so the Ingress and the ext_proc bridge
cannot drift apart."""

from __future__ import annotations

import time
from typing import Any

from app.pipeline.plan import RoutePlan


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def client_headers(plan: RoutePlan, started: float) -> dict[str, str]:
    """`started`: time.perf_counter() when the front door received the request."""
    headers = dict(plan.response_headers)
    headers["x-request-id"] = plan.request_id
    headers["x-processing-time"] = _ms(time.perf_counter() - started)
    headers.setdefault("x-classification-time", f"{plan.classification_ms:.2f}")
    headers.setdefault("x-security-checks", plan.security.header())
    headers.setdefault("x-tools-selected", str(plan.tools_selected))
    return headers


def routing_metadata(plan: RoutePlan, started: float, cost: float | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "selected_model": plan.selected_model,
        "recipe": plan.recipe,
        "decision": plan.decision,
        "reason_code": plan.reason_code,
        "confidence": plan.confidence,
        "processing_time_ms": round((time.perf_counter() - started) * 1000, 3),
        "cache_hit": plan.immediate is not None and plan.immediate.kind == "cache_hit",
        "security_checks": {
            "pii_detected": plan.security.pii_detected,
            "jailbreak_detected": plan.security.jailbreak_detected,
        },
    }
    if plan.security.unscanned:  # safety signals a model runtime did not scan (docs/security.md)
        meta["security_checks"]["unscanned"] = list(plan.security.unscanned)
    if plan.memories_recalled is not None:  # the decision's memory plugin ran
        meta["memories_recalled"] = plan.memories_recalled
    if plan.rag is not None:  # the decision's rag plugin ran: which chunks went in
        meta["rag"] = plan.rag
    if plan.budget is not None:  # the key's budget stepped the selection down (docs/security.md)
        meta["budget"] = plan.budget
    if cost is not None:
        meta["cost"] = cost
    return meta
