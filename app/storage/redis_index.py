"""Vector-store chunks in Redis with RediSearch, with the response cache's client settings.

One HASH per chunk under `<key_prefix>c:<chunk id>` (store_id and file_id as TAGs, idx,
text, the FLOAT32 vector, COSINE HNSW index), and a SET of chunk keys per store and per
store file, so listing a store's chunks (for BM25) and removing a file never scan the
keyspace. The index is created on the first write with that write's dimension. Every
client failure is VectorIndexDown (503).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import numpy as np
import redis
from redis.commands.search.field import NumericField, TagField, TextField, VectorField
from redis.commands.search.index_definition import IndexDefinition, IndexType
from redis.commands.search.query import Query

from app.cache.redis_store import redis_client
from app.config.cache_stores import RedisCacheSettings
from app.storage.vector_index import Chunk, VectorIndexDown

_TAG_SPECIAL = re.compile(r"([^A-Za-z0-9_])")


def tag(value: str) -> str:
    return _TAG_SPECIAL.sub(r"\\\1", value)


class RedisVectorIndex:
    def __init__(self, settings: RedisCacheSettings, client: redis.Redis | None = None) -> None:
        self._settings = settings
        self._redis = client if client is not None else redis_client(settings)
        self._prefix = settings.key_prefix
        self._index = settings.index_name
        self._indexed = False

    def add(self, chunks: list[Chunk], vectors: np.ndarray) -> None:
        with self._down("add"):
            self._ensure_index(int(vectors.shape[1]))
            pipe = self._redis.pipeline(transaction=False)
            for c, v in zip(chunks, vectors, strict=True):
                key = self._prefix + "c:" + c.id
                mapping: dict[str | bytes, str | bytes | int] = {
                    "store_id": c.store_id,
                    "file_id": c.file_id,
                    "idx": c.index,
                    "text": c.text,
                    "vector": np.asarray(v, np.float32).tobytes(),
                }
                pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]  # redis-py's Mapping is invariant in its key type
                pipe.sadd(self._set(c.store_id), key)
                pipe.sadd(self._set(c.store_id, c.file_id), key)
            pipe.execute()

    def remove(self, store_id: str, file_id: str | None = None) -> None:
        with self._down("remove"):
            owner = self._set(store_id, file_id)
            keys = [k.decode() for k in self._redis.smembers(owner)]  # type: ignore[union-attr]  # sync client
            pipe = self._redis.pipeline(transaction=False)
            for start in range(0, len(keys), 1000):
                batch = keys[start : start + 1000]
                pipe.delete(*batch)
                pipe.srem(self._set(store_id), *batch)
            if file_id is None:
                for file_set in self._redis.scan_iter(match=self._set(store_id) + ":*"):
                    pipe.delete(file_set)
            pipe.delete(owner)
            pipe.execute()

    def nearest(
        self, store_id: str, vector: np.ndarray, k: int, file_ids: set[str] | None
    ) -> list[tuple[Chunk, float]]:
        if file_ids == set():
            return []
        with self._down("search"):
            if not self._indexed and not self._index_exists():
                return []
            where = f"@store_id:{{{tag(store_id)}}}"
            if file_ids is not None:
                where += " @file_id:{" + " | ".join(tag(f) for f in sorted(file_ids)) + "}"
            query = (
                Query(f"({where})=>[KNN {k} @vector $vec AS distance]")
                .sort_by("distance")
                .return_fields("distance", "store_id", "file_id", "idx", "text")
                .paging(0, k)
                .dialect(2)
            )
            vec = np.asarray(vector, np.float32).tobytes()
            docs = self._redis.ft(self._index).search(query, {"vec": vec}).docs
            return [
                (
                    Chunk(d.id.removeprefix(self._prefix + "c:"), d.store_id, d.file_id, int(d.idx), d.text),
                    1.0 - float(d.distance),
                )
                for d in docs
            ]

    def chunks(self, store_id: str) -> list[Chunk]:
        with self._down("list"):
            keys = sorted(k.decode() for k in self._redis.smembers(self._set(store_id)))  # type: ignore[union-attr]  # sync client
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                pipe.hmget(key, ["file_id", "idx", "text"])
            out = []
            for key, (file_id, idx, text) in zip(keys, pipe.execute(), strict=True):
                if text is not None:
                    chunk_id = key.removeprefix(self._prefix + "c:")
                    out.append(Chunk(chunk_id, store_id, file_id.decode(), int(idx), text.decode()))
            return out

    def ping(self) -> None:
        with self._down("ping"):
            self._redis.ping()

    def _set(self, store_id: str, file_id: str | None = None) -> str:
        return f"{self._prefix}s:{store_id}" + (f":{file_id}" if file_id is not None else "")

    def _index_exists(self) -> bool:
        try:
            self._redis.ft(self._index).info()
        except redis.ResponseError:
            return False
        self._indexed = True
        return True

    def _ensure_index(self, dim: int) -> None:
        if self._indexed or self._index_exists():
            return
        schema = [
            TagField("store_id", case_sensitive=True),
            TagField("file_id", case_sensitive=True),
            NumericField("idx"),
            TextField("text"),
            VectorField("vector", "HNSW", {"TYPE": "FLOAT32", "DIM": dim, "DISTANCE_METRIC": "COSINE"}),
        ]
        definition = IndexDefinition(prefix=[self._prefix + "c:"], index_type=IndexType.HASH)
        try:
            self._redis.ft(self._index).create_index(schema, definition=definition)
        except redis.ResponseError as exc:
            if "already exists" not in str(exc).lower():  # another replica was first
                raise
        self._indexed = True

    @contextlib.contextmanager
    def _down(self, action: str) -> Iterator[None]:
        try:
            yield
        except (redis.RedisError, OSError) as exc:
            raise VectorIndexDown(f"redis vector store: {action} failed: {exc}") from exc
