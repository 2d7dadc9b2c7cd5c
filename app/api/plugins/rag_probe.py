"""POST /api/v1/plugins/rag/preview `mode: probe`: the binding's retrieval, run for real
against its vector store(s) and knowledge base(s) but never through (nor into) the
pipeline's result cache; every store search and every knowledge-base search is a backend call.

The knowledge bases are the ones the kb signal scores, read from the management store
(a `KnowledgeBaseFeed` over the Management's KnowledgeBaseStore), and the query is embedded
by the Management's encoder (the router's MiniLM), as the pipeline does (app/pipeline/rag_kb.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.api.plugins.plugin_schemas import RagChunkUsed, RagPreview, RagRetrieval
from app.common.mgmt_errors import invalid_input, unavailable
from app.config.plugins import RagPlugin
from app.pipeline.rag import (
    KbSearch,
    RagChunk,
    RagUnavailable,
    Retrieve,
    inject,
    passages_text,
    rag_query,
    retrieve_all,
    within_budget,
)
from app.pipeline.rag_kb import KbRetriever
from app.pipeline.signals.base import EmbedFn
from app.pipeline.signals.kb import KnowledgeBaseFeed


def probe_kbs(feed: KnowledgeBaseFeed | None, embed: EmbedFn | None) -> KbRetriever | None:
    """The probe's knowledge-base search (None without a store or an encoder: 503)."""
    if feed is None or embed is None:
        return None

    async def vector(query: str) -> np.ndarray:
        return np.asarray(await embed([query]), dtype=np.float32).reshape(-1)

    return KbRetriever(feed, vector)


class _CountedKbs:
    def __init__(self, kbs: KbSearch) -> None:
        self.kbs = kbs
        self.calls = 0

    async def versions(self, names: list[str]) -> tuple[str | None, ...]:
        return await self.kbs.versions(names)

    async def search(self, names: list[str], query: str, top_k: int, threshold: float) -> list[RagChunk]:
        self.calls += len(names)
        return await self.kbs.search(names, query, top_k, threshold)


async def rag_probe(
    policy: RagPlugin, request: dict[str, Any], retrieve: Retrieve | None, kbs: KbSearch | None = None
) -> tuple[dict[str, Any], int]:
    """(the RagPreview result, backend calls made)."""
    if policy.store_ids and retrieve is None:
        raise unavailable("rag probe: the vector-store service is not available")
    if policy.kb_names and kbs is None:
        raise unavailable("rag probe: the knowledge bases (or the encoder) are not available")
    query = rag_query(request)
    if not query:
        raise invalid_input("a rag probe needs a user message in `request.messages`")
    calls = 0

    async def counted(store_id: str, text: str, top_k: int, ranker: str) -> list[RagChunk]:
        nonlocal calls
        calls += 1
        assert retrieve is not None
        return await retrieve(store_id, text, top_k, ranker)

    counted_kbs = _CountedKbs(kbs) if kbs is not None else None
    try:
        chunks = await retrieve_all(counted if retrieve else None, policy, query, kbs=counted_kbs)
    except RagUnavailable as exc:
        raise unavailable(f"rag probe: retrieval failed: {exc}") from None
    kept, tokens = within_budget(chunks, policy.max_context_tokens)
    if kept:
        inject(request, kept, policy.inject_as)
    retrieval: RagRetrieval = "knowledge_base" if policy.kb_names else "vector_store"
    preview = RagPreview(
        injected_context=passages_text(kept) if kept else "",
        messages=list(request.get("messages") or []),
        retrieval="mixed" if policy.store_ids and policy.kb_names else retrieval,
        chunks=[RagChunkUsed.model_validate(c.metadata()) for c in kept],
        tokens=tokens,
    )
    calls += counted_kbs.calls if counted_kbs is not None else 0
    return preview.model_dump(exclude_none=True), calls
