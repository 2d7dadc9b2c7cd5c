"""The management API's routes over the wings (replays and outcomes, the response cache, plugins,
storage), mounted after management's own (app/management/api.py `install`), each behind the
same guard and audit (app/management/routes/common.py)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.parts import IngressParts
from app.api.routes.compression import compression_routes
from app.api.routes.context_recovery import context_recovery_routes
from app.api.routes.files import file_routes
from app.api.routes.keys import key_routes
from app.api.routes.knowledge_bases import knowledge_base_routes
from app.api.routes.memories import memory_routes
from app.api.routes.plugins import plugin_routes
from app.api.routes.replays import replay_routes
from app.api.routes.response_cache import storage_routes
from app.api.routes.vector_stores import vector_store_routes
from app.management.service import Management


def wing_routes(mgmt: Management, parts: IngressParts) -> list[APIRouter]:
    """Every wing's route family, each over its own parts, in the order they are mounted."""

    def configured() -> set[str]:  # the provider models a key's grant may name
        return {m.name for m in mgmt.config.providers.models}

    keys = [key_routes(mgmt, parts.keys, configured)] if parts.keys is not None else []
    return [
        *keys,
        replay_routes(mgmt, parts.replays, parts.ratings),
        storage_routes(mgmt, parts.cache_admin),
        compression_routes(mgmt, parts.replays),  # before a generic /api/v1/plugins/{type} family
        plugin_routes(mgmt, parts),
        knowledge_base_routes(mgmt, parts.storage),
        memory_routes(mgmt, parts.storage),
        context_recovery_routes(mgmt, parts.storage),
        file_routes(mgmt, parts.storage),
        vector_store_routes(mgmt, parts.storage),
    ]
