"""The `rag` plugin: retrieval from the storage service's vector stores and from knowledge
bases, injected into the request.

route() calls `run_rag` once per routed request, after the request mutations (so a
`system_prompt` in `replace` mode cannot drop the passages). The query is the human's ask
(app/common/chat_text.py); each named store is searched through `PipelineServices.retrieve` (the storage
service's hybrid/vector/BM25 search), each named knowledge base through a `KbSearch`
(app/pipeline/rag_kb.py: the kb signal's feed and vectors, cosine to the request's vector).

Merging: the stores' chunks are ranked together by score (one ranker, one scale) and the
knowledge bases' entries together by cosine (one encoder), each list cut at `top_k`; with
both kinds named the two lists are interleaved by rank (store 1st, entry 1st, store 2nd, ...),
because a fused or BM25 score and a cosine are not on one scale. The best `top_k` of that which
fit `max_context_tokens` (MiniLM WordPiece tokens, app/pipeline/compression.py) are injected as
one system message or as a context block appended to the human's ask.

A result cache (bounded LRU, `cache_ttl_seconds`) keys on query text + sources + settings (and
the knowledge bases' content hashes, so an updated base is searched again), so a repeated
question does not search again. A source that fails, is unknown (a knowledge base not active),
or times out skips retrieval (`x-vsr-rag-status: unavailable`), unless `on_error: fail`, which
answers 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import BaseModel, Field

from app.common.chat_text import ask_index, content_text, human_ask
from app.config.plugins import RagPlugin
from app.pipeline.compression import count_texts

log = logging.getLogger("svc_sr.rag")

CHUNKS_HEADER = "x-vsr-rag-chunks"
STATUS_HEADER = "x-vsr-rag-status"
PREAMBLE = "Use the following retrieved passages to answer when they are relevant:"
CACHE_ENTRIES = 1024  # bounded: a flood of distinct questions evicts the oldest
RETRIEVE_TIMEOUT_S = 2.0  # a slow store is a down store: the request goes on without it
WARM_TIMEOUT_S = 15.0  # a store service starting on its first call (~4 s here); a store that hangs
# holds a configuration's activation no longer than this


class RagChunk(BaseModel):
    """One retrieved passage: a vector-store chunk (vector_store_id, file_id, chunk_id) or a
    knowledge-base entry (knowledge_base, entry_id, index: its position in the base, label)."""

    score: float
    text: str
    vector_store_id: str | None = None
    file_id: str | None = None
    chunk_id: str | None = None
    knowledge_base: str | None = None
    entry_id: str | None = None
    index: int | None = None
    label: str | None = None

    @property
    def source(self) -> str:
        return "knowledge_base" if self.knowledge_base is not None else "vector_store"

    def metadata(self) -> dict[str, Any]:
        """What routing_metadata.rag.chunks and the replay record name it by (no text)."""
        return {"source": self.source, **self.model_dump(exclude={"text"}, exclude_none=True)}


class RagUsage(BaseModel):
    """What the plugin did for one request: routing_metadata.rag and the replay record."""

    vector_store_ids: list[str]
    knowledge_bases: list[str] = Field(default_factory=list)
    status: str = "ok"  # ok | no_query | unavailable
    cached: bool = False
    # RagChunk.metadata(): {source: vector_store, vector_store_id, file_id, chunk_id, score}
    # or {source: knowledge_base, knowledge_base, entry_id, index, label, score}
    chunks: list[dict[str, Any]] = Field(default_factory=list)
    tokens: int = 0


# (store_id, query, top_k, ranker) -> chunks; raises on a store that is down or unknown
Retrieve = Callable[[str, str, int, str], Awaitable[list[RagChunk]]]


class KbSearch(Protocol):
    """Knowledge-base retrieval (app/pipeline/rag_kb.py KbRetriever)."""

    async def versions(self, names: list[str]) -> tuple[str | None, ...]:
        """The named bases' content hashes as served now (None: not served): the cache key's."""
        ...

    async def search(self, names: list[str], query: str, top_k: int, threshold: float) -> list[RagChunk]:
        """The best `top_k` entries over the named bases at or above `threshold` (cosine), best
        first; raises when a base is not served or the query cannot be embedded."""
        ...


class RagUnavailable(RuntimeError):
    pass


class ResultCache:
    """Query + stores + settings -> chunks, for `ttl` seconds; LRU-bounded."""

    def __init__(self, size: int = CACHE_ENTRIES, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[tuple[Any, ...], tuple[float, list[RagChunk]]] = OrderedDict()
        self._size = size
        self._clock = clock
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[Any, ...]) -> list[RagChunk] | None:
        found = self._entries.get(key)
        if found is None or found[0] < self._clock():
            self._entries.pop(key, None)
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found[1]

    def put(self, key: tuple[Any, ...], chunks: list[RagChunk], ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries[key] = (self._clock() + ttl, chunks)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def rag_query(body: dict[str, Any]) -> str:
    """What the stores are searched with: the human's ask, stripped."""
    return human_ask(body.get("messages") or []).strip()


def cache_key(policy: RagPlugin, query: str, kb_versions: tuple[str | None, ...] = ()) -> tuple[Any, ...]:
    return (
        query,
        tuple(policy.store_ids),
        policy.top_k,
        policy.ranker,
        policy.score_threshold,
        tuple(policy.kb_names),
        policy.knowledge_base_threshold,
        kb_versions,
    )


def merge_by_rank(ranked: list[list[RagChunk]], top_k: int) -> list[RagChunk]:
    """Lists each ranked on its own scale, interleaved rank by rank (every list's first, then
    every list's second, ...; at one rank in the lists' order), cut at `top_k`."""
    merged: list[RagChunk] = []
    for rank in range(max((len(chunks) for chunks in ranked), default=0)):
        merged += [chunks[rank] for chunks in ranked if rank < len(chunks)]
    return merged[:top_k]


