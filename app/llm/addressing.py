"""How a front door reaches an in-cluster model: its deployment name and a URL on a reserved
domain that only the handle transport answers (deployments/llm_transport.py).

Upstream targets stay URLs, so an in-cluster model goes through the same attempt loop as an
HTTP backend (timeouts, retries, breakers, fallback, streaming, accounting); only the last
step, the bytes' way to the engine, is a DeploymentHandle call instead of a socket.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit

IN_CLUSTER_DOMAIN = "llm.svc-sr.internal"
# httpx mount pattern for every in-cluster host.
IN_CLUSTER_PATTERN = f"all://*.{IN_CLUSTER_DOMAIN}"
DEPLOYMENT_PREFIX = "LLMServer-"


def host_label(model_name: str) -> str:
    """A DNS label for the model, unique per name (a slug plus a digest of the exact name)."""
    slug = re.sub(r"[^a-z0-9]+", "-", model_name.lower()).strip("-")[:40] or "model"
    return f"{slug}-{hashlib.sha256(model_name.encode()).hexdigest()[:8]}"


def deployment_name(model_name: str) -> str:
    return DEPLOYMENT_PREFIX + host_label(model_name)


def base_url(model_name: str) -> str:
    return f"http://{host_label(model_name)}.{IN_CLUSTER_DOMAIN}/v1"


def deployment_of_host(host: str) -> str | None:
    """The deployment an in-cluster URL's host names; None for any other host."""
    suffix = "." + IN_CLUSTER_DOMAIN
    if not host.endswith(suffix):
        return None
    label = host[: -len(suffix)]
    return DEPLOYMENT_PREFIX + label if label and "." not in label else None


def is_in_cluster(base_url: str) -> bool:
    """The URL is an in-cluster model's (only the handle transport can reach it)."""
    return deployment_of_host(urlsplit(base_url).hostname or "") is not None
