"""Phase `cache`: the response-cache lookup (a hit answers the request) and the write that
complete() performs later (`plan.cache_write`). Returns the x-cache-status.

Partitions are f"{model}|{decision}" (decision "" when the default model answered), with
suffixes that keep answers from crossing into requests they do not answer:
- "|ctx:<hash>" when the request carries more than the human's ask (a system prompt,
  earlier turns, tool results, `tools`): one conversation's answer is never served to
  another that merely ends with the same question;
- "|tenant:<hash>" when it names a tenant (header `x-vsr-tenant`) or an end user (the
  OpenAI `user` field): tenants and users never share entries;
- "|memory:<hash>" when the decision has a `memory` plugin: its scope (and, once the scope's
  context recovery was invalidated, the mark's generation: app/pipeline/memory/recovery.py);
- "|neg:<signature>" when the question negates something (app/pipeline/cache_guard.py):
  "disable 2FA" is never answered with "enable 2FA", which encoders place within any
  usable threshold;
- "|enc:<identity>" when an `embedding` binding names the encoder (its worker card's digest,
  app/srun/worker_embedder.py): entries written with one encoder's vectors are never matched
  with another's, so a swap starts a fresh partition (of the new model's dimension); the
  graph's own MiniLM keys none.
Request header `x-vsr-cache-control` (name and allowed directives from the plugin's
`request_controls`): `no-cache` skips the lookup, `no-store` the write, `bypass` both;
`max-age=N` refuses entries older than N s, `ttl=N` sets the written entry's lifetime.

Stale-write guard: when a write will be scheduled, the partition's epoch token
(`services.cache_epoch`) is read alongside the embedding and the lookup, never after them, and
rides on the write (`CacheWrite.epoch`); the store drops the write if a flush covered the
partition before the answer came back (app/cache/base.py). A failed read leaves the write
unguarded, as it was before epochs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from app.common.chat_text import TOOL_RESULT_PART, ask_index, content_text
from app.pipeline.cache_guard import polarity_signature
from app.pipeline.compiled import CompiledConfig
from app.pipeline.memory.plugin import scope_of
from app.pipeline.memory.recovery import memory_partition_suffix
from app.pipeline.memory.store import MemoryStoreUnavailable
from app.pipeline.plan import CacheWrite, ImmediateResponse, RoutePlan
from app.pipeline.plugins import (
    CacheControl,
    DecisionPlugins,
    effective_cache_policy,
    parse_cache_control,
    refresh_cached_completion,
)
from app.pipeline.services import CacheEpoch, CacheLookup, PipelineServices
from app.pipeline.signals.base import SignalContext

log = logging.getLogger("svc_sr.pipeline")


async def cache_step(
    services: PipelineServices,
    state: CompiledConfig,
    plan: RoutePlan,
    ctx: SignalContext,
    plugins: DecisionPlugins | None,
    headers: Mapping[str, str],
) -> str:
    """Lookup (hit -> plan.immediate) and/or schedule the write; returns x-cache-status."""
    if plan.pii_action is not None:  # PII the policy denied: no key or entry holds it (docs/security.md)
        return "bypass"
    policy = effective_cache_policy(plugins, state.global_cache)
    if not policy.enabled or not ctx.text or services.cache_lookup is None:
        return "bypass"
    control = parse_cache_control(headers.get(policy.control_header), policy.allowed)
    store = control.store and services.cache_store is not None
    if not control.lookup and not store:
        return "bypass"
    try:
        memory_scope, generation = await _memory_scope(services, plugins, plan, headers)
    except MemoryStoreUnavailable as exc:  # fail closed: the scope may have been invalidated
        log.warning("cache skipped for %s: recovery mark unreadable: %s", plan.request_id, exc)
        return "bypass"
    partition = cache_partition(
        plan.selected_model or "",
        plan.decision or "",
        plan.body,
        headers,
        memory_scope,
        generation,
        state.encoder,
    )
    # Started first so it overlaps the embedding and the lookup; a hit or a bypass leaves it.
    epoch = _start_epoch_read(services.cache_epoch, partition, plan.request_id) if store else None
    try:
        vector = await ctx.semantic_vector()
    except Exception as exc:  # the encoder being down must not fail the request
        log.warning("cache skipped for %s: embedding failed: %s", plan.request_id, exc)
        return "bypass"
    if control.lookup and await _answer_from_cache(
        services.cache_lookup, plan, partition, vector, policy.threshold, control
    ):
        return "hit"
    if store:
        plan.cache_write = CacheWrite(
            partition=partition,
            ttl_seconds=policy.ttl_seconds if control.ttl_seconds is None else control.ttl_seconds,
            query_text=ctx.text,
            vector=[float(x) for x in vector],
            epoch=None if epoch is None else await epoch,
        )
    return "miss" if control.lookup else "bypass"


# Epoch reads no request awaits (a hit, a failed embedding): the loop keeps only weak
# references to tasks, so these are held until they finish.
_unawaited_reads: set[asyncio.Task[int | None]] = set()


def _start_epoch_read(
    read: CacheEpoch | None, partition: str, request_id: str
) -> asyncio.Task[int | None] | None:
    """The partition's token, read in a task of its own (None without an epoch call)."""
    if read is None:
        return None
    task = asyncio.create_task(_epoch_token(read, partition, request_id))
    _unawaited_reads.add(task)
    task.add_done_callback(_unawaited_reads.discard)
    return task


