"""Where a vector store's chunks and their vectors live: the protocol every backend serves,
the in-memory backend, and the lexical side of hybrid search (BM25, reciprocal rank fusion).

A backend answers vector search (nearest chunks of one store, optionally only from some
files) and lists a store's chunks; BM25 runs in this process over that list (cached per
store until the store changes), so every backend ranks lexically the same way.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

RRF_K = 60  # the usual reciprocal-rank-fusion constant (Cormack et al. 2009)
_WORD = re.compile(r"[a-z0-9]+")


class VectorIndexDown(RuntimeError):
    """The chunk store cannot be reached: the storage routes answer 503."""


@dataclass(frozen=True)
class Chunk:
    id: str
    store_id: str
    file_id: str
    index: int
    text: str


class VectorIndex(Protocol):
    def add(self, chunks: list[Chunk], vectors: np.ndarray) -> None: ...

    def remove(self, store_id: str, file_id: str | None = None) -> None:
        """A file's chunks, or (file_id None) the whole store's."""

    def nearest(
        self, store_id: str, vector: np.ndarray, k: int, file_ids: set[str] | None
    ) -> list[tuple[Chunk, float]]:
        """Up to k chunks by cosine similarity, best first; `file_ids` restricts the files."""

    def chunks(self, store_id: str) -> list[Chunk]: ...

    def ping(self) -> None:
        """Raise VectorIndexDown when the store is unreachable."""


class MemoryVectorIndex:
    """Exact cosine search over each store's matrix (this process only; tests and one replica)."""

    def __init__(self) -> None:
        self._rows: dict[str, list[tuple[Chunk, np.ndarray]]] = {}
        self._matrix: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self.down = False  # tests switch the store off

    def add(self, chunks: list[Chunk], vectors: np.ndarray) -> None:
        self.ping()
        with self._lock:
            for chunk, vector in zip(chunks, vectors, strict=True):
                self._rows.setdefault(chunk.store_id, []).append((chunk, np.asarray(vector, np.float32)))
                self._matrix.pop(chunk.store_id, None)

    def remove(self, store_id: str, file_id: str | None = None) -> None:
        self.ping()
        with self._lock:
            rows = self._rows.get(store_id, [])
            self._rows[store_id] = [r for r in rows if file_id is not None and r[0].file_id != file_id]
            self._matrix.pop(store_id, None)

    def nearest(
        self, store_id: str, vector: np.ndarray, k: int, file_ids: set[str] | None
    ) -> list[tuple[Chunk, float]]:
        self.ping()
        with self._lock:
            rows = self._rows.get(store_id, [])
            if not rows:
                return []
            matrix = self._matrix.get(store_id)
            if matrix is None:
                matrix = self._matrix[store_id] = np.stack([v for _, v in rows])
        scores = matrix @ np.asarray(vector, np.float32)
        order = np.argsort(-scores)
        out: list[tuple[Chunk, float]] = []
        for i in order:
            chunk = rows[int(i)][0]
            if file_ids is None or chunk.file_id in file_ids:
                out.append((chunk, float(scores[int(i)])))
                if len(out) == k:
                    break
        return out

    def chunks(self, store_id: str) -> list[Chunk]:
        self.ping()
        with self._lock:
            return [c for c, _ in self._rows.get(store_id, [])]

    def ping(self) -> None:
        if self.down:
            raise VectorIndexDown("the in-memory vector store is switched off")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class Bm25:
    """Okapi BM25 (k1 1.2, b 0.75) over one store's chunks. Each term's postings hold its
    precomputed per-chunk weights, so a query is a few numpy scatter-adds (10k chunks: ms).
    `tokenize` makes the terms of chunks and queries alike (vector stores pass ranking.terms)."""

    def __init__(
        self,
        chunks: Iterable[Chunk],
        k1: float = 1.2,
        b: float = 0.75,
        tokenize: Callable[[str], list[str]] = words,
    ) -> None:
        self.chunks = list(chunks)
        self.tokenize = tokenize
        counts = [Counter(tokenize(c.text)) for c in self.chunks]
        lengths = np.array([sum(tf.values()) for tf in counts], np.float32)
        avg = float(lengths.mean()) if len(lengths) else 1.0
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, tf in enumerate(counts):
            for term, n in tf.items():
                docs, freqs = postings.setdefault(term, ([], []))
                docs.append(i)
                freqs.append(n)
        total = len(self.chunks)
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term, (docs, freqs) in postings.items():
            idx, tf_ = np.array(docs, np.int64), np.array(freqs, np.float32)
            idf = math.log(1 + (total - len(docs) + 0.5) / (len(docs) + 0.5))
            norm = tf_ + k1 * (1 - b + b * lengths[idx] / (avg or 1.0))
            self._postings[term] = (idx, (idf * tf_ * (k1 + 1) / norm).astype(np.float32))
        # files as integer codes: a filter is an integer isin, not a string compare per chunk
        self._code = {f: n for n, f in enumerate(sorted({c.file_id for c in self.chunks}))}
        self._file_of = np.array([self._code[c.file_id] for c in self.chunks], np.int64)

    def search(self, query: str, k: int, file_ids: set[str] | None) -> list[tuple[Chunk, float]]:
        scores = np.zeros(len(self.chunks), np.float32)
        for term in set(self.tokenize(query)):
            posting = self._postings.get(term)
            if posting is not None:
                scores[posting[0]] += posting[1]
        if file_ids is not None and len(scores):
            wanted = np.array([self._code[f] for f in file_ids if f in self._code], np.int64)
            scores[~np.isin(self._file_of, wanted)] = 0.0
        hits = np.flatnonzero(scores > 0)
        top = hits[np.argsort(-scores[hits], kind="stable")[:k]]
        return [(self.chunks[int(i)], float(scores[int(i)])) for i in top]
