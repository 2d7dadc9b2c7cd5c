"""Replay records of the `router_replay` plugin (inspected under
/api/v1/observability/replays, docs/management-api.md).

route() gives a request whose decision carries the plugin a replay id (response header
`x-vsr-replay-id`); complete() turns the plan, what the front door saw and the
accounting into one record and hands it to `PipelineServices.record_replay` (the Ray
Router sends it to the Observability deployment, which every Router replica shares).

A record holds routing metadata only: no request or response headers, and the bodies
only when the plugin asks for them (`capture_request_body` / `capture_response_body`,
cut at `max_body_bytes`). The management API hides bodies from principals without
`data.read` and secret-named fields without `secret_view` (app/replays/replays.py).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from app.pipeline.plan import Accounting, CompletionReport, ReplayCapture, RoutePlan
from app.pipeline.plugins import ReplayPolicy

DEFAULT_MAX_BODY_BYTES = 65_536
REPLAY_ID_HEADER = "x-vsr-replay-id"


def new_capture(policy: ReplayPolicy) -> ReplayCapture:
    return ReplayCapture(
        replay_id=f"replay-{uuid.uuid4().hex}",
        capture_request_body=policy.capture_request_body,
        capture_response_body=policy.capture_response_body,
        max_body_bytes=policy.max_body_bytes,
    )


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def clip_body(body: Any, max_bytes: int | None) -> Any:
    """`body` as recorded: itself when its JSON form fits `max_bytes`, else a cut preview."""
    limit = DEFAULT_MAX_BODY_BYTES if max_bytes is None else max_bytes
    text = json.dumps(body, ensure_ascii=False, default=str)
    size = len(text.encode("utf-8"))
    if size <= limit:
        return body
    return {
        "truncated": True,
        "bytes": size,
        "preview": text.encode("utf-8")[:limit].decode("utf-8", "ignore"),
    }


def response_path(plan: RoutePlan, report: CompletionReport) -> str:
    """The reference router's x-vsr-response-path values."""
    if plan.immediate is not None:
        return {"cache_hit": "cache", "fast_response": "fast_response", "block": "blocked"}[
            plan.immediate.kind
        ]
    return "upstream" if report.status < 400 and not report.error_reason else "error"


def replay_record(plan: RoutePlan, report: CompletionReport, accounting: Accounting) -> dict[str, Any]:
    capture = plan.replay
    assert capture is not None
    record: dict[str, Any] = {
        "id": capture.replay_id,
        "request_id": plan.request_id,
        "session_id": plan.session_id,  # x-session-id; None when the client named no session
        "timestamp": _iso(plan.started_at) if plan.started_at else None,
        "endpoint": plan.endpoint,
        "requested_model": plan.requested_model,
        "auto": plan.auto,
        "recipe": plan.recipe,
        "decision": plan.decision,
        "selected_model": plan.selected_model,
        "served_model": accounting.model or report.model,
        "reason_code": plan.reason_code,
        "confidence": round(plan.confidence, 6),
        "response_path": response_path(plan, report),
        "status": report.status,
        "error": report.error_reason,
        "cache_hit": accounting.cached,
        "stream": report.stream,
        "matched_signals": [f"{m.type}:{m.name}" for m in plan.signals.matches if m.matched and not m.error],
        "signal_errors": list(plan.signals.errors),
        # which parts of the request each signal read, as a digest (docs/routing-quality.md)
        "signal_reads": {
            f"{m.type}:{m.name}": {"read": m.read, "digest": m.read_digest}
            for m in plan.signals.matches
            if m.read is not None
        },
        "security_checks": {
            "pii_detected": plan.security.pii_detected,
            "jailbreak_detected": plan.security.jailbreak_detected,
        },
        "reasoning": dict(plan.reasoning),
        "usage": dict(accounting.usage),
        "cost": {"amount": accounting.cost, "currency": accounting.currency},
        "classification_ms": round(plan.classification_ms, 3),
        "latency_ms": _ms(report.total_s),
        "ttft_ms": _ms(accounting.ttft_s),
    }
    if plan.pii_action is not None:  # the pii plugin masked it or routed it to a private model
        record["pii_action"] = plan.pii_action
    if plan.refusal is not None:  # which check refused it: what an operator marks wrong
        record["refusal"] = plan.refusal.model_dump(exclude_none=True)
    if plan.session is not None:  # session-aware routing: kept / switched and why
        record["session"] = plan.session.model_dump(exclude_none=True)
        record["session_id"] = record["session_id"] or plan.session.key
    if plan.router_replica is not None:
        record["router_replica"] = plan.router_replica
    if plan.rag is not None:  # the rag plugin's retrieval: which chunks the answer was grounded on
        record["rag"] = plan.rag
    if report.response_checks is not None:  # response_jailbreak / hallucination on the answer
        record["response_checks"] = report.response_checks
    if record["timestamp"] is None:
        del record["timestamp"]
    if capture.capture_request_body:
        record["request"] = clip_body(plan.body, capture.max_body_bytes)
    if capture.capture_response_body and report.response is not None:
        record["response"] = clip_body(report.response, capture.max_body_bytes)
    return record
