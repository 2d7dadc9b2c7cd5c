"""Rerank: MiniLM cosine similarity fused with BM25 (a small Okapi BM25 over the request's
documents; no index outlives a request).

Fusion: relevance = ALPHA * sim01 + (1 - ALPHA) * bm25n, where sim01 = (cos + 1) / 2 and
bm25n = bm25 / (bm25 + K_NORM) maps BM25's unbounded score into [0, 1) independently of
the other documents, so a document's score does not depend on what it is ranked with
(results of one request compare across requests and top_n never changes the scores).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

_TOKEN = re.compile(r"\w+")
ALPHA = 0.7
K_NORM = 5.0


def bm25_tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text)]


def bm25_scores(query: str, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """Okapi BM25 of each document for the query, IDF over these documents (the +1 form,
    never negative)."""
    docs = [bm25_tokens(d) for d in documents]
    n = len(docs)
    if n == 0:
        return np.zeros(0)
    avg = max(sum(len(d) for d in docs) / n, 1e-9)
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(d))
    terms = Counter(bm25_tokens(query))
    scores = np.zeros(n)
    for i, d in enumerate(docs):
        tf = Counter(d)
        norm = k1 * (1 - b + b * len(d) / avg)
        for term, qtf in terms.items():
            f = tf.get(term, 0)
            if f:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                scores[i] += qtf * idf * f * (k1 + 1) / (f + norm)
    return scores


def fuse(cosines: np.ndarray, bm25: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    sim01 = (np.clip(np.asarray(cosines, np.float64), -1, 1) + 1) / 2
    bm = np.asarray(bm25, np.float64)
    return alpha * sim01 + (1 - alpha) * bm / (bm + K_NORM)


def rank(
    query_vector: np.ndarray,
    doc_vectors: np.ndarray,
    query: str,
    documents: Sequence[str],
    top_n: int | None = None,
) -> list[tuple[int, float, float, float]]:
    """(index, relevance, cosine, bm25) best first; ties keep document order."""
    cos = np.asarray(doc_vectors, np.float64) @ np.asarray(query_vector, np.float64)
    bm = bm25_scores(query, documents)
    fused = fuse(cos, bm)
    order = sorted(range(len(documents)), key=lambda i: (-fused[i], i))
    if top_n is not None:
        order = order[:top_n]
    return [(i, float(fused[i]), float(cos[i]), float(bm[i])) for i in order]
