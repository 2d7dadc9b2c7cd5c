"""Settings of the response cache's shared stores: Redis, Milvus, and the in-memory HNSW knobs.

`global.stores.response_cache.redis` and `.milvus` (reference router spelling) say where a
network backend lives; `backend_type` picks which one runs (app/cache/factory.py). The
in-memory HNSW keys sit flat on `response_cache` as the reference router spells them, so
`HnswSettings` is a mixin of `ResponseCacheConfig` rather than a nested section.

Every section is strict: a typo in a store's settings is a rejection naming its path, not
a silently ignored key that leaves the cache on a default host.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from app.common.api_docs import NON_BLANK
from app.config.model_base import Strict

MilvusMetric = Literal["IP", "L2", "COSINE"]
MilvusIndexType = Literal["HNSW", "IVF_FLAT", "IVF_SQ8", "IVF_PQ"]
ConsistencyLevel = Literal["Strong", "Session", "Bounded", "Eventually"]

_URL_SCHEMES = ("redis://", "rediss://", "unix://")


class RedisCacheSettings(Strict):
    """Where the Redis (RediSearch) response cache lives; `url` wins over host/port/db."""

    # redis://[user:pass@]host:port/db, rediss:// for TLS, unix://path (the schema states the
    # scheme; _known_scheme enforces it with its own message)
    url: str | None = Field(default=None, json_schema_extra={"pattern": "^(redis|rediss|unix)://"})
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=6379, ge=1, le=65535)
    db: int = Field(default=0, ge=0)
    username: str | None = None
    password: str | None = None
    tls: bool = False
    # Socket connect/read timeout: a store that is down or slow answers within this, and
    # the request counts a miss instead of waiting.
    timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    index_name: str = Field(default="svc_sr_cache", min_length=1, pattern=r"^[A-Za-z0-9_:\-]+$")
    key_prefix: str = Field(default="svc_sr:cache:", min_length=1)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(_URL_SCHEMES):
            raise ValueError(f"url must start with one of {', '.join(_URL_SCHEMES)}")
        return url


class MilvusVectorField(Strict):
    name: str = Field(default="embedding", min_length=1)
    dimension: int = Field(default=384, ge=1, le=32768)
    metric_type: MilvusMetric = "COSINE"


class MilvusIndex(Strict):
    type: MilvusIndexType = "HNSW"
    # Passed to Milvus as the index's build params (HNSW: M, efConstruction; IVF: nlist, ...).
    params: dict[str, Any] = Field(default_factory=lambda: {"M": 16, "efConstruction": 200})


class MilvusCollection(Strict):
    name: str = Field(default="svc_sr_response_cache", min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    vector_field: MilvusVectorField = Field(default_factory=MilvusVectorField)
    index: MilvusIndex = Field(default_factory=MilvusIndex)


class MilvusSearch(Strict):
    topk: int = Field(default=10, ge=1, le=16384)


class MilvusCacheSettings(Strict):
    """Where the Milvus response cache lives.

    `uri` None means Milvus Lite in `<state dir>/response-cache.db` (a directory); a
    "http://host:19530" uri is a Milvus server. host/port/database build the server uri
    when `uri` is not given but `host` is.
    """

    uri: str | None = Field(default=None, json_schema_extra={"pattern": NON_BLANK})  # see _uri_not_blank
    host: str | None = None
    port: int = Field(default=19530, ge=1, le=65535)
    database: str = Field(default="default", min_length=1)
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls: bool = False
    collection: MilvusCollection = Field(default_factory=MilvusCollection)
    search: MilvusSearch = Field(default_factory=MilvusSearch)
    consistency_level: ConsistencyLevel = "Session"

    @field_validator("uri")
    @classmethod
    def _uri_not_blank(cls, uri: str | None) -> str | None:
        if uri is not None and not uri.strip():
            raise ValueError("uri must not be blank (leave it out for Milvus Lite)")
        return uri


class HnswSettings(BaseModel):
    """The in-memory backend's HNSW knobs, flat on `response_cache` (reference spelling)."""

    use_hnsw: bool = False
    hnsw_m: int = Field(default=16, ge=2, le=128)
    hnsw_ef_construction: int = Field(default=200, ge=1, le=4096)
    max_memory_entries: int = Field(default=1000, ge=0)  # hybrid: the in-memory tier's bound
