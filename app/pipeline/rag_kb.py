"""The `rag` plugin's knowledge-base source: a base's nearest entries as passages.

No second embedding path: the bases are the ones the `kb` signal scores (a Router replica's
`KnowledgeBaseFeed`, app/pipeline/signals/kb.py: the exemplar vectors the router's encoder
made when the base was activated), and the query vector is the request's shared one
(`SignalContext.query_vector`, one encoder pass per request) when the rag query is the text
the signals judged. The score of an entry is its cosine similarity to the query (both are
unit vectors: one matrix-vector product per base); its text is the passage and its label goes
into the chunk's metadata.

A base that does not exist, is not active yet or is empty is not served: the search raises,
which the plugin reports as `unavailable` (as it does a vector store it cannot find).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import numpy as np

from app.pipeline.rag import RagChunk, RagUnavailable
from app.pipeline.signals.kb import KnowledgeBaseFeed
from app.pipeline.signals.kb_data import LoadedKb

# query text -> its unit vector (the router's encoder)
QueryVector = Callable[[str], Awaitable[np.ndarray]]


def nearest_entries(kb: LoadedKb, query: np.ndarray, top_k: int, threshold: float) -> list[RagChunk]:
    """The base's `top_k` entries most similar to `query` at or above `threshold`, best first
    (equal similarity: the entry first in the base first)."""
    if len(kb) == 0:
        return []
    sims = kb.matrix @ np.asarray(query, dtype=np.float32).reshape(-1)
    k = min(top_k, len(sims))
    rows = np.argpartition(-sims, k - 1)[:k] if k < len(sims) else np.arange(len(sims))
    rows = rows[np.lexsort((kb.entry_index[rows], -sims[rows]))]
    return [
        RagChunk(
            score=round(float(sims[row]), 6),
            text=kb.texts[row],
            knowledge_base=kb.name,
            entry_id=kb.entry_ids[row],
            index=int(kb.entry_index[row]),
            label=kb.label_names[int(kb.label_index[row])],
        )
        for row in (int(r) for r in rows)
        if sims[row] >= threshold
    ]


class KbRetriever:
    """`KbSearch` (app/pipeline/rag.py) over a feed of active bases and a query embedder."""

    def __init__(self, feed: KnowledgeBaseFeed | None, query_vector: QueryVector | None) -> None:
        self.feed = feed
        self.query_vector = query_vector

    async def versions(self, names: list[str]) -> tuple[str | None, ...]:
        if self.feed is None:
            return ()
        bases = await self.feed.current()  # a store that fails keeps the bases last read
        return tuple(bases[n].content_hash if n in bases else None for n in names)

    async def search(self, names: list[str], query: str, top_k: int, threshold: float) -> list[RagChunk]:
        if self.feed is None:
            raise RagUnavailable("no knowledge-base store in this process")
        if self.query_vector is None:
            raise RagUnavailable("no encoder in this process to embed the query")
        bases = await self.feed.current()
        missing = [n for n in names if n not in bases or len(bases[n]) == 0]
        if missing:
            raise RagUnavailable(
                f"knowledge base(s) {missing} do not exist, are not active yet, or are empty"
            )
        vector = await self.query_vector(query)
        # One encoder for every base: cosines compare across bases (ties: the order named).
        found = [c for name in names for c in nearest_entries(bases[name], vector, top_k, threshold)]
        found.sort(key=lambda c: -c.score)
        return found[:top_k]
