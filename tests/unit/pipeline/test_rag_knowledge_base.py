"""The `rag` plugin over knowledge bases (app/pipeline/rag_kb.py, rag.py, phases/rag.py,
management/rag_probe.py): configuration, ranking by cosine, the merge with vector-store chunks
by rank, the chunk metadata (routing_metadata.rag, replay), the cache and the probe."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from app.api.plugins.plugin_bindings import bindings
from app.api.plugins.rag_probe import probe_kbs, rag_probe
from app.config.loader import parse_config
from app.config.plugins import KB_NAME_PATTERN, RagPlugin
from app.pipeline.phases.rag import rag_step
from app.pipeline.plan import Accounting, CompletionReport, RoutePlan
from app.pipeline.plugins import ReplayPolicy
from app.pipeline.rag import CHUNKS_HEADER, STATUS_HEADER, RagChunk, RagUnavailable, ResultCache, run_rag
from app.pipeline.rag_kb import KbRetriever, nearest_entries
from app.pipeline.replay import new_capture, replay_record
from app.pipeline.services import PipelineServices
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.kb import KnowledgeBaseFeed
from app.pipeline.signals.kb_data import KB_NAME, KbEntry
from app.storage.knowledge_bases import KnowledgeBaseService, KnowledgeBaseStore
from tests.unit.storage.test_knowledge_bases import fake_vector

REACTOR_Q = "At what temperature does the reactor run?"
MIXED_Q = "Soup or parking?"
# Entries: (id, text, label, vector); the base keeps them in this order (index 0..3).
ENTRIES = [
    (None, "The reactor runs at 412 kelvin.", "ops", [1.0, 0.0, 0.0]),
    (None, "Lentil soup is served on Tuesdays.", "food", [0.0, 1.0, 0.0]),
    (None, "The reactor is cooled with liquid argon.", "ops", [0.8, 0.6, 0.0]),
    ("park", "Parking is behind building nine.", "site", [0.0, 0.0, 1.0]),
]
VECTORS = {text: vector for _, text, _, vector in ENTRIES} | {
    REACTOR_Q: [1.0, 0.0, 0.0],
    MIXED_Q: [0.0, 1.0, 1.0],
}


class CountingEmbed:
    """The router's encoder, in 3 dimensions: known texts on fixed axes, others hashed."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = []
        for text in texts:
            raw = np.asarray(VECTORS.get(text, fake_vector(text)[:3]), dtype=np.float32)
            rows.append(raw / np.linalg.norm(raw))
        return np.stack(rows)


async def kb_service(embed: CountingEmbed, name: str = "faq") -> KnowledgeBaseService:
    service = KnowledgeBaseService(KnowledgeBaseStore(), embed=embed)
    await service.create(name, None, [KbEntry(id=i, text=t, label=lab) for i, t, lab, _ in ENTRIES])
    await service.drain()
    return service


def feed_of(service: KnowledgeBaseService) -> KnowledgeBaseFeed:
    return KnowledgeBaseFeed(service.store, refresh_s=0.0)


def retriever(service: KnowledgeBaseService, embed: CountingEmbed) -> KbRetriever:
    async def vector(query: str) -> np.ndarray:
        return (await embed([query]))[0]

    return KbRetriever(feed_of(service), vector)


def body(question: str = REACTOR_Q) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": question}]}


def policy(**over: Any) -> RagPlugin:
    return RagPlugin.model_validate({"knowledge_base": "faq", **over})