async def _epoch_token(read: CacheEpoch, partition: str, request_id: str) -> int | None:
    """None when the store cannot say: the write then goes unguarded, the request unharmed."""
    try:
        return int(await read(partition))
    except Exception as exc:
        log.warning("cache epoch read failed for %s (write unguarded): %s", request_id, exc)
        return None


async def _answer_from_cache(
    lookup: CacheLookup,
    plan: RoutePlan,
    partition: str,
    vector: np.ndarray,
    threshold: float,
    control: CacheControl,
) -> bool:
    """A fresh enough hit becomes the plan's immediate answer; True when it did."""
    try:
        hit = await lookup(partition, vector, threshold)
    except Exception as exc:  # a cache outage is a miss, never a failed request
        log.warning("cache lookup failed for %s: %s", plan.request_id, exc)
        return False
    response = getattr(hit, "response", None)
    if not isinstance(response, dict) or _too_old(getattr(hit, "created_at", None), control.max_age_s):
        return False
    similarity = float(getattr(hit, "similarity", 1.0))
    plan.immediate = ImmediateResponse(
        kind="cache_hit",
        body=refresh_cached_completion(response, plan.selected_model),
        headers={"x-vsr-cache-hit": "true", "x-vsr-cache-similarity": f"{similarity:.4f}"},
        similarity=similarity,
    )
    return True


def _too_old(created_at: Any, max_age_s: float | None) -> bool:
    """Older than the client accepts (`max-age=N`)."""
    return (
        max_age_s is not None and isinstance(created_at, int | float) and time.time() - created_at > max_age_s
    )


TENANT_HEADER = "x-vsr-tenant"


async def _memory_scope(
    services: PipelineServices, plugins: DecisionPlugins | None, plan: RoutePlan, headers: Mapping[str, str]
) -> tuple[str | None, int]:
    """With a `memory` plugin the answer depends on the scope's recalled memories (injected
    after this lookup), so the scope keys the cache: one user's answer never reaches another.
    With a memory store the scope's recovery generation keys it too (read once: plan.recovery_mark,
    which recall reuses); raises MemoryStoreUnavailable when the mark cannot be read."""
    if plugins is None or plugins.memory is None:
        return None, 0
    scope = scope_of(plugins.memory.scope, headers, plan.body, plan.session_id)
    if scope is None:
        return "none", 0
    if services.memories is None:
        return scope.key(), 0
    plan.recovery_mark = await services.memories.mark(scope)
    return scope.key(), plan.recovery_mark.generation


def cache_partition(
    model: str,
    decision: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
    memory_scope: str | None = None,
    memory_generation: int = 0,
    encoder: str | None = None,
) -> str:
    """The partition of a request's entry; `headers` lower-cased (as the pipeline passes them);
    `memory_scope`: the memory plugin's scope key, when the decision has one, and its
    context-recovery generation; `encoder`: the bound encoder's identity (None: the graph's)."""
    messages = body.get("messages") or []
    ask = ask_index(messages)
    partition = f"{model}|{decision}"
    context = [_context_entry(m) for i, m in enumerate(messages) if i != ask and isinstance(m, dict)]
    tools = body.get("tools")
    if context or tools:
        partition += f"|ctx:{_digest([context, tools])}"
    tenant = (headers or {}).get(TENANT_HEADER)
    user = body.get("user")
    if tenant or user:
        partition += f"|tenant:{_digest([tenant or '', user or ''])}"
    if memory_scope is not None:
        partition += memory_partition_suffix(memory_scope, memory_generation)
    question = content_text(messages[ask].get("content")) if ask >= 0 else ""
    negation = polarity_signature(question)
    if negation:
        partition += f"|neg:{negation}"
    if encoder is not None:
        partition += f"|enc:{encoder}"
    return partition


def _context_entry(message: Mapping[str, Any]) -> list[Any]:
    content = message.get("content")
    entry = [
        message.get("role"),
        content_text(content),
        message.get("tool_calls"),
        message.get("tool_call_id"),
    ]
    parts = content if isinstance(content, list) else []
    results = [p for p in parts if isinstance(p, dict) and p.get("type") == TOOL_RESULT_PART]
    if results:  # tool results in a user turn are no content text, yet context (only then: keys stay)
        entry.append(results)
    return entry


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