async def warm_retrieval(retrieve: Retrieve, plugins: list[RagPlugin]) -> None:
    """One search of the first vector store the configuration retrieves from, answer dropped,
    while the configuration loads: a store service that starts on its first call (the Storage
    deployment of one machine's graph, docs/deploy.md "Laptop sizing") starts now, not within
    a request's RETRIEVE_TIMEOUT_S. A failure here is only logged; requests report their own."""
    store_id = next((s for p in plugins for s in p.store_ids), None)
    if store_id is None:
        return
    try:
        await asyncio.wait_for(retrieve(store_id, "warm-up", 1, "vector"), WARM_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - a store that is down is the requests' to report
        log.info("rag warm-up of vector store %s: %s", store_id, exc)


async def retrieve_all(
    retrieve: Retrieve | None,
    policy: RagPlugin,
    query: str,
    timeout_s: float = RETRIEVE_TIMEOUT_S,
    kbs: KbSearch | None = None,
) -> list[RagChunk]:
    """The best `top_k` chunks over every named store at or above `score_threshold`, merged by
    rank with the best `top_k` knowledge-base entries at or above `knowledge_base_threshold`
    (module doc); RagUnavailable when a source fails or does not answer within `timeout_s`."""
    if policy.store_ids and retrieve is None:
        raise RagUnavailable("no vector-store retrieval is wired to this router")
    if policy.kb_names and kbs is None:
        raise RagUnavailable("no knowledge-base store in this process")

    async def from_stores() -> list[RagChunk]:
        assert retrieve is not None
        found = await asyncio.gather(
            *(retrieve(s, query, policy.top_k, policy.ranker) for s in policy.store_ids)
        )
        chunks = [c for per_store in found for c in per_store if c.score >= policy.score_threshold]
        chunks.sort(key=lambda c: -c.score)
        return chunks[: policy.top_k]

    async def from_kbs() -> list[RagChunk]:
        assert kbs is not None
        return await kbs.search(policy.kb_names, query, policy.top_k, policy.knowledge_base_threshold)

    calls = ([from_stores()] if policy.store_ids else []) + ([from_kbs()] if policy.kb_names else [])
    try:
        found = await asyncio.wait_for(asyncio.gather(*calls), timeout_s)
    except Exception as exc:  # noqa: BLE001 - any source failure is "unavailable" to the request
        raise RagUnavailable(f"{type(exc).__name__}: {exc}") from exc
    return merge_by_rank(list(found), policy.top_k)


def within_budget(chunks: list[RagChunk], max_tokens: int) -> tuple[list[RagChunk], int]:
    """The chunks, best first, that fit `max_tokens` together (a chunk that does not fit is
    skipped; a smaller later one may still fit)."""
    kept: list[RagChunk] = []
    used = 0
    for chunk, tokens in zip(chunks, count_texts([c.text for c in chunks]), strict=True):
        if used + tokens <= max_tokens:
            kept.append(chunk)
            used += tokens
    return kept, used


def where(chunk: RagChunk) -> str:
    if chunk.knowledge_base is not None:
        return f"knowledge base {chunk.knowledge_base}, entry {chunk.entry_id}"
    return f"file {chunk.file_id}, chunk {chunk.chunk_id}"


def passages_text(chunks: list[RagChunk]) -> str:
    blocks = [f"[{i}] ({where(c)})\n{c.text}" for i, c in enumerate(chunks, 1)]
    return "\n\n".join([PREAMBLE, *blocks])


def inject(body: dict[str, Any], chunks: list[RagChunk], inject_as: str) -> None:
    """`system`: one system message after the client's leading system messages;
    `context_block`: a <context> block appended to the human's ask."""
    text = passages_text(chunks)
    messages = list(body.get("messages") or [])
    index = ask_index(messages) if inject_as == "context_block" else -1
    if index >= 0:
        message = messages[index]
        user = content_text(message.get("content"))
        messages[index] = {**message, "content": f"{user}\n\n<context>\n{text}\n</context>"}
        body["messages"] = messages
        return
    at = 0
    while (
        at < len(messages)
        and isinstance(messages[at], dict)
        and messages[at].get("role") in ("system", "developer")
    ):
        at += 1
    messages.insert(at, {"role": "system", "content": text})
    body["messages"] = messages


async def run_rag(
    retrieve: Retrieve | None,
    cache: ResultCache,
    policy: RagPlugin,
    body: dict[str, Any],
    kbs: KbSearch | None = None,
) -> RagUsage:
    """Retrieve and inject into `body`; raises RagUnavailable only with `on_error: fail`."""
    usage = RagUsage(vector_store_ids=policy.store_ids, knowledge_bases=policy.kb_names)
    query = rag_query(body)
    if not query:
        usage.status = "no_query"
        return usage
    versions = await kbs.versions(policy.kb_names) if kbs is not None and policy.kb_names else ()
    key = cache_key(policy, query, versions)
    chunks = cache.get(key) if policy.cache_ttl_seconds > 0 else None
    if chunks is not None:
        usage.cached = True
    else:
        try:
            chunks = await retrieve_all(retrieve, policy, query, kbs=kbs)
        except RagUnavailable as exc:
            if policy.on_error == "fail":
                raise
            log.warning("rag retrieval skipped: %s", exc)
            usage.status = "unavailable"
            return usage
        cache.put(key, chunks, policy.cache_ttl_seconds)
    kept, usage.tokens = within_budget(chunks, policy.max_context_tokens)
    if kept:
        inject(body, kept, policy.inject_as)
    usage.chunks = [c.metadata() for c in kept]
    return usage
