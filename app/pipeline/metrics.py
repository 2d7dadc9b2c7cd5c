"""What the router records about RoutePlans and their completions, in the contract's metric
names (docs/envoy.md).

`on_route` runs once per routed request (not for previews), `on_complete` once per
answered request (immediate answers included), `on_front_door_error` for requests
that never reached `route()` (bad JSON, the Router unavailable). Labels:
- category: the first matched domain signal, else the decision, else `none`
  (explicit model requests carry no classification).
- endpoint: the front door's name for the API (`chat_completions`, `responses`).
- action (PII / jailbreak): `block` when the request was refused, `fast_response` when
  a fast_response decision answered it, else `allow` (detected, not acted upon).
"""

from __future__ import annotations

import logging

from app.observability.metrics import MetricsRecorder
from app.pipeline.plan import Accounting, CompletionReport, RoutePlan, SignalMatch

log = logging.getLogger("svc_sr.metrics")


def request_category(plan: RoutePlan) -> str:
    domains = plan.signals.matched("domain")
    if domains:
        return domains[0]
    return plan.decision or "none"


def signal_result(match: SignalMatch) -> str:
    return "error" if match.error else "matched" if match.matched else "unmatched"


def _guard_action(plan: RoutePlan, blocking_reason: str) -> str:
    if plan.immediate is not None and plan.immediate.kind == "block" and plan.reason_code == blocking_reason:
        return "block"
    if plan.immediate is not None and plan.immediate.kind == "fast_response":
        return "fast_response"
    return "allow"


class RouterMetrics:
    def __init__(self, recorder: MetricsRecorder | None = None) -> None:
        self.recorder = recorder or MetricsRecorder()

    def on_route(self, plan: RoutePlan) -> None:
        try:
            self._on_route(plan)
        except Exception:  # metrics must never fail a request
            log.exception("recording route metrics failed")

    def on_complete(self, plan: RoutePlan, report: CompletionReport, accounting: Accounting) -> None:
        try:
            self._on_complete(plan, report, accounting)
        except Exception:
            log.exception("recording completion metrics failed")

    def on_front_door_error(self, endpoint: str, reason: str, status: int, model: str = "unknown") -> None:
        r = self.recorder
        r.inc("svc_router_requests_total", endpoint=endpoint, category="none", status=status)
        r.inc("llm_request_errors_total", model=model or "unknown", reason=reason)

    # ------------------------------------------------------------------ internals
    def _on_route(self, plan: RoutePlan) -> None:
        r = self.recorder
        if plan.auto:
            r.observe("svc_router_classification_duration_seconds", plan.classification_ms / 1000)
            self._signal_metrics(plan)
        if plan.security.pii_detected:
            action = plan.pii_action or _guard_action(plan, "pii_policy_denied")
            r.inc("svc_router_pii_detections_total", action=action)
        if plan.security.jailbreak_detected:
            r.inc("svc_router_jailbreak_attempts_total", action=_guard_action(plan, "jailbreak_block"))
        cache_status = plan.response_headers.get("x-cache-status") or plan.upstream_headers.get(
            "x-cache-status"
        )
        if cache_status in ("hit", "miss"):
            r.inc("svc_router_cache_lookups_total", result=cache_status)
        if plan.compression is not None:
            self._compression_metrics(plan)
        reasoning = plan.reasoning
        if reasoning and plan.selected_model:
            enabled = bool(reasoning.get("enabled"))
            effort = str(reasoning.get("effort") or "none")
            family = str(reasoning.get("family") or "unknown")
            r.inc(
                "llm_reasoning_decisions_total",
                category=request_category(plan),
                model=plan.selected_model,
                enabled=str(enabled).lower(),
                effort=effort,
            )
            if reasoning.get("applied"):
                r.inc(
                    "llm_reasoning_template_usage_total", family=family, param=str(reasoning.get("parameter"))
                )
                if enabled:
                    r.inc("llm_reasoning_effort_usage_total", family=family, effort=effort)

    def _compression_metrics(self, plan: RoutePlan) -> None:
        """context_compression: counts and timing only (message content never leaves the plan)."""
        r, outcome = self.recorder, plan.compression
        assert outcome is not None
        recipe, decision = plan.recipe or "default", plan.decision or "none"
        r.inc(
            "svc_router_context_compression_requests_total",
            recipe=recipe,
            decision=decision,
            compressed=str(outcome.compressed).lower(),
            over_budget=str(outcome.over_budget).lower(),
        )
        if outcome.turns_dropped:
            r.inc(
                "svc_router_context_compression_turns_dropped_total",
                outcome.turns_dropped,
                recipe=recipe,
                decision=decision,
            )
        if outcome.tokens_saved > 0:
            r.inc(
                "svc_router_context_compression_tokens_saved_total",
                outcome.tokens_saved,
                recipe=recipe,
                decision=decision,
            )
        r.observe("svc_router_context_compression_duration_seconds", outcome.duration_ms / 1000)

    def _signal_metrics(self, plan: RoutePlan) -> None:
        """Per signal family (guard rules included): one evaluation per request, each rule's
        result, and the family's evaluation time (families the signal phase ran)."""
        r = self.recorder
        by_family: dict[str, list[SignalMatch]] = {}
        for match in plan.signals.matches:
            by_family.setdefault(match.type, []).append(match)
        for family, matches in by_family.items():
            results = [signal_result(m) for m in matches]
            result = "error" if "error" in results else "matched" if "matched" in results else "unmatched"
            r.inc("svc_router_signal_evaluations_total", family=family, result=result)
            for match, rule_result in zip(matches, results, strict=True):
                r.inc("svc_router_signal_results_total", family=family, signal=match.name, result=rule_result)
        for family, ms in plan.signals.timings_ms.items():
            r.observe("svc_router_signal_duration_seconds", ms / 1000, family=family)

    def _on_complete(self, plan: RoutePlan, report: CompletionReport, accounting: Accounting) -> None:
        r = self.recorder
        model = report.model or plan.selected_model or plan.requested_model or "unknown"
        r.inc(
            "svc_router_requests_total",
            endpoint=plan.endpoint,
            category=request_category(plan),
            status=report.status,
        )
        if report.total_s is not None and report.total_s >= 0:
            r.observe("svc_router_request_duration_seconds", report.total_s, endpoint=plan.endpoint)
        r.inc("llm_model_requests_total", model=model)
        r.inc("llm_routing_reason_codes_total", reason_code=plan.reason_code, model=model)
        reason = report.error_reason
        if reason is None and plan.immediate is not None and plan.immediate.kind == "block":
            reason = plan.reason_code  # pii_policy_denied | jailbreak_block
        if reason is None and report.status >= 400:
            reason = "upstream_4xx" if report.status < 500 else "upstream_5xx"
        if reason is not None:
            r.inc("llm_request_errors_total", model=model, reason=reason)
        if accounting.cost > 0:
            r.inc("llm_model_cost_total", accounting.cost, model=model, currency=accounting.currency)
        if accounting.ttft_s is not None:
            r.observe("llm_model_ttft_seconds", accounting.ttft_s, model=model)
        if accounting.tpot_s is not None:
            r.observe("llm_model_tpot_seconds", accounting.tpot_s, model=model)
