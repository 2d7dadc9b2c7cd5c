"""The `rag` plugin: retrieval from the storage service's vector stores, injected into the request.

route() calls `run_rag` once per routed request, after the request mutations (so a
`system_prompt` in `replace` mode cannot drop the passages). The query is the request's last
user turn; each named store is searched through `PipelineServices.retrieve` (the storage
service's hybrid/vector/BM25 search); the best `top_k` chunks over all stores that fit
`max_context_tokens` (MiniLM WordPiece tokens, app/pipeline/compression.py) are injected as
one system message or as a context block appended to the last user message.

A result cache (bounded LRU, `cache_ttl_seconds`) keys on query text + stores + settings, so a
repeated question does not search again. A store that fails or times out skips retrieval
(`x-vsr-rag-status: unavailable`), unless `on_error: fail`, which answers 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from app.config.plugins import RagPlugin
from app.pipeline.compression import count_texts
from app.pipeline.signals.base import content_text

log = logging.getLogger("svc_sr.rag")

CHUNKS_HEADER = "x-vsr-rag-chunks"
STATUS_HEADER = "x-vsr-rag-status"
PREAMBLE = "Use the following retrieved passages to answer when they are relevant:"
CACHE_ENTRIES = 1024  # bounded: a flood of distinct questions evicts the oldest
RETRIEVE_TIMEOUT_S = 2.0  # a slow store is a down store: the request goes on without it


class RagChunk(BaseModel):
    """One retrieved passage."""

    vector_store_id: str
    file_id: str
    chunk_id: str
    score: float
    text: str


class RagUsage(BaseModel):
    """What the plugin did for one request: routing_metadata.rag and the replay record."""

    vector_store_ids: list[str]
    status: str = "ok"  # ok | no_query | unavailable
    cached: bool = False
    chunks: list[dict[str, Any]] = Field(default_factory=list)  # {vector_store_id, file_id, chunk_id, score}
    tokens: int = 0


# (store_id, query, top_k, ranker) -> chunks; raises on a store that is down or unknown
Retrieve = Callable[[str, str, int, str], Awaitable[list[RagChunk]]]


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


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content")).strip()
    return ""


def cache_key(policy: RagPlugin, query: str) -> tuple[Any, ...]:
    return (query, tuple(policy.store_ids), policy.top_k, policy.ranker, policy.score_threshold)


async def retrieve_all(
    retrieve: Retrieve, policy: RagPlugin, query: str, timeout_s: float = RETRIEVE_TIMEOUT_S
) -> list[RagChunk]:
    """The best `top_k` chunks over every named store at or above `score_threshold`;
    RagUnavailable when a store fails or does not answer within `timeout_s`."""
    calls = [retrieve(store, query, policy.top_k, policy.ranker) for store in policy.store_ids]
    try:
        found = await asyncio.wait_for(asyncio.gather(*calls), timeout_s)
    except Exception as exc:  # noqa: BLE001 - any store failure is "unavailable" to the request
        raise RagUnavailable(f"{type(exc).__name__}: {exc}") from exc
    chunks = [c for per_store in found for c in per_store if c.score >= policy.score_threshold]
    chunks.sort(key=lambda c: -c.score)
    return chunks[: policy.top_k]


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


def passages_text(chunks: list[RagChunk]) -> str:
    blocks = [f"[{i}] (file {c.file_id}, chunk {c.chunk_id})\n{c.text}" for i, c in enumerate(chunks, 1)]
    return "\n\n".join([PREAMBLE, *blocks])


def inject(body: dict[str, Any], chunks: list[RagChunk], inject_as: str) -> None:
    """`system`: one system message after the client's leading system messages;
    `context_block`: a <context> block appended to the last user message."""
    text = passages_text(chunks)
    messages = list(body.get("messages") or [])
    if inject_as == "context_block":
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, dict) and message.get("role") == "user":
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
    retrieve: Retrieve | None, cache: ResultCache, policy: RagPlugin, body: dict[str, Any]
) -> RagUsage:
    """Retrieve and inject into `body`; raises RagUnavailable only with `on_error: fail`."""
    usage = RagUsage(vector_store_ids=policy.store_ids)
    query = last_user_text(body)
    if not query:
        usage.status = "no_query"
        return usage
    key = cache_key(policy, query)
    chunks = cache.get(key) if policy.cache_ttl_seconds > 0 else None
    if chunks is not None:
        usage.cached = True
    else:
        try:
            if retrieve is None:
                raise RagUnavailable("no vector-store retrieval is wired to this router")
            chunks = await retrieve_all(retrieve, policy, query)
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
    usage.chunks = [
        {"vector_store_id": c.vector_store_id, "file_id": c.file_id, "chunk_id": c.chunk_id, "score": c.score}
        for c in kept
    ]
    return usage
