"""envoy.yaml generated from the router config (Envoy on 8801, ext_proc on 50051; docs/envoy.md).

    listener 8801 -> ext_proc filter (the bridge) -> router filter
      routes: x-selected-model == <model>  -> cluster of that model's backend_refs
              GET /v1/models               -> the management API (8080), ext_proc off
              anything else                -> the default model's cluster, else 503
    clusters: one per model (its endpoints, weighted), the bridge (HTTP/2), management

The bridge sets `x-selected-model` and clears the route cache, so Envoy re-matches
the route after routing. Requests that carry no such header (the bridge failed open,
or an API the router does not handle) take the default route.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from app.common.errors import error_body
from app.config.document import RouterConfig
from app.config.providers import BackendRef, ProviderModel

ROUTER_HEADER = "x-selected-model"
EXT_PROC_CLUSTER = "svc_sr_ext_proc"
MANAGEMENT_CLUSTER = "svc_sr_management"
BUFFER_LIMIT_BYTES = 32 * 1024 * 1024  # BUFFERED bodies must fit (default 1 MiB cuts long answers)
EXT_PROC_PER_ROUTE = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"


class EnvoyPorts(BaseModel):
    """Where everything listens; defaults from the config, overridable for tests."""

    listener_address: str = "127.0.0.1"
    listener_port: int = 8801
    ext_proc_address: str = "127.0.0.1"
    ext_proc_port: int = 50051
    management_address: str = "127.0.0.1"
    management_port: int = 8080
    admin_port: int = 9901

    @classmethod
    def from_config(cls, config: RouterConfig, **overrides: Any) -> EnvoyPorts:
        services = config.global_.services
        listener = config.listeners[0] if config.listeners else None
        values: dict[str, Any] = {
            "ext_proc_address": services.ext_proc.bind_address,
            "ext_proc_port": services.ext_proc.port,
            "management_address": services.management_api.bind_address,
            "management_port": services.management_api.port,
            "admin_port": services.envoy.admin_port,
        }
        if listener is not None:
            values.update(listener_address=listener.address, listener_port=listener.port)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def cluster_name(model: str) -> str:
    return "model_" + re.sub(r"[^A-Za-z0-9_.-]", "_", model)


# Envoy's own replies when no backend answered (connect failure, no healthy host, retries
# exhausted, reset, timeout) get the error body and Retry-After the standalone door gives
# (app/api/errors.py upstream_unavailable / upstream_timeout) instead of Envoy's plain text.
# Matched by response flags only, so the bridge's immediate responses (blocks, cache hits,
# its own errors) are never rewritten.
UPSTREAM_DOWN_FLAGS = ["UF", "UH", "URX", "UC", "UR", "UO"]
UPSTREAM_TIMEOUT_FLAGS = ["UT"]


# Envoy's reply when the ext_proc service cannot be reached or fails (its sidecar restarting):
# found by the reply's code details, never set on the bridge's own answers (details "svc-sr").
def _cel(expression: str) -> dict[str, Any]:
    return {
        "extension_filter": {
            "name": "envoy.access_loggers.extension_filters.cel",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
                "expression": expression,
            },
        }
    }


def _code_details(details: str) -> dict[str, Any]:
    return _cel(f"response.code_details == '{details}'")


EXT_PROC_FAILED = _cel("response.code_details.startsWith('ext_proc_error')")


def _reply_mapper(
    flags: list[str] | dict[str, Any],
    status: int,
    message: str,
    error_type: str,
    code: str,
    retry: bool = True,
) -> dict[str, Any]:
    """`flags`: the response flags to match, or a whole filter; `retry`: with Retry-After: 1."""
    retry_after = {
        "header": {"key": "retry-after", "value": "1"},
        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
    }
    return {
        "filter": flags if isinstance(flags, dict) else {"response_flag_filter": {"flags": flags}},
        "status_code": status,
        "headers_to_add": [retry_after] if retry else [],
        "body_format_override": {
            "json_format": error_body(message, error_type, code),
            "content_type": "application/json",
        },
    }


def upstream_failure_replies() -> dict[str, Any]:
    return {
        "mappers": [
            _reply_mapper(
                UPSTREAM_TIMEOUT_FLAGS,
                504,
                "upstream model backend timed out",
                "timeout_error",
                "upstream_timeout",
            ),
            _reply_mapper(
                UPSTREAM_DOWN_FLAGS,
                503,
                "upstream model backends are unavailable; retry later",
                "service_unavailable_error",
                "upstream_unavailable",
            ),
            # As the bridge answers when it fails itself (app/extproc/stream.py).
            _reply_mapper(
                EXT_PROC_FAILED,
                503,
                "the router is unavailable; retry later",
                "service_unavailable_error",
                "upstream_unavailable",
            ),
            # A body over Envoy's own buffer (BUFFER_LIMIT_BYTES), before the bridge saw it: the
            # 413 the bridge gives a body over max_body_bytes.
            _reply_mapper(
                _code_details("request_payload_too_large"),
                413,
                "request body exceeds the limit of the gateway's buffer",
                "invalid_request_error",
                "body_too_large",
                retry=False,
            ),
        ]
    }


def server_error_log() -> dict[str, Any]:
    """Every 5xx Envoy answers (its own, the bridge's, a backend's), one line on Envoy's stderr
    (`svc-sr logs envoy`) as it is sent, with the request id the client got (the bridge logs
    its own failures with the same id: `svc-sr logs sidecar`)."""
    line = (
        "[%START_TIME%] 5xx %RESPONSE_CODE% %RESPONSE_CODE_DETAILS% %REQ(:METHOD)% %REQ(:PATH)% "
        "request id %REQ(X-REQUEST-ID)% upstream %UPSTREAM_HOST% flags %RESPONSE_FLAGS%\n"
    )
    server_error = {"op": "GE", "value": {"default_value": 500, "runtime_key": "svc_sr.log_5xx"}}
    return {
        "name": "envoy.access_loggers.stderr",
        "filter": {"status_code_filter": {"comparison": server_error}},
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StderrAccessLog",
            "log_format": {"text_format_source": {"inline_string": line}},
        },
    }


def build_envoy_config(
    config: RouterConfig, ports: EnvoyPorts | None = None, with_ext_proc: bool = True
) -> dict[str, Any]:
    """`with_ext_proc=False`: the same Envoy without the router (a benchmark baseline)."""
    ports = ports or EnvoyPorts.from_config(config)
    services = config.global_.services
    models = [m for m in config.providers.models if m.backend_refs]
    timeout = f"{services.envoy.route_timeout_s}s"
    routes: list[dict[str, Any]] = [
        {
            "name": f"model-{m.name}",
            "match": {"prefix": "/", "headers": [{"name": ROUTER_HEADER, "string_match": {"exact": m.name}}]},
            "route": _route_action(m, timeout),
        }
        for m in models
    ]
    routes.append(
        {
            "name": "model-list",
            "match": {
                "path": "/v1/models",
                "headers": [{"name": ":method", "string_match": {"exact": "GET"}}],
            },
            "route": {"cluster": MANAGEMENT_CLUSTER, "timeout": "15s"},
        }
    )
    if with_ext_proc:
        routes[-1]["typed_per_filter_config"] = {
            "envoy.filters.http.ext_proc": {"@type": EXT_PROC_PER_ROUTE, "disabled": True}
        }
    default = config.default_model
    default_model = next((m for m in models if m.name == default), None)
    if default_model is not None:
        routes.append(
            {
                "name": "default-model",
                "match": {"prefix": "/"},
                "route": _route_action(default_model, timeout),
            }
        )
    else:
        routes.append(
            {
                "name": "unrouted",
                "match": {"prefix": "/"},
                "direct_response": {
                    "status": 503,
                    "body": {
                        "inline_string": json.dumps(
                            error_body(
                                "no route: the router did not select a model",
                                "service_unavailable",
                                "no_route",
                            ),
                            separators=(",", ":"),
                        )
                    },
                },
            }
        )

    ext_proc = {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": EXT_PROC_CLUSTER}, "timeout": "30s"},
            "failure_mode_allow": services.ext_proc.failure_mode == "open",
            "status_on_error": {"code": 503},  # closed, the router unreachable: 503, not 500
            "message_timeout": f"{services.ext_proc.message_timeout_ms / 1000:g}s",
            "allow_mode_override": True,
            "processing_mode": {
                "request_header_mode": "SEND",
                "request_body_mode": "BUFFERED",
                "response_header_mode": "SEND",
                "response_body_mode": "BUFFERED",
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
            "mutation_rules": {"allow_all_routing": True},
        },
    }
    listener = {
        "name": "svc_sr_http",
        "address": {"socket_address": {"address": ports.listener_address, "port_value": ports.listener_port}},
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
                            ".HttpConnectionManager",
                            "stat_prefix": "svc_sr",
                            "stream_idle_timeout": "300s",
                            "request_timeout": "0s",
                            "route_config": {
                                "name": "svc_sr_routes",
                                "virtual_hosts": [{"name": "models", "domains": ["*"], "routes": routes}],
                            },
                            "local_reply_config": upstream_failure_replies(),
                            # The client can quote the id of any answer, Envoy's own included.
                            "always_set_request_id_in_response": True,
                            "access_log": [server_error_log()],
                            "http_filters": [
                                *([ext_proc] if with_ext_proc else []),
                                {
                                    "name": "envoy.filters.http.router",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                                    },
                                },
                            ],
                        },
                    }
                ]
            }
        ],
    }
    clusters = [_model_cluster(m) for m in models]
    clusters.append(
        _static_cluster(EXT_PROC_CLUSTER, ports.ext_proc_address, ports.ext_proc_port, http2=True)
    )
    clusters.append(_static_cluster(MANAGEMENT_CLUSTER, ports.management_address, ports.management_port))
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": ports.admin_port}}},
        "static_resources": {"listeners": [listener], "clusters": clusters},
    }


def _route_action(model: ProviderModel, timeout: str) -> dict[str, Any]:
    action: dict[str, Any] = {"cluster": cluster_name(model.name), "timeout": timeout}
    if any(not _is_ip(_split(ref)[1]) for ref in model.backend_refs):
        action["auto_host_rewrite"] = True  # named hosts (api.example.com) expect their own Host header
    reliability = model.reliability
    if reliability is not None and reliability.retry_count:
        # The model's own reliability, enforced by Envoy (the bridge cannot retry what Envoy sends).
        action["retry_policy"] = {
            "retry_on": ",".join(
                reliability.retry_on
                or ["connect-failure", "refused-stream", "reset", "retriable-status-codes"]
            ),
            "num_retries": reliability.retry_count,
            "retriable_status_codes": reliability.retriable_status_codes or [429, 502, 503, 504],
        }
    return action


def _split(ref: BackendRef) -> tuple[str, str, int]:
    parts = urlsplit(ref.resolved_base_url())
    scheme = parts.scheme or "http"
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, parts.hostname or "127.0.0.1", port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _model_cluster(model: ProviderModel) -> dict[str, Any]:
    endpoints = []
    named_host = False
    tls_host: str | None = None
    for ref in model.backend_refs:
        scheme, host, port = _split(ref)
        named_host |= not _is_ip(host)
        if scheme == "https":
            tls_host = host
        endpoint: dict[str, Any] = {
            "endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}
        }
        if ref.weight and len(model.backend_refs) > 1:
            endpoint["load_balancing_weight"] = max(1, int(round(ref.weight * 100)))
        endpoints.append(endpoint)
    cluster: dict[str, Any] = {
        "name": cluster_name(model.name),
        "type": "STRICT_DNS" if named_host else "STATIC",
        "connect_timeout": "5s",
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
        "load_assignment": {
            "cluster_name": cluster_name(model.name),
            "endpoints": [{"lb_endpoints": endpoints}],
        },
    }
    if named_host:
        cluster["dns_lookup_family"] = "V4_PREFERRED"
    if tls_host is not None:
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": tls_host,
            },
        }
    return cluster


def _static_cluster(name: str, address: str, port: int, http2: bool = False) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC" if _is_ip(address) else "STRICT_DNS",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {"socket_address": {"address": address, "port_value": port}}
                            }
                        }
                    ]
                }
            ],
        },
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return cluster
