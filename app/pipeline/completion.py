"""complete(plan, report) -> Accounting: what happens after an answer was sent.

Usage, cost (app/accounting/cost.py), TTFT/TPOT, the completion
metrics (docs/envoy.md), the `router_replay` record and the response-cache write (with the epoch token
route() read, so an answer a flush overtook is dropped, not stored). It needs only the plan,
what the front door observed and a few services, so it runs where the answer is: in the
Ray graph the front door (Ingress, ext_proc sidecar) completes requests itself, and the
answer body never travels to a Router replica. In-process, RouterPipeline.complete calls it.

Never raises: accounting must not break an answer the client already has.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from app.accounting.cost import compute_cost
from app.common import tracing
from app.pipeline.memory.plugin import MemoryTasks, remember
from app.pipeline.memory.store import MemorySource, MemoryStore
from app.pipeline.metrics import RouterMetrics
from app.pipeline.plan import Accounting, CacheWrite, CompletionReport, RoutePlan
from app.pipeline.replay import replay_record

log = logging.getLogger("svc_sr.pipeline")


class CacheStore(Protocol):
    """The response cache's write (app/cache/base.py `store`): whether the entry was written.

    epoch: the partition's token read at route(); a write that a flush has overtaken since is
    dropped (False). Callers pass it only when they have one."""

    async def __call__(
        self,
        partition: str,
        vector: np.ndarray,
        response: dict[str, Any],
        ttl_seconds: int | None,
        epoch: int | None = None,
    ) -> bool: ...


@dataclass
class CompletionServices:
    """metrics: where the completion metrics go. cache_store: the response cache's write
    (None: no writes). embed: re-encodes the cache query when a plan carries no vector.
    record_replay: receives replay records, called inline. memories: where the `memory` plugin
    keeps what it remembers; memory_tasks: its background writes."""

    metrics: RouterMetrics = field(default_factory=RouterMetrics)
    cache_store: CacheStore | None = None
    embed: Callable[[list[str]], Awaitable[np.ndarray]] | None = None
    record_replay: Callable[[dict[str, Any]], Any] | None = None
    # long-term memories (the `memory` plugin): None, the plugin neither recalls nor remembers
    memories: MemoryStore | None = None
    memory_tasks: MemoryTasks = field(default_factory=MemoryTasks)


async def complete_request(
    services: CompletionServices, plan: RoutePlan, report: CompletionReport
) -> Accounting:
    """TPOT: streams (total - ttft) / max(completion_tokens - 1, 1) (the first token's time
    is TTFT); non-streaming total / completion_tokens (no first-token time)."""
    model = report.model or plan.selected_model
    # under the front door's request span (plan.trace_context), in whichever process completes
    with tracing.span(
        "svc_sr.complete", parent=plan.trace_context, attributes={"http.status": report.status}
    ):
        try:
            accounting = await _account(services, plan, report, model)
        except Exception:
            log.exception("complete() failed for request %s", plan.request_id)
            accounting = Accounting(model=model)
    services.metrics.on_complete(plan, report, accounting)
    _remember_in_background(services, plan, report)
    if plan.replay is not None and services.record_replay is not None:
        try:
            services.record_replay(replay_record(plan, report, accounting))
        except Exception:
            log.exception("replay record failed for request %s", plan.request_id)
    return accounting


def _remember_in_background(services: CompletionServices, plan: RoutePlan, report: CompletionReport) -> None:
    """The `memory` plugin's write: after an answered exchange, off the answer's path."""
    write = plan.memory_write
    if write is None or services.memories is None or services.embed is None or report.status != 200:
        return
    replay_id = plan.replay.replay_id if plan.replay is not None else None
    work = remember(
        services.memories,
        services.embed,
        write.scope,
        write.turn,
        max_memories=write.max_memories,
        dedupe_threshold=write.dedupe_threshold,
        source=MemorySource(request_id=plan.request_id, replay_id=replay_id, decision=write.decision),
        generation=write.generation,
    )
    services.memory_tasks.start(work, plan.request_id)


async def _account(
    services: CompletionServices, plan: RoutePlan, report: CompletionReport, model: str | None
) -> Accounting:
    pricing = plan.pricing.get(model or "")
    currency = getattr(pricing, "currency", None) or "USD"
    if plan.immediate is not None:
        return Accounting(model=model, currency=currency, cached=plan.immediate.kind == "cache_hit")
    response = report.response if isinstance(report.response, dict) else None
    usage = _usage(response)
    cost = 0.0
    if pricing is not None and usage:
        cost = float(compute_cost(response.get("usage") if response else None, pricing))
    ttft = _non_negative(report.ttft_s)
    total = _non_negative(report.total_s)
    completion_tokens = usage.get("completion_tokens", 0)
    tpot = None
    if total is not None and completion_tokens > 0:
        if report.stream and ttft is not None:
            tpot = max(total - ttft, 0.0) / max(completion_tokens - 1, 1)
        elif not report.stream:
            tpot = total / completion_tokens
    accounting = Accounting(model=model, usage=usage, cost=cost, currency=currency, ttft_s=ttft, tpot_s=tpot)
    accounting.cache_written = await _cache_write(services, plan, report, response, model)
    return accounting


async def _cache_write(
    services: CompletionServices,
    plan: RoutePlan,
    report: CompletionReport,
    response: dict[str, Any] | None,
    model: str | None,
) -> bool:
    write = plan.cache_write
    store = services.cache_store
    flagged = bool((report.response_checks or {}).get("flagged"))  # never replay a flagged answer
    if write is None or store is None or report.status != 200 or response is None or flagged:
        return False
    if report.stream and not report.stream_finished:
        return False  # an aborted stream is a partial answer
    if model != plan.selected_model:
        return False  # a fallback model answered: not what this partition promises
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    with tracing.span("svc_sr.cache.store") as span:
        vector = await _write_vector(services, write)
        if vector is None:
            return False
        try:
            if write.epoch is None:  # no token (no epoch call, or its read failed): unguarded
                stored = bool(await store(write.partition, vector, response, write.ttl_seconds))
            else:
                stored = bool(
                    await store(write.partition, vector, response, write.ttl_seconds, epoch=write.epoch)
                )
        except Exception as exc:
            log.warning("cache write failed for %s: %s", plan.request_id, exc)
            tracing.fail(span, "cache write failed")
            return False
        tracing.set_attributes(span, {"svc_sr.cache.stored": stored})
        return stored


async def _write_vector(services: CompletionServices, write: CacheWrite) -> np.ndarray | None:
    """The route-time vector, else a fresh encoder pass; None when neither is at hand."""
    if write.vector:
        return np.asarray(write.vector, dtype=np.float32)
    if services.embed is not None:
        return np.asarray(await services.embed([write.query_text]), dtype=np.float32).reshape(-1)
    return None


def _usage(response: Mapping[str, Any] | None) -> dict[str, int]:
    raw = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(raw, Mapping):
        return {}
    usage: dict[str, int] = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = raw.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            usage[key] = int(value)
    details = raw.get("prompt_tokens_details")
    if isinstance(details, Mapping):
        cached = details.get("cached_tokens")
        if isinstance(cached, int) and not isinstance(cached, bool) and cached >= 0:
            usage["cached_tokens"] = cached
    if usage and "total_tokens" not in usage:
        usage["total_tokens"] = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    return usage


def _non_negative(value: float | None) -> float | None:
    if value is None or value != value or value < 0:
        return None
    return float(value)
