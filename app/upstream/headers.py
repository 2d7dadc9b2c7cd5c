"""Which headers the upstream client forwards, and the Retry-After header."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping

import httpx

# Never forwarded: they describe the client's connection, not the request.
HOP_BY_HOP_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "accept-encoding",
        "expect",
    }
)


def upstream_request_headers(caller: Mapping[str, str], protocol: Mapping[str, str]) -> httpx.Headers:
    """The caller's end-to-end headers, then JSON framing, then the wire's credentials and
    the target's extra headers (`protocol`, which win)."""
    out = httpx.Headers({k: v for k, v in caller.items() if k.lower() not in HOP_BY_HOP_HEADERS})
    out["content-type"] = "application/json"
    out["accept-encoding"] = "identity"  # relay bytes as received; no decoder buffering
    out.update(protocol)
    return out


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds asked by a Retry-After header (delta-seconds or HTTP date); None if absent/bad."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
