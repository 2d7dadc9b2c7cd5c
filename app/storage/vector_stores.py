"""Vector stores: their records, file ingestion in the background, and hybrid search.

Records (stores, their files and each file's status) are one JSON document in the storage
directory, rewritten atomically on every change. Chunks and vectors live in the configured
vector index (vector_index.py). Attaching a file records it `in_progress` and returns; one worker
thread chunks it, embeds the chunks in batches and stores them, then marks it `completed`
(with chunk_count) or `failed` (with last_error). A file detached while it is ingested has
its chunks removed when the worker finishes.

Search: the query's vector against the store's chunks (vector), BM25 over the same chunks
(bm25, stemmed terms without stopwords), or both fused by normalized score (hybrid, the
default: ranking.hybrid); hybrid_rerank re-scores hybrid's candidates with the reranker's
cosine + BM25 fusion (app/srun/rerank.py, pure numpy, in this process, on the cosines the
vector ranking returned: nothing is embedded again). Metadata filters select the files by their
attributes before either ranking.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from app.storage import ranking
from app.storage.chunking import chunk_words, document_text
from app.storage.files import FileStore, atomic_write
from app.storage.schemas import (
    FileAttach,
    FileCounts,
    LastError,
    SearchContent,
    SearchRequest,
    SearchResult,
    SearchResults,
    VectorStoreCreate,
    VectorStoreFileObject,
    VectorStoreObject,
    VectorStoreUpdate,
    matches,
)
from app.storage.vector_index import Bm25, Chunk, VectorIndex

log = logging.getLogger("svc_sr.storage")

Embed = Callable[[list[str]], np.ndarray]
RECORDS_FILE = "vector_stores.json"
CANDIDATES = 4  # each ranking's depth is CANDIDATES x max_num_results (at least 20)


class StoreRecord(BaseModel):
    store: VectorStoreObject
    files: dict[str, VectorStoreFileObject] = Field(default_factory=dict)


class Records(BaseModel):
    stores: dict[str, StoreRecord] = Field(default_factory=dict)


class NotFound(LookupError):
    pass


class RotateResult(BaseModel):
    """`rotate`: every file of the store re-ingested from its stored bytes with the current
    chunking and encoder (a rebuilt index: after a chunking or encoder change)."""

    vector_store_id: str
    object: Literal["vector_store.rotation"] = "vector_store.rotation"
    files_queued: int


class VectorStores:
    def __init__(
        self,
        directory: Path,
        files: FileStore,
        backend: VectorIndex,
        embed: Embed,
        *,
        chunk_words: int = 160,
        chunk_overlap_words: int = 32,
        embed_batch: int = 32,
    ) -> None:
        self.directory = directory
        self.files = files
        self.backend = backend
        self.embed = embed
        self.chunk_words, self.chunk_overlap_words, self.embed_batch = (
            chunk_words,
            chunk_overlap_words,
            embed_batch,
        )
        self._lock = threading.RLock()
        self._records = self._load()
        self._bm25: dict[str, tuple[int, Bm25]] = {}
        self._generation: dict[str, int] = {}
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="svc-sr-ingest")
        self._pending: dict[tuple[str, str], Future[None]] = {}
        for store_id, record in self._records.stores.items():  # ingestion cut short by a restart
            for file_id, item in record.files.items():
                if item.status == "in_progress":
                    self._submit(store_id, file_id)

    # ---------------------------------------------------------------- stores

    def create(self, body: VectorStoreCreate) -> VectorStoreObject:
        for file_id in body.file_ids:
            if self.files.get(file_id) is None:  # a bad request, as in attach
                raise ValueError(f"file_ids: no file {file_id!r}")
        now = int(time.time())
        store = VectorStoreObject(
            id=f"vs_{uuid.uuid4().hex}",
            created_at=now,
            name=body.name,
            metadata=body.metadata,
            last_active_at=now,
        )
        with self._lock:
            self._records.stores[store.id] = StoreRecord(store=store)
            self._save()
        for file_id in body.file_ids:
            self.attach(store.id, FileAttach(file_id=file_id))
        return self.get(store.id)

    def listing(self) -> list[VectorStoreObject]:
        with self._lock:
            ids = sorted(self._records.stores, key=lambda i: (self._records.stores[i].store.created_at, i))
        return [self.get(i) for i in ids]

    def get(self, store_id: str) -> VectorStoreObject:
        with self._lock:
            record = self._record(store_id)
            counts = FileCounts(total=len(record.files))
            for item in record.files.values():
                setattr(counts, item.status, getattr(counts, item.status) + 1)
            return record.store.model_copy(
                update={
                    "file_counts": counts,
                    "usage_bytes": sum(f.usage_bytes for f in record.files.values()),
                    "status": "in_progress" if counts.in_progress else "completed",
                }
            )

    def update(self, store_id: str, body: VectorStoreUpdate) -> VectorStoreObject:
        with self._lock:
            record = self._record(store_id)
            changes = body.model_dump(exclude_unset=True)
            record.store = record.store.model_copy(update={k: v for k, v in changes.items() if v is not None})
            self._save()
        return self.get(store_id)

    def delete(self, store_id: str) -> None:
        with self._lock:
            self._record(store_id)
            self.backend.remove(store_id)  # first: a store down keeps the record (503, retry)
            del self._records.stores[store_id]
            self._changed(store_id)
            self._save()

    # ---------------------------------------------------------------- files

    def attach(self, store_id: str, body: FileAttach) -> VectorStoreFileObject:
        with self._lock:
            self._record(store_id)  # an unknown store (the path) is 404 before the body is read
        found = self.files.get(body.file_id)
        if found is None:  # a body naming no file is a bad request: the store itself exists
            raise ValueError(f"file_id: no file {body.file_id!r}")
        if found.purpose != "assistants":
            raise ValueError(
                f"file {body.file_id!r} has purpose {found.purpose!r}; vector stores take documents"
            )
        with self._lock:
            record = self._record(store_id)
            if body.file_id in record.files:
                return record.files[body.file_id]
            item = VectorStoreFileObject(
                id=body.file_id,
                created_at=int(time.time()),
                vector_store_id=store_id,
                status="in_progress",
                attributes=body.attributes,
            )
            record.files[body.file_id] = item
            self._save()
        self._submit(store_id, body.file_id)
        return item

    def list_files(self, store_id: str) -> list[VectorStoreFileObject]:
        with self._lock:
            return sorted(self._record(store_id).files.values(), key=lambda f: (f.created_at, f.id))

    def get_file(self, store_id: str, file_id: str) -> VectorStoreFileObject:
        with self._lock:
            item = self._record(store_id).files.get(file_id)
        if item is None:
            raise NotFound(f"file {file_id!r} is not in vector store {store_id!r}")
        return item

    def detach(self, store_id: str, file_id: str) -> None:
        self.get_file(store_id, file_id)
        self.backend.remove(store_id, file_id)
        with self._lock:
            self._record(store_id).files.pop(file_id, None)
            self._changed(store_id)
            self._save()

    def rotate(self, store_id: str) -> RotateResult:
        with self._lock:
            self._record(store_id)  # an unknown store is 404, whatever the backend
        # A backend that is down would fail every re-ingestion and leave the store's intact
        # chunks behind `failed` files (unsearchable): refuse (503) before touching a record.
        self.backend.ping()
        with self._lock:
            record = self._record(store_id)
            for file_id, item in record.files.items():
                record.files[file_id] = item.model_copy(update={"status": "in_progress", "last_error": None})
            queued = list(record.files)
            self._save()
        for file_id in queued:
            self._submit(store_id, file_id)
        return RotateResult(vector_store_id=store_id, files_queued=len(queued))

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Until every queued ingestion finished (tests, benchmarks)."""
        deadline = time.monotonic() + timeout_s
        for future in list(self._pending.values()):
            future.result(timeout=max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)

    # ---------------------------------------------------------------- search

    def search(self, store_id: str, body: SearchRequest) -> SearchResults:
        with self._lock:
            record = self._record(store_id)
            allowed = {
                fid
                for fid, f in record.files.items()
                if f.status == "completed" and matches(body.filters, f.attributes)
            }
            attributes = {fid: f.attributes for fid, f in record.files.items()}
        k = body.max_num_results
        depth = max(20, CANDIDATES * k)
        ranker = body.ranking_options.ranker
        vector: ranking.Ranking = []
        lexical: ranking.Ranking = []
        if ranker != "bm25":
            query_vector = np.asarray(self.embed([body.query])[0], np.float32)
            vector = self.backend.nearest(store_id, query_vector, depth, allowed)
        if ranker != "vector":
            lexical = self._bm25_of(store_id).search(body.query, depth, allowed)
        if ranker == "vector":
            ranked = vector[:k]
        elif ranker == "bm25":
            ranked = lexical[:k]
        elif ranker == "hybrid":
            ranked = ranking.hybrid(vector, lexical, k)
        else:  # hybrid_rerank: hybrid's candidates, as deep as each ranking, re-scored
            candidates = ranking.hybrid(vector, lexical, depth)
            ranked = ranking.rerank(body.query, candidates, vector, k)
        data = [
            SearchResult(
                file_id=chunk.file_id,
                filename=self._filename(chunk.file_id),
                score=score,
                attributes=attributes.get(chunk.file_id, {}),
                chunk_id=chunk.id,
                content=[SearchContent(text=chunk.text)],
            )
            for chunk, score in ranked
            if score >= body.ranking_options.score_threshold
        ]
        with self._lock:
            if store_id in self._records.stores:
                self._records.stores[store_id].store.last_active_at = int(time.time())
        return SearchResults(search_query=body.query, data=data)

    def _bm25_of(self, store_id: str) -> Bm25:
        generation = self._generation.get(store_id, 0)
        cached = self._bm25.get(store_id)
        if cached is not None and cached[0] == generation:
            return cached[1]
        index = Bm25(self.backend.chunks(store_id), tokenize=ranking.terms)
        self._bm25[store_id] = (generation, index)
        return index

    def _filename(self, file_id: str) -> str:
        found = self.files.get(file_id)
        return found.filename if found is not None else ""

    # ---------------------------------------------------------------- ingestion

    def _submit(self, store_id: str, file_id: str) -> None:
        self._pending[(store_id, file_id)] = self._worker.submit(self._ingest, store_id, file_id)

    def _ingest(self, store_id: str, file_id: str) -> None:
        try:
            count, size = self.ingest_now(store_id, file_id)
        except Exception as exc:  # noqa: BLE001 - any failure is the file's status, never the worker's end
            log.warning("ingestion of %s into %s failed: %s", file_id, store_id, exc)
            self._finish(
                store_id,
                file_id,
                status="failed",
                last_error=LastError(code="server_error", message=str(exc)),
            )
            return
        self._finish(store_id, file_id, status="completed", chunk_count=count, usage_bytes=size)

    def ingest_now(self, store_id: str, file_id: str) -> tuple[int, int]:
        """Chunk, embed and store one file (the worker's step); (chunks, bytes stored)."""
        found, data = self.files.get(file_id), self.files.content(file_id)
        if found is None or data is None:
            raise NotFound(f"file {file_id!r} was deleted")
        texts = chunk_words(
            document_text(found.content_type, data), self.chunk_words, self.chunk_overlap_words
        )
        if not texts:
            raise ValueError("the file holds no text")
        self.backend.remove(store_id, file_id)  # a retried ingestion must not double the chunks
        for start in range(0, len(texts), self.embed_batch):
            batch = texts[start : start + self.embed_batch]
            vectors = np.asarray(self.embed(batch), np.float32)
            chunks = [
                Chunk(f"{store_id}:{file_id}:{start + i}", store_id, file_id, start + i, text)
                for i, text in enumerate(batch)
            ]
            self.backend.add(chunks, vectors)
        with self._lock:
            self._changed(store_id)
        return len(texts), sum(len(t.encode()) for t in texts)

    def _finish(self, store_id: str, file_id: str, **update: object) -> None:
        with self._lock:
            record = self._records.stores.get(store_id)
            item = record.files.get(file_id) if record is not None else None
            if item is None:  # detached (or the store deleted) meanwhile
                try:
                    self.backend.remove(store_id, file_id)
                except Exception as exc:  # noqa: BLE001 - best effort; the chunks are unreachable anyway
                    log.warning("could not remove chunks of detached %s: %s", file_id, exc)
                return
            assert record is not None
            record.files[file_id] = item.model_copy(update=update)
            self._save()

    # ---------------------------------------------------------------- records

    def _record(self, store_id: str) -> StoreRecord:
        record = self._records.stores.get(store_id)
        if record is None:
            raise NotFound(f"vector store {store_id!r} not found")
        return record

    def _changed(self, store_id: str) -> None:
        self._generation[store_id] = self._generation.get(store_id, 0) + 1

    def _load(self) -> Records:
        path = self.directory / RECORDS_FILE
        try:
            return Records.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return Records()
        except ValueError as exc:
            aside = path.with_suffix(f".corrupt-{int(time.time())}")
            log.error("%s unreadable (%s); moved aside to %s", path, exc, aside)
            path.replace(aside)
            return Records()

    def _save(self) -> None:
        document = self._records.model_dump(mode="json")
        atomic_write(self.directory / RECORDS_FILE, json.dumps(document).encode())
