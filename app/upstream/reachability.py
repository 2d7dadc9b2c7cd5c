"""Which configured backends answer a TCP connection: `svc-sr serve`'s start-up warning and the
`BackendsReachable` condition of GET /api/v1/status.

A connection proves only that something listens; a routed request proves the rest (`svc-sr serve`
sends one through each front door before it says ready). In-cluster models (`llm_config` without
`backend_refs`) are Serve deployments: /ready covers them.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

from pydantic import BaseModel

from app.config.document import RouterConfig


class Backend(BaseModel):
    model: str
    name: str | None
    address: str  # host:port

    def describe(self) -> str:
        return f"{self.model} ({self.name + ' at ' if self.name else ''}{self.address})"


def configured_backends(config: RouterConfig) -> list[Backend]:
    found = []
    for model in config.providers.models:
        for ref in model.backend_refs:
            url = urlsplit(ref.resolved_base_url())
            port = url.port or (443 if url.scheme == "https" else 80)
            found.append(Backend(model=model.name, name=ref.name, address=f"{url.hostname}:{port}"))
    return found


async def _answers(address: str, timeout: float) -> bool:
    host, _, port = address.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def unreachable_backends(config: RouterConfig, timeout: float = 1.0) -> list[Backend]:
    """The configured backends nothing listens for (each address tried once, concurrently)."""
    backends = configured_backends(config)
    addresses = sorted({b.address for b in backends})
    answers = await asyncio.gather(*(_answers(a, timeout) for a in addresses))
    down = {a for a, ok in zip(addresses, answers, strict=True) if not ok}
    return [b for b in backends if b.address in down]
