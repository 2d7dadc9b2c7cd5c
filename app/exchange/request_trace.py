"""One request's spans at the front door (docs/security.md "Tracing"): the request span (under
the client's W3C traceparent), the stream's, and the carriers that take the trace across the
Ray hops (the headers route() gets, the plan's `trace_context` for complete()) and to the
upstream (`traceparent` among the plan's upstream headers). Tracing off: no-op spans."""

from __future__ import annotations

from collections.abc import Mapping

from app.common import tracing
from app.pipeline.plan import RoutePlan


class RequestTrace:
    def __init__(self, headers: Mapping[str, str], endpoint: str, request_id: str) -> None:
        self.span = tracing.start_span(
            "svc_sr.request",
            parent=headers,
            kind=tracing.SpanKind.SERVER,
            attributes={"svc_sr.endpoint": endpoint, "svc_sr.request_id": request_id},
        )
        self.stream: tracing.Span | None = None
        self.ended = False

    def route_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The client's headers with this request's traceparent: the Router's spans join it."""
        out = dict(headers)
        tracing.inject(out, self.span)
        return out

    def routed(self, plan: RoutePlan) -> None:
        plan.trace_context = tracing.carrier_of(self.span)
        plan.upstream_headers.update(plan.trace_context)

    def streaming(self, plan: RoutePlan, model: str) -> None:
        self.stream = tracing.start_span(
            "svc_sr.stream", parent=plan.trace_context, attributes={"svc_sr.model": model}
        )

    def end(
        self, status: int, reason: str | None = None, decision: str | None = None, model: str | None = None
    ) -> None:
        """The outcome is known: the stream's span and the request's end with it."""
        if self.ended:
            return
        self.ended = True
        for span in (self.stream, self.span):
            if span is None:
                continue
            tracing.set_attributes(
                span,
                {
                    "http.response.status_code": status,
                    "svc_sr.error": reason,
                    "svc_sr.decision": decision,
                    "svc_sr.selected_model": model,
                },
            )
            if status >= 500 or reason in ("upstream_5xx", "timeout", "routing_failed"):
                tracing.fail(span, reason or f"status {status}")
            span.end()
