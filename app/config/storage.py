"""`global.stores.vector_store`: where uploaded files and vector stores live, and how files
are chunked for ingestion (the management storage routes, app/storage/).

`backend_type` picks where chunk vectors go: `memory` (this process; lost on restart),
`milvus` (Milvus Lite under the storage directory, or a server `uri`) or `redis` (RediSearch).
Uploaded files and the vector-store records are always files under `directory` (None: the
management state directory's `storage/`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from app.config.cache_stores import MilvusCacheSettings, MilvusCollection, RedisCacheSettings
from app.config.model_base import Strict


def _redis_defaults() -> RedisCacheSettings:
    return RedisCacheSettings(index_name="svc_sr_vectors", key_prefix="svc_sr:vectors:")


def _milvus_defaults() -> MilvusCacheSettings:
    return MilvusCacheSettings(collection=MilvusCollection(name="svc_sr_vector_chunks"))


class VectorStoreConfig(Strict):
    enabled: bool = True
    backend_type: Literal["memory", "milvus", "redis"] = "memory"
    directory: str | None = None
    # Upload limits: a bigger file, or one more file than max_files, is 400 INVALID_INPUT.
    max_file_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    max_files: int = Field(default=1000, ge=1)
    # Chunking in whitespace-separated words (MiniLM reads 256 tokens, ~190 words).
    chunk_words: int = Field(default=160, ge=8, le=4096)
    chunk_overlap_words: int = Field(default=32, ge=0, le=2048)
    embed_batch: int = Field(default=32, ge=1, le=1024)
    redis: RedisCacheSettings = Field(default_factory=_redis_defaults)
    milvus: MilvusCacheSettings = Field(default_factory=_milvus_defaults)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> VectorStoreConfig:
        if self.chunk_overlap_words >= self.chunk_words:
            raise ValueError("chunk_overlap_words must be below chunk_words")
        return self
