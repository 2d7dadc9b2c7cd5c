"""HAProxy's own answers in the data plane's error shape, not Serve's plain-text 500.

In Serve's fast path (deployments/serve_env.py) HAProxy answers a request itself when no
Ingress replica can take it (none is running, every retry was used) or when the replica it
went to died and HAProxy could not send it again (a body over tune.bufsize, 16 KiB). Serve
writes one page for all of these (its 502, 503 and 504) when HAProxy starts: a plain-text
`500 Internal Server Error`. Every Ingress replica replaces the pages on its node with a 503
and the spec's error body (`service_unavailable_error`, Retry-After 1). HAProxy reads the page
whenever it reloads its configuration, which it does each time a replica joins or leaves, so
the page is in place before this replica takes its first request.

Serve 2.60's layout (pinned by tests/unit/deployments/test_ray_compat.py): the page is
`<directory of RAY_SERVE_HAPROXY_CONFIG_FILE_LOC>/<node id>/500.http`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from app.common.errors import upstream_unavailable
from app.common.persist import atomic_write_bytes

log = logging.getLogger("svc_sr.error_page")

PAGE_NAME = "500.http"
MESSAGE = "svc-sr could not answer this request (no Ingress replica took it to the end); retry"


def error_page() -> bytes:
    """A whole HTTP response, as HAProxy's `errorfile` takes it."""
    error = upstream_unavailable(message=MESSAGE)
    body = json.dumps(error.body()).encode()
    head = [
        "HTTP/1.1 503 Service Unavailable",
        "Content-Type: application/json",
        *(f"{name}: {value}" for name, value in error.headers.items()),
        f"Content-Length: {len(body)}",
    ]
    return "\r\n".join(head).encode() + b"\r\n\r\n" + body


def install_error_pages(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Write the page over every HAProxy page on this node; returns the pages written. Nothing
    without HAProxy (Serve's Python proxy answers with the Ingress's own errors)."""
    env = os.environ if environ is None else environ
    config = env.get("RAY_SERVE_HAPROXY_CONFIG_FILE_LOC")
    if env.get("RAY_SERVE_ENABLE_HA_PROXY") != "1" or not config:
        return []
    page = error_page()
    written = []
    for path in Path(config).parent.glob(f"*/{PAGE_NAME}"):
        try:
            if path.read_bytes() != page:
                atomic_write_bytes(path, page)
                written.append(path)
        except OSError as exc:  # the page stays Serve's; requests are unaffected
            log.warning("could not write HAProxy's error page %s: %s", path, exc)
    return written
