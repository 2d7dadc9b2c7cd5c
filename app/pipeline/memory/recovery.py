"""Context recovery: the router re-creating a conversation's earlier context from its own
stores instead of from the client, for one scope (`user:<id>` or `session:<id>`):

- the `memory` plugin's recall of the scope's memories (plugin.py);
- answers served from the scope's response-cache partition (phases/cache.py: with a
  `memory` plugin the scope keys the partition).

A scope is trusted until invalidated (POST /api/v1/storage/context-recovery/invalidate,
app/api/routes/context_recovery.py). An invalidation writes the scope's RecoveryMark
(store.py) into the memory store itself, so every Router replica that recalls from it sees
the mark: from then on recall (and the extractor's dedupe) only considers memories created
after `invalidated_at`, and the mark's generation goes into the scope's cache partition, so
no answer cached before is looked up for the scope again. Nothing is deleted: the older
memories stay listable and deletable through /api/v1/storage/memories, the older cache
entries expire with their TTL.

Timestamps are compared as now_stamp() strings (fixed ISO 8601 form, UTC, milliseconds): a
memory written in the mark's own millisecond counts as before it (never recalled).
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, Field

from app.pipeline.memory.store import Memory, MemoryScope, MemoryStore, RecoveryMark, now_stamp

RETAINED_NOTE = (
    "memories written before invalidated_at are kept (listable and deletable under "
    "/api/v1/storage/memories) but are never recalled again; answers cached for the scope before "
    "are never served to it again and expire with their TTL"
)


def recallable(memories: list[Memory], mark: RecoveryMark | None) -> list[Memory]:
    """The memories recall may use: all of them until the scope's first invalidation, then
    only those created after the latest one."""
    if mark is None or mark.invalidated_at is None:
        return memories
    since = mark.invalidated_at
    return [m for m in memories if m.created_at > since]


def memory_partition_suffix(memory_scope: str, generation: int = 0) -> str:
    """The memory scope's part of a response-cache partition (phases/cache.py cache_partition).
    Generation 0 keeps the key it had before invalidations existed; hashed as a list (not a
    joined string) so no scope id can spell another scope's key and generation."""
    value = [memory_scope] if generation == 0 else [memory_scope, generation]
    return f"|memory:{hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]}"


class CachePartitionAdvance(BaseModel):
    """The scope's response-cache partition suffix (app/pipeline/phases/cache.py), before and
    after: entries under the previous one are never looked up for the scope again."""

    previous_generation: int
    generation: int
    previous_suffix: str
    suffix: str
    applies_to: str = "decisions with a `memory` plugin whose scope kind matches"


class RecoveryInvalidation(BaseModel):
    object: Literal["context_recovery.invalidation"] = "context_recovery.invalidation"
    scope: str = Field(description="user:<id> or session:<id>")
    dry_run: bool
    invalidated_at: str = Field(description="ISO 8601 UTC; a dry run: when it would have been")
    generation: int = Field(description="the scope's generation after it (a dry run: would be)")
    memories_excluded: int = Field(description="the scope's kept memories recall will never use again")
    cache_partition: CachePartitionAdvance
    reason: str | None = None
    note: str = RETAINED_NOTE


async def invalidate(
    store: MemoryStore, scope: MemoryScope, *, dry_run: bool, reason: str | None
) -> RecoveryInvalidation:
    """Write the scope's next mark (a dry run: read only). Raises MemoryStoreUnavailable."""
    before = await store.mark(scope)
    if dry_run:
        mark = RecoveryMark(
            scope=scope,
            generation=before.generation + 1,
            invalidated_at=max(now_stamp(), before.invalidated_at or ""),
            reason=reason,
        )
    else:
        mark = await store.invalidate(scope, now_stamp(), reason)
    when = mark.invalidated_at or now_stamp()
    kept = await store.list_scope(scope)
    excluded = sum(1 for m in kept if m.created_at <= when)
    previous = mark.generation - 1  # the generation this one replaced (concurrent ones: the one before it)
    return RecoveryInvalidation(
        scope=scope.key(),
        dry_run=dry_run,
        invalidated_at=when,
        generation=mark.generation,
        memories_excluded=excluded,
        cache_partition=CachePartitionAdvance(
            previous_generation=previous,
            generation=mark.generation,
            previous_suffix=memory_partition_suffix(scope.key(), previous),
            suffix=memory_partition_suffix(scope.key(), mark.generation),
        ),
        reason=reason,
    )
