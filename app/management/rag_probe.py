"""POST /api/v1/plugins/rag/preview `mode: probe`: the binding's retrieval, run for real
against its vector store(s) but never through (nor into) the pipeline's result cache; every
store search is a backend call."""

from __future__ import annotations

from typing import Any

from app.config.plugins import RagPlugin
from app.management.errors import invalid_input, unavailable
from app.management.plugin_models import RagChunkUsed, RagPreview
from app.pipeline.rag import (
    RagChunk,
    RagUnavailable,
    Retrieve,
    inject,
    last_user_text,
    passages_text,
    retrieve_all,
    within_budget,
)


async def rag_probe(
    policy: RagPlugin, request: dict[str, Any], retrieve: Retrieve | None
) -> tuple[dict[str, Any], int]:
    """(the RagPreview result, backend calls made)."""
    if retrieve is None:
        raise unavailable("rag probe: the vector-store service is not available")
    query = last_user_text(request)
    if not query:
        raise invalid_input("a rag probe needs a user message in `request.messages`")
    calls = 0

    async def counted(store_id: str, text: str, top_k: int, ranker: str) -> list[RagChunk]:
        nonlocal calls
        calls += 1
        return await retrieve(store_id, text, top_k, ranker)

    try:
        chunks = await retrieve_all(counted, policy, query)
    except RagUnavailable as exc:
        raise unavailable(f"rag probe: retrieval failed: {exc}") from None
    kept, tokens = within_budget(chunks, policy.max_context_tokens)
    if kept:
        inject(request, kept, policy.inject_as)
    preview = RagPreview(
        injected_context=passages_text(kept) if kept else "",
        messages=list(request.get("messages") or []),
        retrieval="vector_store",
        chunks=[RagChunkUsed(**c.model_dump(exclude={"text"})) for c in kept],
        tokens=tokens,
    )
    return preview.model_dump(), calls