class FakeStore:
    """A vector store whose chunks score on the hybrid ranker's RRF scale (far below a cosine)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, store_id: str, query: str, top_k: int, ranker: str) -> list[RagChunk]:
        self.calls += 1
        scores = {"s1": 0.033, "s2": 0.032, "s3": 0.031}
        return [
            RagChunk(
                vector_store_id=store_id, file_id=f"file-{c}", chunk_id=c, score=s, text=f"store passage {c}"
            )
            for c, s in scores.items()
        ][:top_k]


# -- configuration --------------------------------------------------------------------------------
def test_a_knowledge_base_is_a_source_and_names_are_checked() -> None:
    assert policy().kb_names == ["faq"] and policy().store_ids == []
    both = RagPlugin(knowledge_base="faq", knowledge_bases=["more", "faq"], vector_store_id="vs")
    assert both.kb_names == ["faq", "more"] and both.store_ids == ["vs"]
    with pytest.raises(ValidationError, match="knowledge_base"):
        RagPlugin.model_validate({"top_k": 2})  # no source at all
    for bad in ("", "has space", "-leading", "x" * 65):
        with pytest.raises(ValidationError):
            RagPlugin.model_validate({"knowledge_bases": [bad]})
    with pytest.raises(ValidationError):
        RagPlugin.model_validate({"knowledge_base": "faq", "knowledge_base_threshold": 1.5})
    assert KB_NAME.pattern == KB_NAME_PATTERN  # the API's name rule, repeated in app/config


def test_a_kb_sourced_rag_decision_parses_and_its_binding_depends_on_the_base() -> None:
    document = {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "m"},
            "models": [{"name": "m", "backend_refs": [{"base_url": "http://127.0.0.1:9"}]}],
        },
        "routing": {
            "decisions": [
                {
                    "name": "faq_qa",
                    "modelRefs": [{"model": "m"}],
                    "plugins": [{"type": "rag", "configuration": {"knowledge_base": "faq", "top_k": 2}}],
                }
            ]
        },
    }
    config = parse_config(document).config
    view = bindings(config, "rag", None, "faq_qa").bindings[0]
    assert [d.name for d in view.dependencies] == ["knowledge_base faq"]
    assert view.reachability == "configured"  # no vector-store service needed
    bad = {**document}
    bad["routing"] = {"decisions": [{**document["routing"]["decisions"][0]}]}
    bad["routing"]["decisions"][0]["plugins"] = [{"type": "rag", "configuration": {"knowledge_base": "a b"}}]
    with pytest.raises(Exception, match="knowledge_base"):
        parse_config(bad)


# -- ranking --------------------------------------------------------------------------------------
async def test_nearest_entries_rank_by_cosine_and_name_the_entry() -> None:
    embed = CountingEmbed()
    base = (await feed_of(await kb_service(embed)).current())["faq"]
    query = (await embed([REACTOR_Q]))[0]
    found = nearest_entries(base, query, top_k=2, threshold=0.0)
    assert [(c.index, c.entry_id, c.label) for c in found] == [(0, "0", "ops"), (2, "2", "ops")]
    assert found[0].score == pytest.approx(1.0, abs=1e-5) and found[1].score == pytest.approx(0.8, abs=1e-5)
    assert found[0].text == ENTRIES[0][1] and found[0].knowledge_base == "faq"
    # the threshold drops the unrelated entries; ties keep the base's order (index 1 before 3)
    assert [c.index for c in nearest_entries(base, query, top_k=4, threshold=0.5)] == [0, 2]
    mixed = (await embed([MIXED_Q]))[0]
    tied = nearest_entries(base, mixed, top_k=3, threshold=0.0)
    assert [(c.index, c.entry_id, c.label) for c in tied] == [
        (1, "1", "food"),
        (3, "park", "site"),
        (2, "2", "ops"),
    ]


async def test_a_base_not_served_is_unavailable() -> None:
    embed = CountingEmbed()
    kbs = retriever(await kb_service(embed), embed)
    with pytest.raises(RagUnavailable, match="missing"):
        await kbs.search(["faq", "missing"], REACTOR_Q, 2, 0.0)
    with pytest.raises(RagUnavailable):
        await KbRetriever(None, None).search(["faq"], REACTOR_Q, 2, 0.0)
    assert await kbs.versions(["missing"]) == (None,)


# -- the plugin -----------------------------------------------------------------------------------
async def test_entries_are_injected_and_named_in_the_metadata() -> None:
    embed = CountingEmbed()
    kbs = retriever(await kb_service(embed), embed)
    request = body()
    usage = await run_rag(None, ResultCache(), policy(top_k=2), request, kbs)
    assert usage.status == "ok" and usage.knowledge_bases == ["faq"] and usage.vector_store_ids == []
    assert [{k: v for k, v in c.items() if k != "score"} for c in usage.chunks] == [
        {"source": "knowledge_base", "knowledge_base": "faq", "entry_id": "0", "index": 0, "label": "ops"},
        {"source": "knowledge_base", "knowledge_base": "faq", "entry_id": "2", "index": 2, "label": "ops"},
    ]
    system = request["messages"][1]["content"]
    assert "412 kelvin" in system and "liquid argon" in system and "knowledge base faq, entry 0" in system
    assert "Lentil" not in system


async def test_store_chunks_and_entries_merge_by_rank() -> None:
    embed = CountingEmbed()
    kbs = retriever(await kb_service(embed), embed)
    store = FakeStore()
    mixed = policy(vector_store_id="vs", top_k=3)
    usage = await run_rag(store, ResultCache(), mixed, body(), kbs)
    # store 1st, entry 1st, store 2nd: the cosines (1.0, 0.8) do not push the RRF scores out
    assert [c.get("chunk_id") or c.get("entry_id") for c in usage.chunks] == ["s1", "0", "s2"]
    assert [c["source"] for c in usage.chunks] == ["vector_store", "knowledge_base", "vector_store"]
    assert store.calls == 1
    # a store's failure makes the whole retrieval unavailable, as with stores alone
    down = await run_rag(None, ResultCache(), mixed, body(), kbs)
    assert down.status == "unavailable" and down.chunks == []


async def test_the_cache_keys_on_the_base_content() -> None:
    embed = CountingEmbed()
    service = await kb_service(embed)
    kbs, cache = retriever(service, embed), ResultCache()
    first = await run_rag(None, cache, policy(top_k=1), body(), kbs)
    second = await run_rag(None, cache, policy(top_k=1), body(), kbs)
    assert not first.cached and second.cached and second.chunks == first.chunks
    changed = [KbEntry(text="The reactor runs at 500 kelvin now.", label="ops")]
    VECTORS[changed[0].text] = [1.0, 0.0, 0.0]
    await service.update("faq", None, changed)
    await service.drain()
    request = body()
    third = await run_rag(None, cache, policy(top_k=1), request, kbs)
    assert not third.cached and "500 kelvin" in request["messages"][1]["content"]


async def test_the_step_uses_the_requests_shared_vector_and_the_replay_names_the_entry() -> None:
    embed = CountingEmbed()
    service = await kb_service(embed)
    embed.calls.clear()
    services = PipelineServices(knowledge_bases=feed_of(service), embed=embed)
    plan = RoutePlan(request_id="r1", requested_model="MoM", auto=True, body=body())
    ctx = SignalContext(plan.body["messages"], embed=embed)
    await ctx.query_vector()  # the signals embedded it
    await rag_step(services, plan, policy(top_k=1), ctx)
    assert embed.calls == [[REACTOR_Q]]  # no second encoder pass for rag
    assert plan.response_headers[CHUNKS_HEADER] == "1" and plan.response_headers[STATUS_HEADER] == "ok"
    assert plan.rag is not None and plan.rag["chunks"][0]["entry_id"] == "0"
    plan.replay = new_capture(ReplayPolicy())
    record = replay_record(plan, CompletionReport(status=200), Accounting())
    assert record["rag"]["chunks"] == plan.rag["chunks"] and record["rag"]["knowledge_bases"] == ["faq"]


async def test_the_step_without_a_store_or_base_is_unavailable_or_503() -> None:
    embed = CountingEmbed()
    plan = RoutePlan(request_id="r2", requested_model="MoM", auto=True, body=body())
    await rag_step(PipelineServices(embed=embed), plan, policy())  # no kb feed in this process
    assert plan.response_headers[STATUS_HEADER] == "unavailable" and plan.body == body()
    services = PipelineServices(knowledge_bases=feed_of(await kb_service(embed)), embed=embed)
    failing = RoutePlan(request_id="r3", requested_model="MoM", auto=True, body=body())
    await rag_step(services, failing, policy(knowledge_base="not_created", on_error="fail"))
    assert failing.immediate is not None and failing.immediate.status == 503


# -- the probe ------------------------------------------------------------------------------------
async def test_the_probe_searches_the_base_and_counts_it() -> None:
    embed = CountingEmbed()
    kbs = probe_kbs(feed_of(await kb_service(embed)), embed)
    result, calls = await rag_probe(policy(top_k=1), body(), None, kbs)
    assert calls == 1 and result["retrieval"] == "knowledge_base"
    assert result["chunks"][0]["knowledge_base"] == "faq" and result["chunks"][0]["label"] == "ops"
    assert "412 kelvin" in result["injected_context"]
    mixed, calls = await rag_probe(policy(vector_store_id="vs", top_k=2), body(), FakeStore(), kbs)
    assert calls == 2 and mixed["retrieval"] == "mixed"
    assert [c["source"] for c in mixed["chunks"]] == ["vector_store", "knowledge_base"]
    assert probe_kbs(None, embed) is None
