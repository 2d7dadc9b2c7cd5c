"""The `memory` plugin's two halves, around one exchange:

- `recall` (route(), once the decision is known): the scope's memories most similar to the
  request text (cosine of the router's embeddings, `recall_top_k` above `recall_threshold`)
  go into the request as one system message after the client's own system messages; the
  count is the `x-vsr-memories-recalled` header and routing_metadata.memories_recalled.
- `remember` (complete(), after the answer, in a background task): the user's turn's
  durable facts (extract.py), each embedded and stored unless the scope already keeps one
  at least `dedupe_threshold` similar.

Both halves honour the scope's context-recovery mark (recovery.py): after an invalidation
only memories created since are recalled or count as duplicates, and a write whose request
was routed before the invalidation (an older generation) is dropped.

Neither half can fail or hold up the answer: a store that is down skips recall (header
`x-vsr-memory-status: unavailable`) and drops the write; every failure is logged and
counted (`MemoryTasks.counts`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import numpy as np

from app.pipeline.memory.extract import extract_facts
from app.pipeline.memory.recovery import recallable
from app.pipeline.memory.store import (
    Memory,
    MemoryScope,
    MemorySource,
    MemoryStore,
    MemoryStoreUnavailable,
    RecoveryMark,
    new_memory_id,
    now_stamp,
)

log = logging.getLogger("svc_sr.memory")

USER_ID_HEADER = "x-user-id"  # the caller's identity, set by the auth layer in front of the router
RECALLED_HEADER = "x-vsr-memories-recalled"
STATUS_HEADER = "x-vsr-memory-status"
PREAMBLE = "Known facts about the user from earlier conversations (use them when relevant):"
VECTOR_DIGITS = 5  # stored embeddings rounded: a third of the JSON, no change to a cosine that matters

Embed = Callable[[list[str]], Awaitable[np.ndarray]]


def scope_of(
    kind: str, headers: Mapping[str, str], body: Mapping[str, Any], session_id: str | None
) -> MemoryScope | None:
    """The request's scope (`headers` lower-cased); None when the request names no identity."""
    if kind == "session":
        return MemoryScope(kind="session", id=session_id) if session_id else None
    user = headers.get(USER_ID_HEADER, "").strip() or body.get("user")
    if not isinstance(user, str) or not user.strip() or len(user.strip()) > 256:
        return None
    return MemoryScope(kind="user", id=user.strip())


def _unit(vector: Any) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


def rank(memories: list[Memory], query: Any, top_k: int, threshold: float) -> list[tuple[Memory, float]]:
    """The `top_k` memories most similar to `query` at or above `threshold`, best first."""
    embedded = [m for m in memories if m.vector]
    if not embedded or top_k <= 0:
        return []
    matrix = np.asarray([m.vector for m in embedded], dtype=np.float32)  # one array, one product
    norms = np.linalg.norm(matrix, axis=1)
    scores = (matrix @ _unit(query)) / np.where(norms > 0, norms, 1.0)
    order = np.argsort(-scores, kind="stable")[:top_k]
    return [(embedded[i], float(scores[i])) for i in order if scores[i] >= threshold]


def inject(body: dict[str, Any], memories: list[Memory]) -> None:
    """One system message listing the memories, after the client's leading system messages."""
    messages = list(body.get("messages") or [])
    at = 0
    while (
        at < len(messages)
        and isinstance(messages[at], dict)
        and messages[at].get("role") in ("system", "developer")
    ):
        at += 1
    text = "\n".join([PREAMBLE, *(f"- {m.text}" for m in memories)])
    messages.insert(at, {"role": "system", "content": text})
    body["messages"] = messages


async def recall(
    store: MemoryStore,
    scope: MemoryScope,
    query: Callable[[], Awaitable[np.ndarray]],
    top_k: int,
    threshold: float,
    mark: RecoveryMark | None = None,
) -> list[Memory]:
    """The memories to inject (marked used); raises MemoryStoreUnavailable when the store is down.
    `mark`: the scope's recovery mark when the caller read it already (else read here)."""
    if mark is None:
        mark = await store.mark(scope)
    kept = recallable(await store.list_scope(scope), mark)
    if not kept or top_k == 0:
        return []
    chosen = [m for m, _ in rank(kept, await query(), top_k, threshold)]
    if chosen:
        try:
            await store.touch(scope, [m.id for m in chosen], now_stamp())
        except MemoryStoreUnavailable as exc:  # recalled all the same; only the bookkeeping is lost
            log.warning("%s", exc)
    return chosen


async def remember(
    store: MemoryStore,
    embed: Embed,
    scope: MemoryScope,
    turn: str,
    *,
    max_memories: int,
    dedupe_threshold: float,
    source: MemorySource,
    generation: int | None = None,
) -> tuple[int, int]:
    """Store the turn's new facts; (stored, skipped as duplicates). `generation`: the scope's
    recovery generation when the request was routed; an invalidation since drops the write."""
    facts = extract_facts(turn)
    if not facts:
        return 0, 0
    mark = await store.mark(scope)
    if generation is not None and mark.generation != generation:
        log.info("memories of %s not kept: the scope was invalidated since the request", source.request_id)
        return 0, 0
    vectors = np.asarray(await embed([f.text for f in facts]), dtype=np.float32)
    kept = [
        (_unit(m.vector), m.text.lower()) for m in recallable(await store.list_scope(scope), mark) if m.vector
    ]
    stored = skipped = 0
    for fact, vector in zip(facts, vectors, strict=True):
        unit = _unit(vector)
        if any(text == fact.text.lower() or float(np.dot(v, unit)) >= dedupe_threshold for v, text in kept):
            skipped += 1
            continue
        memory = Memory(
            id=new_memory_id(),
            scope=scope,
            text=fact.text,
            category=fact.category,
            created_at=now_stamp(),
            source=source,
            vector=[round(float(x), VECTOR_DIGITS) for x in unit],
        )
        await store.add(memory, max_memories)
        kept.append((unit, fact.text.lower()))
        stored += 1
    return stored, skipped


class MemoryTasks:
    """The background `remember` calls of one process: never awaited by an answer, held here
    so they are not collected mid-flight, counted by outcome."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts: Counter[str] = Counter()  # stored, duplicate, failed, unavailable

    def start(self, work: Awaitable[tuple[int, int]], request_id: str) -> None:
        async def run() -> None:
            try:
                stored, skipped = await work
                self.counts["stored"] += stored
                self.counts["duplicate"] += skipped
            except MemoryStoreUnavailable as exc:
                self.counts["unavailable"] += 1
                log.warning("memories of request %s not kept: %s", request_id, exc)
            except Exception:
                self.counts["failed"] += 1
                log.exception("memory extraction failed for request %s", request_id)

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the writes started so far (tests; a graceful stop)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
