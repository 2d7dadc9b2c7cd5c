"""The storage wing as the Ingress holds it: what the storage routes and the data plane call,
composed once per Ingress replica (app/api/parts.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.pipeline.memory.store import MemoryStore
from app.pipeline.signals.base import EmbedFn
from app.storage import StorageService
from app.storage.client import StorageClient, storage_client
from app.storage.kb_map import MapCache
from app.storage.knowledge_bases import KnowledgeBaseService, KnowledgeBaseStore


@dataclass
class StorageParts:
    # Files and vector stores: a client of this process's service or of the Storage deployment
    # (None: their routes answer 503, as do Responses input_image file ids).
    storage: StorageClient | None = None
    knowledge_bases: KnowledgeBaseService = field(default_factory=KnowledgeBaseService)
    kb_maps: MapCache = field(default_factory=MapCache)
    # The `memory` plugin's memories (None: the memory and context-recovery routes answer 503).
    memories: MemoryStore | None = None


def storage_parts(
    storage: StorageService | StorageClient | None = None,
    *,
    knowledge_bases: KnowledgeBaseService | None = None,
    kb_store: KnowledgeBaseStore | None = None,
    kb_embed: EmbedFn | None = None,
    memories: MemoryStore | None = None,
) -> StorageParts:
    """`storage`: a service in this process or a client (one code path for the routes);
    `knowledge_bases`: the service, else one over `kb_store` (None: memory) embedding with
    `kb_embed` (the router's encoder; None: mutations answer 503)."""
    return StorageParts(
        storage=storage_client(storage),
        knowledge_bases=knowledge_bases or KnowledgeBaseService(kb_store, embed=kb_embed),
        memories=memories,
    )
