"""One flat-layout `vllm_endpoints[]` entry as a v0.3 backend_ref (part of the converter, app/config/legacy).

`{address, port, protocol}` becomes `endpoint: host:port` (plus `protocol` when not http),
or `base_url` where an endpoint cannot say it: a URL path or an IPv6 host.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit


class EndpointError(ValueError):
    """An endpoint that cannot be converted; `field` is its offending key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def backend_ref(ep: dict[str, Any], name: str) -> dict[str, Any]:
    """The backend_ref named `name` for the endpoint mapping `ep`; raises EndpointError."""
    address = ep.get("address")
    if not isinstance(address, str) or not address.strip():
        raise EndpointError("address", "an endpoint needs an address (host or IP)")
    address = address.strip()
    ref: dict[str, Any] = {"name": name}
    if "weight" in ep:
        ref["weight"] = ep["weight"]
    if "://" in address:
        ref.update(_from_url(address, ep.get("port")))
    else:
        ref.update(_from_host(address, ep))
    return ref


def _from_url(address: str, port: Any) -> dict[str, Any]:
    parts = urlsplit(address)
    host = parts.hostname or ""
    try:
        port = parts.port or port
    except ValueError:
        raise EndpointError("address", f"{address!r} has an invalid port") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise EndpointError("address", f"unsupported scheme {scheme!r}")
    if port is None:
        port = 443 if scheme == "https" else 80
    path = parts.path.rstrip("/")
    if path or ":" in host:
        netloc = f"[{host}]" if ":" in host else host
        return {"base_url": f"{scheme}://{netloc}:{port}{path}"}
    return {"endpoint": f"{host}:{port}", "protocol": scheme}


def _from_host(address: str, ep: dict[str, Any]) -> dict[str, Any]:
    port = ep.get("port")
    if isinstance(port, bool) or not isinstance(port, int | str) or not str(port).isdigit():
        raise EndpointError("port", "an endpoint needs a numeric port")
    protocol = str(ep.get("protocol") or "http")
    if ":" in address:  # a bare IPv6 address
        return {"base_url": f"{protocol}://[{address.strip('[]')}]:{port}"}
    ref: dict[str, Any] = {"endpoint": f"{address}:{port}"}
    if protocol != "http":
        ref["protocol"] = protocol
    return ref
