"""Where the `memory` plugin's memories live on the Ray graph (the store itself:
app/pipeline/memory/store.py, redis_store.py). The Ingress opens the same store beside its
other shared stores (app/api/parts.py)."""

from __future__ import annotations

import logging

from app.common.redaction import redact_url
from app.pipeline.memory.redis_store import RedisMemoryStore
from app.pipeline.memory.store import MemoryStore
from app.state.shared_store import ManagementStoreSettings, redis_client, store_settings

log = logging.getLogger("svc_sr.storage.memories")


def router_memories(
    management_store: ManagementStoreSettings | None, app_name: str | None, serve_app: str
) -> MemoryStore | None:
    """The `memory` plugin's store on the Ray graph: Redis only, shared by the Router replicas
    (recall) and the Ingress replicas (the write after the answer, the memory routes). On a
    file or memory management store there is none (the replicas share no memory), so the
    plugin does nothing there: no recall, no `x-vsr-memories-recalled`, no write; logged once."""
    settings = store_settings(management_store)
    if settings.backend != "redis":  # info: most configurations use no memory plugin
        log.info(
            "memory plugin inactive on %r: the management store is %r, not redis, and the Router and "
            "Ingress replicas share no memory store (configure management_store redis to enable it)",
            app_name or serve_app,
            settings.backend,
        )
        return None
    assert settings.url is not None  # the settings' validator requires it
    prefix = settings.prefix_for(app_name or serve_app)
    return RedisMemoryStore(redis_client(settings), prefix, redact_url(settings.url))
