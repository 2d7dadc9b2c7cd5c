"""Files and vector stores behind /api/v1/storage/files and /api/v1/storage/vector-stores.

`open_storage` builds them from `global.stores.vector_store` (app/config/storage.py): files
and records under the configured directory (default `<management state dir>/storage`),
chunks in the configured backend, embedded with the router's MiniLM encoder (loaded on the
first ingestion or search, not at start).

The storage package also keeps the knowledge bases (`knowledge_bases`, their maps `kb_map`);
the Router reads them, and retrieves through `client.StorageClient`, by the ports the pipeline
declares (app/pipeline/rag.py, app/pipeline/signals/kb.py), so storage sits above the pipeline.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.config.storage import VectorStoreConfig
from app.storage.files import FileStore
from app.storage.vector_index import MemoryVectorIndex, VectorIndex
from app.storage.vector_stores import Embed, VectorStores

log = logging.getLogger("svc_sr.storage")


@dataclass
class StorageService:
    files: FileStore
    vector_stores: VectorStores


def router_encoder() -> Embed:
    """The router's sentence encoder (MiniLM int8 on onnxruntime), built on first use."""

    def embed(texts: list[str]) -> np.ndarray:
        from app.runtime.encoder import shared_encoder

        return shared_encoder().encode(texts)

    return embed


def open_vector_index(config: VectorStoreConfig, directory: Path) -> VectorIndex:
    if config.backend_type == "milvus":
        from app.storage.milvus_index import MilvusVectorIndex

        return MilvusVectorIndex(config.milvus, str(directory / "vectors.db"))
    if config.backend_type == "redis":
        from app.storage.redis_index import RedisVectorIndex

        return RedisVectorIndex(config.redis)
    return MemoryVectorIndex()


def open_storage(
    config: VectorStoreConfig, state_dir: Path, embed: Embed | None = None
) -> StorageService | None:
    """The storage service, or None (its routes answer 503) when disabled or its directory is unusable."""
    if not config.enabled:
        return None
    directory = Path(config.directory) if config.directory else state_dir / "storage"
    try:
        files = FileStore(directory / "files", config.max_file_bytes, config.max_files)
        stores = VectorStores(
            directory,
            files,
            open_vector_index(config, directory),
            embed or router_encoder(),
            chunk_words=config.chunk_words,
            chunk_overlap_words=config.chunk_overlap_words,
            embed_batch=config.embed_batch,
        )
    except Exception as exc:  # noqa: BLE001 - storage failing must not keep the router down
        log.error("storage under %s unavailable: %s", directory, exc)
        return None
    return StorageService(files, stores)


__all__: list[Any] = ["StorageService", "open_storage", "router_encoder"]
