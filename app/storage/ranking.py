"""Search ranking: BM25's terms (lowercase, English stopwords out, a light suffix stemmer),
the fusions of the vector and BM25 rankings, and the optional rerank.

Fusions (docs/storage.md "Measurements" has the recall of each on two labelled sets; `hybrid`
is convex with VECTOR_WEIGHT):
- `rrf`: weighted reciprocal rank fusion, sum of w / (RRF_K + rank) over the rankings;
- `convex`: each ranking's scores min-max normalized to [0, 1] over its own candidates, then
  a weighted sum (a chunk missing from one ranking gets 0 from it).
Rerank (`ranker: hybrid_rerank`): the hybrid candidates re-scored with the model runtime's
reranker fusion (app/srun/rerank.py: MiniLM cosine fused with BM25 over the candidates), pure
numpy on the cosines the vector ranking already holds (re-embedding 20 candidates would cost
~2 s of CPU on the shared machine).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from app.common.stopwords import ENGLISH_STOPWORDS
from app.srun import rerank as reranker
from app.storage.vector_index import RRF_K, Chunk

# hybrid: convex fusion, 0.7 x normalized cosine + 0.3 x normalized BM25 (the weight chosen on
# the tune halves of two labelled sets; it beat equal and weighted RRF there, docs/storage.md)
VECTOR_WEIGHT = 0.7
Ranking = list[tuple[Chunk, float]]

_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = ENGLISH_STOPWORDS
_VOWEL = re.compile(r"[aeiouy]")


def stem(word: str) -> str:
    """A light English suffix stemmer (plural, -ed, -ing, -ly, final e/y), so that "files",
    "filed" and "file" meet, as do "copies", "copied" and "copy". Not Porter: no derivational
    suffixes, a stripped stem keeps a vowel; short words and words with digits pass as they are."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies"):
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "ches", "shes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ingly", "edly", "ing", "ed", "ly"):
        base = word[: -len(suffix)]
        if word.endswith(suffix) and len(base) >= 2 and _VOWEL.search(base):
            word = base
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouylsz":
                word = word[:-1]  # running -> run, stopped -> stop
            break
    if len(word) >= 3 and word[-1] == "e":
        word = word[:-1]
    elif len(word) > 3 and word[-1] == "y":
        word = word[:-1] + "i"
    return word


def terms(text: str) -> list[str]:
    """BM25's terms: lowercase alphanumeric words, stopwords dropped, stemmed."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def rrf(
    rankings: Sequence[Ranking], k: int, weights: Sequence[float] | None = None, rrf_k: int = RRF_K
) -> Ranking:
    """Weighted reciprocal rank fusion: ranking i adds weights[i] / (rrf_k + rank) to its chunks
    (equal weights: Cormack et al.'s RRF)."""
    fused: dict[str, float] = {}
    by_id: dict[str, Chunk] = {}
    for n, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[n]
        for rank, (chunk, _) in enumerate(ranking, start=1):
            fused[chunk.id] = fused.get(chunk.id, 0.0) + weight / (rrf_k + rank)
            by_id[chunk.id] = chunk
    ranked = sorted(fused.items(), key=lambda kv: -kv[1])[:k]
    return [(by_id[cid], score) for cid, score in ranked]


def convex(rankings: Sequence[Ranking], k: int, weights: Sequence[float]) -> Ranking:
    """Score fusion: each ranking's scores min-max normalized over its candidates, weighted sum."""
    fused: dict[str, float] = {}
    by_id: dict[str, Chunk] = {}
    for weight, ranking in zip(weights, rankings, strict=True):
        if not ranking:
            continue
        scores = np.array([s for _, s in ranking], np.float64)
        low, span = float(scores.min()), float(scores.max() - scores.min())
        for (chunk, _), score in zip(ranking, scores, strict=True):
            norm = (score - low) / span if span > 0 else 1.0
            fused[chunk.id] = fused.get(chunk.id, 0.0) + weight * norm
            by_id[chunk.id] = chunk
    ranked = sorted(fused.items(), key=lambda kv: -kv[1])[:k]
    return [(by_id[cid], score) for cid, score in ranked]


def hybrid(vector: Ranking, lexical: Ranking, k: int) -> Ranking:
    """The `hybrid` ranker's fusion of the vector and BM25 rankings; scores in [0, 1]."""
    return convex([vector, lexical], k, [VECTOR_WEIGHT, 1.0 - VECTOR_WEIGHT])


def rerank(query: str, candidates: Ranking, vector: Ranking, k: int) -> Ranking:
    """The candidates re-scored by app/srun/rerank.py's fusion, 0.7 x (cos+1)/2 + 0.3 x BM25
    squashed (BM25 over the candidates), best first; the score is that relevance in [0, 1).
    Cosines come from the vector ranking, so nothing is embedded again; a candidate outside
    it (found by BM25 alone) gets the ranking's lowest cosine, an upper bound on its own."""
    if not candidates:
        return []
    cosines = {chunk.id: score for chunk, score in vector}
    floor = min(cosines.values(), default=0.0)
    texts = [chunk.text for chunk, _ in candidates]
    cos = np.array([cosines.get(chunk.id, floor) for chunk, _ in candidates], np.float64)
    fused = reranker.fuse(cos, reranker.bm25_scores(query, texts))
    order = sorted(range(len(candidates)), key=lambda i: (-fused[i], i))[:k]
    return [(candidates[i][0], float(fused[i])) for i in order]
