"""Tracing for this process (docs/security.md "Tracing"): each process that handles requests
(an Ingress replica, a Router replica, the ext_proc sidecar) calls `configure_tracing` with
`global.services.observability.tracing` once; spans then go over OTLP/HTTP (protobuf) through a
batching processor, off the request path. The spans themselves are made through
app/common/tracing.py, which every layer can reach; this module owns the SDK.
"""

from __future__ import annotations

import logging
from typing import Any

from app.common import tracing
from app.common.tracing import flush_tracing, shutdown_tracing
from app.config.global_config import TracingConfig

log = logging.getLogger("svc_sr.tracing")


def configure_tracing(settings: TracingConfig | None, service: str) -> None:
    """Tracing for this process as `settings` say (None or disabled: the no-op tracer). The
    same settings again change nothing; other settings replace the provider (flushing the old)."""
    if settings is not None and settings.enabled and settings == tracing.installed_settings():
        return
    tracing.shutdown_tracing()
    if settings is None or not settings.enabled:
        return
    # The SDK loads only when tracing is on: a disabled router never imports it.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased

    sampling = settings.sampling
    root = {"always_on": ALWAYS_ON, "always_off": ALWAYS_OFF}.get(sampling.type) or TraceIdRatioBased(
        sampling.rate
    )
    attributes = {"service.name": settings.resource.service_name, "svc_sr.process": service}
    if settings.resource.service_version:
        attributes["service.version"] = settings.resource.service_version
    if settings.resource.deployment_environment:
        attributes["deployment.environment"] = settings.resource.deployment_environment
    try:
        exporter = _exporter(settings)
    except ImportError as exc:  # an install whose opentelemetry.proto is stale (Makefile): no traces
        log.error("tracing stays off: the OTLP exporter cannot load (%s)", exc)
        return
    provider = TracerProvider(resource=Resource.create(attributes), sampler=ParentBased(root))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    tracing.install(provider, settings)


def _exporter(settings: TracingConfig) -> Any:
    exporter = settings.exporter
    if exporter.type == "stdout":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = exporter.endpoint.rstrip("/")
    if not endpoint.endswith("/v1/traces"):
        endpoint += "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint, timeout=exporter.timeout_s)


__all__ = ["configure_tracing", "flush_tracing", "shutdown_tracing"]
