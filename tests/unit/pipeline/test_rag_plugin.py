"""The `rag` plugin (app/pipeline/rag.py, phases/rag.py, management/rag_probe.py): token budget,
result cache, a store that is down (skipped, or 503 with on_error: fail), the probe."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from app.api.plugins.rag_probe import rag_probe
from app.common.mgmt_errors import MgmtError
from app.config.plugins import RagPlugin
from app.pipeline.compression import count_texts
from app.pipeline.phases.rag import rag_step
from app.pipeline.plan import RoutePlan
from app.pipeline.rag import CHUNKS_HEADER, STATUS_HEADER, RagChunk, ResultCache, run_rag
from app.pipeline.services import PipelineServices

PASSAGES = {
    "c1": "The Zorblax reactor runs at 412 kelvin during the night shift.",
    "c2": "Cafeteria hours are from eight to five on weekdays.",
    "c3": " ".join(["filler"] * 300),  # far over a small budget
}


class FakeStore:
    def __init__(self, fail: bool = False, delay_s: float = 0.0) -> None:
        self.calls: list[tuple[str, str, int, str]] = []
        self.fail = fail
        self.delay_s = delay_s

    async def __call__(self, store_id: str, query: str, top_k: int, ranker: str) -> list[RagChunk]:
        self.calls.append((store_id, query, top_k, ranker))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail:
            raise ConnectionError("vector store down")
        scores = {"c1": 0.9, "c3": 0.8, "c2": 0.1}
        return [
            RagChunk(
                vector_store_id=store_id, file_id=f"file-{cid}", chunk_id=cid, score=s, text=PASSAGES[cid]
            )
            for cid, s in scores.items()
        ][:top_k]


def body(question: str = "At what temperature does the Zorblax reactor run?") -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": question}]}


def policy(**over: Any) -> RagPlugin:
    return RagPlugin.model_validate({"vector_store_id": "vs_1", **over})


def test_a_store_is_required_and_ids_merge() -> None:
    with pytest.raises(ValidationError):
        RagPlugin.model_validate({"top_k": 2})
    assert RagPlugin(vector_store_id="a", vector_store_ids=["b", "a"]).store_ids == ["a", "b"]


async def test_passages_go_in_as_one_system_message_within_the_budget() -> None:
    store, request = FakeStore(), body()
    budget = count_texts([PASSAGES["c1"]])[0] + count_texts([PASSAGES["c2"]])[0] + 2
    usage = await run_rag(store, ResultCache(), policy(max_context_tokens=budget, top_k=3), request)
    # c3 (second best) does not fit the budget; c2 after it still does
    assert [c["chunk_id"] for c in usage.chunks] == ["c1", "c2"]
    assert usage.tokens <= budget and usage.status == "ok" and not usage.cached
    messages = request["messages"]
    assert [m["role"] for m in messages] == ["system", "system", "user"]
    assert "412 kelvin" in messages[1]["content"] and "filler" not in messages[1]["content"]


async def test_context_block_goes_into_the_last_user_message() -> None:
    request = body()
    await run_rag(FakeStore(), ResultCache(), policy(inject_as="context_block", top_k=1), request)
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert (
        "<context>" in request["messages"][1]["content"] and "412 kelvin" in request["messages"][1]["content"]
    )


async def test_the_same_question_is_a_cache_hit_and_other_settings_are_not() -> None:
    store, cache = FakeStore(), ResultCache()
    first = await run_rag(store, cache, policy(), body())
    second = await run_rag(store, cache, policy(), body())
    other = await run_rag(store, cache, policy(top_k=1), body())
    assert not first.cached and second.cached and not other.cached
    assert len(store.calls) == 2 and second.chunks == first.chunks
    uncached = await run_rag(store, ResultCache(), policy(cache_ttl_seconds=0), body())
    assert not uncached.cached


def test_the_cache_expires_and_is_bounded() -> None:
    now = [0.0]
    cache = ResultCache(size=2, clock=lambda: now[0])
    cache.put(("a",), [], 10)
    now[0] = 11
    assert cache.get(("a",)) is None
    for key in ("b", "c", "d"):
        cache.put((key,), [], 10)
    assert len(cache) == 2 and cache.get(("b",)) is None and cache.get(("d",)) == []


@pytest.mark.slow
@pytest.mark.parametrize("store", [FakeStore(fail=True), FakeStore(delay_s=5.0)], ids=["down", "slow"])
async def test_a_store_down_or_slow_is_skipped_and_the_request_goes_on(
    store: FakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.pipeline.rag.RETRIEVE_TIMEOUT_S", 0.2)
    plan = RoutePlan(request_id="r1", requested_model="MoM", auto=True, body=body())
    await rag_step(PipelineServices(retrieve=store), plan, policy())
    assert plan.immediate is None and plan.body == body()
    assert plan.response_headers[STATUS_HEADER] == "unavailable"
    assert plan.response_headers[CHUNKS_HEADER] == "0"
    assert plan.rag is not None and plan.rag["status"] == "unavailable" and plan.rag["chunks"] == []


async def test_on_error_fail_answers_the_spec_503() -> None:
    plan = RoutePlan(request_id="r2", requested_model="MoM", auto=True, body=body())
    await rag_step(PipelineServices(retrieve=FakeStore(fail=True)), plan, policy(on_error="fail"))
    assert plan.immediate is not None and plan.immediate.status == 503
    assert plan.reason_code == "rag_unavailable"
    error = plan.immediate.body["error"]
    assert error["type"] == "service_unavailable_error" and error["code"] == "rag_unavailable"
    assert set(error) >= {"message", "type", "code"}


async def test_the_step_records_chunks_in_metadata_and_headers() -> None:
    services = PipelineServices(retrieve=FakeStore())
    plan = RoutePlan(request_id="r3", requested_model="MoM", auto=True, body=body())
    await rag_step(services, plan, policy(top_k=1))
    assert plan.rag is not None and plan.rag["chunks"][0]["chunk_id"] == "c1"
    assert plan.response_headers[CHUNKS_HEADER] == "1" and plan.response_headers[STATUS_HEADER] == "ok"
    again = RoutePlan(request_id="r4", requested_model="MoM", auto=True, body=body())
    await rag_step(services, again, policy(top_k=1))
    assert again.response_headers[STATUS_HEADER] == "cached" and again.rag is not None and again.rag["cached"]


async def test_the_probe_searches_every_time_and_counts_calls() -> None:
    store = FakeStore()
    for _ in range(2):  # no result cache: each probe searches
        result, calls = await rag_probe(policy(vector_store_ids=["vs_2"], top_k=1), body(), store)
        assert calls == 2 and result["retrieval"] == "vector_store"
        assert result["chunks"][0]["chunk_id"] == "c1" and "412 kelvin" in result["injected_context"]
    assert len(store.calls) == 4
    with pytest.raises(MgmtError) as down:
        await rag_probe(policy(), body(), FakeStore(fail=True))
    assert down.value.status == 503
    with pytest.raises(MgmtError) as none:
        await rag_probe(policy(), body(), None)
    assert none.value.status == 503


async def test_the_replay_record_names_the_chunks() -> None:
    from app.pipeline.plan import Accounting, CompletionReport
    from app.pipeline.plugins import ReplayPolicy
    from app.pipeline.replay import new_capture, replay_record

    plan = RoutePlan(request_id="r5", requested_model="MoM", auto=True, body=body())
    await rag_step(PipelineServices(retrieve=FakeStore()), plan, policy(top_k=1))
    plan.replay = new_capture(ReplayPolicy())
    record = replay_record(plan, CompletionReport(status=200), Accounting())
    assert record["rag"]["chunks"][0]["chunk_id"] == "c1" and record["rag"]["vector_store_ids"] == ["vs_1"]


async def test_a_configuration_that_retrieves_from_a_store_searches_it_once_while_it_loads() -> None:
    """The warm-up starts a store service that starts on its first call (one machine's Storage)
    before a request needs it; a store that is down fails nothing; no store, no call."""
    from app.pipeline.rag import warm_retrieval

    store = FakeStore()
    await warm_retrieval(store, [RagPlugin(knowledge_base="faq"), policy(vector_store_ids=["vs_2"])])
    assert [call[0] for call in store.calls] == ["vs_1"]
    down = FakeStore(fail=True)
    await warm_retrieval(down, [policy()])  # logged, not raised
    assert len(down.calls) == 1
    none = FakeStore()
    await warm_retrieval(none, [RagPlugin(knowledge_base="faq")])
    assert none.calls == []


async def test_the_pipeline_warms_its_rag_stores_when_a_configuration_loads() -> None:
    from app.config.loader import parse_config
    from app.pipeline.pipeline import RouterPipeline

    rag = {"type": "rag", "configuration": {"vector_store_id": "vs_9", "top_k": 1}}
    document = {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "m"},
            "models": [{"name": "m", "backend_refs": [{"base_url": "http://127.0.0.1:9"}]}],
        },
        "routing": {"decisions": [{"name": "qa", "modelRefs": [{"model": "m"}], "plugins": [rag]}]},
    }
    store = FakeStore()
    pipeline = RouterPipeline(parse_config(document).config, PipelineServices(retrieve=store))
    await pipeline.warm_up()
    assert [call[0] for call in store.calls] == ["vs_9"]
