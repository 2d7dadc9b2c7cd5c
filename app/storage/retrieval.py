"""The `rag` plugin's retrieval over the storage service's vector-store search: the Storage
service runs it for a StorageClient's `retrieve` (client.py; app/pipeline/rag.py `Retrieve`).

A decision names its store by id or, since ids are minted when a store is created through the
API, by the store's `name` (the newest store of that name wins)."""

from __future__ import annotations

from app.pipeline.rag import RagChunk
from app.storage.schemas import RankingOptions, SearchRequest
from app.storage.vector_stores import NotFound, VectorStores


def search_chunks(stores: VectorStores, store_id: str, query: str, top_k: int, ranker: str) -> list[RagChunk]:
    """One store's search as RagChunks (raises NotFound for an unknown store)."""
    body = SearchRequest(
        query=query[:8192],
        max_num_results=min(top_k, 50),
        ranking_options=RankingOptions.model_validate({"ranker": ranker}),
    )
    store_id = resolve(stores, store_id)
    results = stores.search(store_id, body)
    return [
        RagChunk(
            vector_store_id=store_id,
            file_id=r.file_id,
            chunk_id=r.chunk_id,
            score=r.score,
            text="\n".join(c.text for c in r.content),
        )
        for r in results.data
    ]


def resolve(stores: VectorStores, ref: str) -> str:
    """The id of the store `ref` names (an id, else a name); NotFound when none does."""
    try:
        return stores.get(ref).id
    except NotFound:
        named = [s for s in stores.listing() if s.name == ref]
        if not named:
            raise
        return named[-1].id
