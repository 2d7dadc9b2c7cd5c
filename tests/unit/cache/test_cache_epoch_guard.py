"""The response cache's stale-write guard through the real pipeline (in-memory backend).

route() reads the partition's epoch token while it looks the cache up and puts it on the
plan's write; complete() hands it to the store, which drops the write if a flush covered the
partition in between. So an answer the upstream produced before an operator's flush never
re-populates the flushed scope, while every other write lands as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from typing import Any

import numpy as np
import pytest

from app.cache import InMemorySemanticCache
from app.cache.base import CacheScope
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.completion import CompletionServices, complete_request
from app.pipeline.plan import Accounting, CompletionReport, RoutePlan
from app.pipeline.services import CacheCalls, cache_calls
from tests.unit.pipeline.test_pipeline import base_document, chat, completion, config_of

QUESTION = "What is the capital of Australia?"
PARTITION = "small|"  # the default model answers; no decision


async def hashed_embed(texts: list[str]) -> np.ndarray:
    """Deterministic unit vectors: equal texts match exactly, different texts do not."""
    rows = []
    for text in texts:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        row = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
        rows.append(row / np.linalg.norm(row))
    return np.stack(rows)


def pipeline(calls: CacheCalls, **services: Any) -> RouterPipeline:
    """Every request cached (the global store on) on the default model, with the epoch read."""
    doc = base_document(**{"global": {"stores": {"response_cache": {"enabled": True}}}})
    fields: dict[str, Any] = {
        "embed": hashed_embed,
        "cache_lookup": calls.lookup,
        "cache_store": calls.store,
        "cache_epoch": calls.epoch,
    }
    return RouterPipeline(config_of(doc), PipelineServices(**{**fields, **services}), rng=random.Random(0))


async def answer(pipe: RouterPipeline, plan: RoutePlan) -> Accounting:
    """The upstream answered the routed request; complete() writes it."""
    return await pipe.complete(plan, CompletionReport(status=200, model="small", response=completion()))


def is_hit(plan: RoutePlan) -> bool:
    return plan.immediate is not None and plan.immediate.kind == "cache_hit"


async def test_without_a_flush_the_write_lands_and_the_next_lookup_hits() -> None:
    cache = InMemorySemanticCache()
    pipe = pipeline(cache_calls(cache))
    plan = await pipe.route(chat(QUESTION))
    assert plan.response_headers["x-cache-status"] == "miss"
    assert plan.cache_write is not None and plan.cache_write.epoch == 0
    assert (await answer(pipe, plan)).cache_written and len(cache) == 1
    assert is_hit(await pipe.route(chat(QUESTION)))


async def test_an_answer_a_flush_overtook_is_dropped_and_the_next_lookup_misses() -> None:
    cache = InMemorySemanticCache()
    pipe = pipeline(cache_calls(cache))
    plan = await pipe.route(chat(QUESTION))  # looked up (miss) before the flush
    cache.flush(CacheScope(model="small"))  # the operator flushes while the upstream answers
    assert not (await answer(pipe, plan)).cache_written and len(cache) == 0
    again = await pipe.route(chat(QUESTION))
    assert not is_hit(again)  # the pre-flush answer did not come back
    assert again.cache_write is not None and again.cache_write.epoch == 1  # the post-flush token
    assert (await answer(pipe, again)).cache_written  # answers produced after the flush are kept
    assert is_hit(await pipe.route(chat(QUESTION)))


@pytest.mark.parametrize(
    ("scope", "written"),
    [
        (None, False),  # everything
        (CacheScope(model="small", decision=""), False),  # exactly the request's decision
        (CacheScope(model="large"), True),  # another model's scope: not this write's business
        (CacheScope(model="small", decision="cooking_route"), True),  # another decision
    ],
)
async def test_only_a_flush_that_covers_the_partition_drops_the_write(
    scope: CacheScope | None, written: bool
) -> None:
    cache = InMemorySemanticCache()
    pipe = pipeline(cache_calls(cache))
    plan = await pipe.route(chat(QUESTION))
    assert plan.cache_write is not None and plan.cache_write.partition == PARTITION
    cache.flush(scope)
    assert (await answer(pipe, plan)).cache_written is written
    assert is_hit(await pipe.route(chat(QUESTION))) is written


async def test_a_write_only_request_carries_the_token_too() -> None:
    cache = InMemorySemanticCache()
    pipe = pipeline(cache_calls(cache))
    plan = await pipe.route(chat(QUESTION), {"x-vsr-cache-control": "no-cache"})  # no lookup, a write
    assert plan.response_headers["x-cache-status"] == "bypass"
    assert plan.cache_write is not None and plan.cache_write.epoch == 0
    cache.flush()
    assert not (await answer(pipe, plan)).cache_written and len(cache) == 0


async def test_the_front_door_applies_the_guard_to_the_plan_it_received() -> None:
    """In the Ray graph the plan crosses a handle and the front door completes it."""
    cache = InMemorySemanticCache()
    calls = cache_calls(cache)
    plan = await pipeline(calls).route(chat(QUESTION))
    received = RoutePlan.model_validate_json(plan.model_dump_json())
    cache.flush(CacheScope(model="small"))
    report = CompletionReport(status=200, model="small", response=completion())
    accounting = await complete_request(CompletionServices(cache_store=calls.store), received, report)
    assert not accounting.cache_written and len(cache) == 0


async def test_a_failed_epoch_read_leaves_the_write_unguarded_not_the_request_failed() -> None:
    async def store_down(partition: str) -> int:
        raise ConnectionError("redis down")

    cache = InMemorySemanticCache()
    pipe = pipeline(cache_calls(cache), cache_epoch=store_down)
    plan = await pipe.route(chat(QUESTION))
    assert plan.selected_model == "small" and plan.response_headers["x-cache-status"] == "miss"
    assert plan.cache_write is not None and plan.cache_write.epoch is None
    cache.flush()
    assert (await answer(pipe, plan)).cache_written  # no token: written as before epochs
    assert is_hit(await pipe.route(chat(QUESTION)))


async def test_without_an_epoch_call_writes_go_unguarded() -> None:
    cache = InMemorySemanticCache()
    pipe = pipeline(cache_calls(cache), cache_epoch=None)
    plan = await pipe.route(chat(QUESTION))
    assert plan.cache_write is not None and plan.cache_write.epoch is None
    assert (await answer(pipe, plan)).cache_written


class NetworkLike:
    """The cache calls with the loop yields a network store has, and the order they ran in.
    The epoch read can finish only once the lookup has: run one after the other, it would
    have to start after the lookup ended."""

    def __init__(self, calls: CacheCalls) -> None:
        self.calls = calls
        self.events: list[str] = []
        self._lookup_done = asyncio.Event()

    def next_request(self) -> None:
        self.events.clear()
        self._lookup_done.clear()

    async def lookup(self, partition: str, vector: np.ndarray, threshold: float) -> Any:
        self.events.append("lookup:start")
        await asyncio.sleep(0)  # the round trip: other tasks run meanwhile
        hit = await self.calls.lookup(partition, vector, threshold)
        self.events.append("lookup:end")
        self._lookup_done.set()
        return hit

    async def epoch(self, partition: str) -> int:
        self.events.append("epoch:start")
        await self._lookup_done.wait()
        token = await self.calls.epoch(partition)
        self.events.append("epoch:end")
        return token


async def test_the_epoch_read_overlaps_the_lookup_and_a_hit_does_not_wait_for_it() -> None:
    cache = InMemorySemanticCache()
    calls = cache_calls(cache)
    network = NetworkLike(calls)
    pipe = pipeline(calls, cache_lookup=network.lookup, cache_epoch=network.epoch)

    miss = await pipe.route(chat(QUESTION))
    assert miss.cache_write is not None and miss.cache_write.epoch == 0
    assert network.events.index("epoch:start") < network.events.index("lookup:end")  # concurrent
    await answer(pipe, miss)

    network.next_request()
    hit = await pipe.route(chat(QUESTION))
    assert is_hit(hit) and hit.cache_write is None
    assert "epoch:end" not in network.events  # the hit was answered without the token
    while "epoch:end" not in network.events:  # the unawaited read still finishes on its own
        await asyncio.sleep(0)
