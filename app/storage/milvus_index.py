"""Vector-store chunks in a Milvus collection: Milvus Lite in-process (a path under the
storage directory) or a Milvus server (`uri`), with the response cache's connection settings.

One row per chunk: `id` (store:file:index), `store_id`, `file_id`, `idx`, `text` and the
vector (COSINE). The collection is created on the first write with that write's dimension.
Every client failure is VectorIndexDown (503). Ids are checked against a fixed alphabet
before they enter a filter expression, so nothing needs escaping.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from app.common.pymilvus_import import import_pymilvus
from app.config.cache_stores import MilvusCacheSettings
from app.storage.vector_index import Chunk, VectorIndexDown

T = TypeVar("T")
TEXT_MAX_BYTES = 65_535  # Milvus's VARCHAR ceiling
QUERY_WINDOW = 16_384  # Milvus's largest query result (and query-iterator page)
_SAFE_ID = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


def _safe(value: str) -> str:
    if not _SAFE_ID.match(value):
        raise ValueError(f"id {value!r} is not a store or file id")
    return value


class MilvusVectorIndex:
    def __init__(self, settings: MilvusCacheSettings, lite_path: str) -> None:
        self._settings = settings
        self._uri = settings.uri or (
            f"http://{settings.host}:{settings.port}" if settings.host else lite_path
        )
        self._collection = settings.collection.name
        self._field = settings.collection.vector_field.name
        self._timeout = settings.timeout_seconds
        self._client: Any = None
        self._has_collection = False
        self._lock = threading.Lock()

    def add(self, chunks: list[Chunk], vectors: np.ndarray) -> None:
        client = self._connected()
        if not self._has_collection:
            self._create(client, int(vectors.shape[1]))
        rows = [
            {
                "id": c.id,
                "store_id": c.store_id,
                "file_id": c.file_id,
                "idx": c.index,
                "text": c.text.encode()[: TEXT_MAX_BYTES - 4].decode("utf-8", "ignore"),
                self._field: [float(x) for x in v],
            }
            for c, v in zip(chunks, vectors, strict=True)
        ]
        self._call(client.upsert, self._collection, rows)

    def remove(self, store_id: str, file_id: str | None = None) -> None:
        client = self._connected()
        if not self._has_collection:
            return
        where = f'store_id == "{_safe(store_id)}"'
        if file_id is not None:
            where += f' and file_id == "{_safe(file_id)}"'
        self._call(client.delete, self._collection, filter=where)

    def nearest(
        self, store_id: str, vector: np.ndarray, k: int, file_ids: set[str] | None
    ) -> list[tuple[Chunk, float]]:
        client = self._connected()
        if not self._has_collection or file_ids == set():
            return []
        where = f'store_id == "{_safe(store_id)}"'
        if file_ids is not None:
            where += " and file_id in [" + ", ".join(f'"{_safe(f)}"' for f in sorted(file_ids)) + "]"
        result = self._call(
            client.search,
            self._collection,
            data=[[float(x) for x in vector]],
            anns_field=self._field,
            limit=k,
            filter=where,
            output_fields=["store_id", "file_id", "idx", "text"],
            search_params={"metric_type": "COSINE"},
        )
        hits = result[0] if result else []
        return [(self._chunk(dict(h["entity"], id=h["id"])), float(h["distance"])) for h in hits]

    def chunks(self, store_id: str) -> list[Chunk]:
        client = self._connected()
        if not self._has_collection:
            return []
        where = f'store_id == "{_safe(store_id)}"'
        fields = ["id", "store_id", "file_id", "idx", "text"]
        rows = self._call(
            client.query, self._collection, filter=where, output_fields=fields, limit=QUERY_WINDOW
        )
        if len(rows) >= QUERY_WINDOW:  # one query's most: page through it all, or BM25 misses chunks
            rows = self._every_row(client, where, fields)
        return [self._chunk(r) for r in rows]

    def _every_row(self, client: Any, where: str, fields: list[str]) -> list[dict[str, Any]]:
        """Every matching row, a window at a time (Milvus caps one query's offset + limit)."""
        pages = self._call(
            client.query_iterator,
            self._collection,
            batch_size=QUERY_WINDOW,
            filter=where,
            output_fields=fields,
        )

        def next_page(timeout: float) -> list[dict[str, Any]]:
            del timeout  # the iterator keeps the one it was opened with
            return list(pages.next())

        rows: list[dict[str, Any]] = []
        try:
            while page := self._call(next_page):
                rows.extend(page)
        finally:
            pages.close()
        return rows

    def ping(self) -> None:
        # one round trip: a client connected earlier says nothing of the server now
        self._call(self._connected().has_collection, self._collection)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @staticmethod
    def _chunk(row: dict[str, Any]) -> Chunk:
        return Chunk(
            str(row["id"]), str(row["store_id"]), str(row["file_id"]), int(row["idx"]), str(row["text"])
        )

    def _connected(self) -> Any:
        with self._lock:
            if self._client is None:
                import_pymilvus()  # its logging setup would silence this replica's log
                from pymilvus import MilvusClient  # memory-only deployments never load it

                s = self._settings
                auth = {"token": s.token} if s.token else {"user": s.user or "", "password": s.password or ""}
                client = self._call(MilvusClient, uri=self._uri, db_name=s.database, **auth)
                has_collection = bool(self._call(client.has_collection, self._collection))
                if has_collection:
                    self._call(client.load_collection, self._collection)
                # kept only once all of it answered: a half-open client would take an existing
                # collection for none (empty searches, a failing create) until the process restarts
                self._client, self._has_collection = client, has_collection
            return self._client

    def _create(self, client: Any, dim: int) -> None:
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=160)
        schema.add_field("store_id", DataType.VARCHAR, max_length=64)
        schema.add_field("file_id", DataType.VARCHAR, max_length=64)
        schema.add_field("idx", DataType.INT64)
        schema.add_field("text", DataType.VARCHAR, max_length=TEXT_MAX_BYTES)
        schema.add_field(self._field, DataType.FLOAT_VECTOR, dim=dim)
        index = client.prepare_index_params()
        spec = self._settings.collection.index
        index.add_index(
            field_name=self._field, index_type=spec.type, metric_type="COSINE", params=dict(spec.params)
        )
        self._call(
            client.create_collection,
            self._collection,
            schema=schema,
            consistency_level=self._settings.consistency_level,
        )
        self._call(client.create_index, self._collection, index, sync=False)  # Lite lacks the sync wait
        self._call(client.load_collection, self._collection)
        self._has_collection = True

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, timeout=self._timeout, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the client library's errors are many and unstable
            raise VectorIndexDown(f"Milvus at {self._uri}: {type(exc).__name__}: {exc}") from exc
