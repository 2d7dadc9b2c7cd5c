"""OpenTelemetry spans of the data plane (docs/security.md "Tracing"): the API every layer
calls (spans, the traceparent carriers). The SDK's provider is installed by
app/observability/tracing.py (`configure_tracing`); until then, and whenever tracing is off,
`tracer()` is OpenTelemetry's no-op tracer: a span costs a function call, nothing is exported.

One trace per request across the Ray hops: the front door opens the request span with the
client's W3C `traceparent` as parent, and its context rides in what crosses each hop as a
`traceparent` carrier: the headers handed to `route()`, the plan's `trace_context` for
`complete()`, and the upstream request's headers (`inject`). The receiving side reads it back
with `extract`. This provider is our own, never the process's global one (Ray and libraries
keep theirs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, NoOpTracer, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("svc_sr.tracing")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_PROPAGATOR = TraceContextTextMapPropagator()
_NOOP = NoOpTracer()


class _State:
    tracer: Tracer = _NOOP
    provider: Any = None  # the SDK TracerProvider while tracing is on
    settings: Any = None  # what configured it (app/observability/tracing.py)


_state = _State()


def flush_tracing(timeout_s: float = 5.0) -> bool:
    """Export what is buffered now (tests, shutdown); True when nothing was left behind."""
    provider = _state.provider
    return True if provider is None else bool(provider.force_flush(int(timeout_s * 1000)))


def install(provider: Any, settings: Any) -> None:
    """Tracing on: `provider` (an SDK TracerProvider) makes the spans (app/observability/tracing.py)."""
    shutdown_tracing()
    _state.provider, _state.settings = provider, settings
    _state.tracer = provider.get_tracer("svc_sr")


def installed_settings() -> Any:
    return _state.settings


def shutdown_tracing() -> None:
    provider, _state.provider, _state.tracer, _state.settings = _state.provider, None, _NOOP, None
    if provider is not None:
        try:
            provider.shutdown()
        except Exception:  # an exporter that cannot reach its collector must not stop a replica
            log.warning("tracing shutdown failed", exc_info=True)


def tracer() -> Tracer:
    return _state.tracer


def enabled() -> bool:
    return _state.provider is not None


def extract(carrier: Mapping[str, str] | None) -> Context | None:
    """The span context a `traceparent` carrier names (any header case), or None."""
    if not carrier:
        return None
    lowered = {k.lower(): v for k, v in carrier.items() if k.lower() in (TRACEPARENT, TRACESTATE)}
    return _PROPAGATOR.extract(lowered) if lowered else None


def inject(carrier: MutableMapping[str, str], span: Span | None = None) -> None:
    """Write `span`'s context (default: the current one) as `traceparent` into `carrier`;
    nothing when tracing is off or the span is not recording (a no-op span has no context)."""
    if not enabled():
        return
    context = trace.set_span_in_context(span) if span is not None else None
    _PROPAGATOR.inject(carrier, context=context)


def carrier_of(span: Span) -> dict[str, str]:
    out: dict[str, str] = {}
    inject(out, span)
    return out


@contextmanager
def span(
    name: str,
    parent: Mapping[str, str] | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span]:
    """A span made current for its block: its parent is the span a `parent` carrier names
    (traceparent), else the current span. An exception marks it failed and propagates."""
    if _state.provider is None:  # off: no carrier parsed, no context attached
        yield INVALID_SPAN
        return
    context = extract(parent)
    with _state.tracer.start_as_current_span(
        name, context=context, kind=kind, attributes=_attrs(attributes), record_exception=True
    ) as current:
        yield current


def start_span(
    name: str,
    parent: Mapping[str, str] | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> Span:
    """A span the caller ends (one that outlives a block: the request, the stream)."""
    if _state.provider is None:
        return INVALID_SPAN
    context = extract(parent)
    return _state.tracer.start_span(name, context=context, kind=kind, attributes=_attrs(attributes))


def set_attributes(target: Span, attributes: Mapping[str, Any]) -> None:
    if target.is_recording():
        target.set_attributes(_attrs(attributes) or {})


def fail(target: Span, reason: str) -> None:
    if target.is_recording():
        target.set_status(Status(StatusCode.ERROR, reason))


def _attrs(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """OpenTelemetry takes str, bool, int, float (and lists of them): None values are dropped."""
    if not attributes:
        return None
    return {k: v for k, v in attributes.items() if v is not None}


__all__ = [
    "Span",
    "SpanKind",
    "carrier_of",
    "enabled",
    "extract",
    "fail",
    "flush_tracing",
    "inject",
    "install",
    "installed_settings",
    "set_attributes",
    "shutdown_tracing",
    "span",
    "start_span",
    "tracer",
]
