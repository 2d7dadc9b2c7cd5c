"""The request Envoy forwards for a routed exchange: its first candidate, in that backend's wire.

Behind Envoy the bridge cannot call the backend itself: it rewrites what Envoy sends. The
headers follow the Ingress's upstream client: the plan's headers, then the protocol's
credentials, then the backend's extra_headers (which may override either); a backend key
(`x-api-key`) replaces the client's `authorization`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from app.exchange.exchange import Exchange, Reply
from app.upstream.messages_api import MessagesTranslationError
from app.upstream.wire import wire_for


@dataclass
class EnvoyRequest:
    body: bytes
    set_headers: dict[str, str]
    remove: list[str]


def envoy_request(exchange: Exchange, client_path: str | None) -> EnvoyRequest | Reply:
    """The rewritten request, or the exchange's 400 when the backend cannot express it."""
    plan = exchange.plan
    assert plan is not None and plan.candidates
    target = plan.candidates[0]
    wire = wire_for(target)
    try:
        body = json.dumps(wire.request_body(exchange.upstream_body, target)).encode()
    except MessagesTranslationError as exc:
        return exchange.refused_by_wire(exc.status, exc.body(), target)
    set_headers = _lower(plan.upstream_headers, wire.request_headers(target))
    set_headers.update(
        {
            "x-selected-model": target.model,
            "content-type": "application/json",
            "content-length": str(len(body)),  # Envoy answers 500 without it after a rewrite
        }
    )
    remove = list(plan.upstream_headers_remove)
    if "x-api-key" in set_headers and "authorization" not in set_headers:
        remove.append("authorization")
    if exchange.admission is not None:  # the client's svc-sr API key never reaches a backend
        remove += [
            name for name in ("authorization", "x-api-key") if name not in set_headers and name not in remove
        ]
    path = wire.path(target)
    if path != client_path:
        set_headers[":path"] = path
    return EnvoyRequest(body, set_headers, remove)


def _lower(*maps: dict[str, str]) -> dict[str, str]:
    """Merged header maps, names lower-cased (later maps win, whatever their spelling)."""
    out: dict[str, str] = {}
    for headers in maps:
        for name, value in headers.items():
            out[name.lower()] = value
    return out
