"""Phase `memory`: the decision's `memory` plugin before the request goes out: the scope's
relevant memories injected (app/pipeline/memory/plugin.py; only those since the scope's
context-recovery invalidation, app/pipeline/memory/recovery.py), and the write complete()
performs after the answer (`plan.memory_write`). Runs after the other request mutations,
so a `system_prompt` plugin in `replace` mode cannot overwrite the recalled memories."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from app.config.plugins import MemoryPlugin
from app.pipeline.memory.plugin import RECALLED_HEADER, STATUS_HEADER, inject, recall, scope_of
from app.pipeline.memory.store import MemoryStoreUnavailable
from app.pipeline.plan import MemoryWrite, RoutePlan
from app.pipeline.services import PipelineServices
from app.pipeline.signals.base import SignalContext

log = logging.getLogger("svc_sr.memory")


async def memory_step(
    services: PipelineServices,
    plan: RoutePlan,
    policy: MemoryPlugin | None,
    ctx: SignalContext,
    headers: Mapping[str, str],
) -> None:
    store = services.memories
    if policy is None or store is None:
        return
    scope = scope_of(policy.scope, headers, plan.body, plan.session_id)
    if scope is None:  # no identity: nothing to recall, nowhere to remember
        plan.response_headers[STATUS_HEADER] = "no_scope"
        return
    recalled = 0
    if ctx.text and services.embed is not None:
        try:
            if plan.recovery_mark is None or plan.recovery_mark.scope != scope:
                plan.recovery_mark = await store.mark(scope)  # the cache step did not read it
            memories = await recall(
                store,
                scope,
                ctx.query_vector,
                policy.recall_top_k,
                policy.recall_threshold,
                plan.recovery_mark,
            )
        except MemoryStoreUnavailable as exc:
            log.warning("memory recall skipped for %s: %s", plan.request_id, exc)
            plan.response_headers[STATUS_HEADER] = "unavailable"
            memories = []
        if memories:
            inject(plan.body, memories)
            recalled = len(memories)
    plan.memories_recalled = recalled
    plan.response_headers[RECALLED_HEADER] = str(recalled)
    if policy.extract and ctx.text:
        plan.memory_write = MemoryWrite(
            scope=scope,
            turn=ctx.text,
            max_memories=policy.max_memories,
            dedupe_threshold=policy.dedupe_threshold,
            decision=plan.decision,
            generation=plan.recovery_mark.generation if plan.recovery_mark is not None else None,
        )
