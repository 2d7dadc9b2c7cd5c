"""The `embedding` binding to a sentence encoder of the user's own (docs/model-runtime.md
"Bindings to your own models"), without Ray or workers: the embedding rules and the response
cache read the bound encoder's vectors (the graph's MiniLM is not asked; the learned heads keep
reading it), the inventory names the bound encoder, the cache partition
is keyed by the encoder's identity so a swap to another encoder (of another dimension) starts a
fresh partition, a store that cannot take a vector's dimension degrades to a miss, and a
directory that is no sentence encoder is refused at validation naming the path."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.cache.base import CacheUnavailable, VectorDimensionMismatch
from app.cache.calls import AsyncCache
from app.cache.memory import InMemorySemanticCache
from app.config.errors import ConfigError
from app.config.loader import parse_config
from app.management.inventory import LocalInventory
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.plan import CompletionReport, SignalMatch
from app.pipeline.services import cache_calls
from app.srun.bound_models import bound_model_issues
from app.srun.hosting import ManagedRuntimes
from app.srun.settings import SrunEnvironment
from app.srun.worker_embedder import card_identity, vectors_of
from tests.unit.srun.test_runtime_bindings import FakeEmbed, chat, serve_with

BINDING = "global.model_catalog.embeddings.semantic.deployment"


class EncoderWorker:
    """A svc-srun worker serving one sentence encoder: a word-hashing bag of words of `dim`
    dimensions (texts sharing words are near, a repeated text is the same vector), its card
    carrying `digest`."""

    def __init__(self, dim: int, digest: str) -> None:
        self.dim = dim
        self.digest = digest
        self.texts: list[str] = []

    def vector(self, text: str) -> list[float]:
        v = np.zeros(self.dim, dtype=np.float32)
        for word in text.lower().split():
            seed = int.from_bytes(hashlib.sha256(f"{self.digest}:{word}".encode()).digest()[:4], "big")
            v += np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        return [float(x) for x in v / (np.linalg.norm(v) or 1.0)]

    async def call(
        self, method: str, path: str, body: Any = None, *, surface: str, deadline_s: float | None = None
    ) -> dict[str, Any]:
        assert (path, surface) == ("/v1/embeddings", "embeddings")
        self.texts += body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": self.vector(t)}
            for i, t in enumerate(body["input"])
        ]
        return {"object": "list", "model": body["model"], "data": data, "usage": {"prompt_tokens": 1}}

    async def models(self) -> dict[str, Any]:
        card = {
            "name": "encoder",
            "served_name": "/models/encoder",
            "task": "embeddings",
            "digest": self.digest,
        }
        return {"object": "list", "data": [card]}


def document(artifact: str = "/models/encoder", cache: bool = True) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "general"},
            "models": [
                {"name": "general", "backend_refs": [{"endpoint": "127.0.0.1:8000"}]},
                {"name": "billing-model", "backend_refs": [{"endpoint": "127.0.0.1:8001"}]},
            ],
        },
        "routing": {
            "signals": {
                "embeddings": [
                    {
                        "name": "refunds",
                        "candidates": ["refund my payment", "charged twice refund"],
                        "threshold": 0.6,
                    }
                ]
            },
            "decisions": [
                {
                    "name": "billing",
                    "priority": 10,
                    "rules": {"type": "embedding", "name": "refunds"},
                    "modelRefs": [{"model": "billing-model"}],
                    "plugins": [{"type": "semantic-cache", "configuration": {"enabled": True}}],
                }
            ],
        },
        "model_deployments": {"encoder": {"artifact": artifact}},
        "global": {
            "model_catalog": {"embeddings": {"semantic": {"deployment": "encoder"}}},
            "stores": {"response_cache": {"enabled": cache, "similarity_threshold": 0.95}},
        },
    }


def pipeline(
    tmp_path: Path, worker: EncoderWorker, cache: InMemorySemanticCache | None = None
) -> tuple[RouterPipeline, FakeEmbed]:
    config = parse_config(document()).config
    runtimes = ManagedRuntimes.from_config(config, env=SrunEnvironment(command=["svc-srun"], dir=tmp_path))
    serve_with(runtimes, worker)  # type: ignore[arg-type]  # never started: the fake answers
    graph = FakeEmbed()  # raises when asked: nothing here reads the graph's MiniLM
    services = PipelineServices(embed=graph, bound_workers=runtimes)
    if cache is not None:
        calls = cache_calls(cache)
        services.cache_lookup, services.cache_store, services.cache_epoch = calls
    return RouterPipeline(config, services, rng=random.Random(0)), graph


def answer(text: str) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "model": "billing-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }


async def test_the_embedding_rules_read_the_bound_encoder_and_its_candidates(tmp_path):
    worker = EncoderWorker(dim=24, digest="sha256:" + "ab" * 32)
    pipe, graph = pipeline(tmp_path, worker)
    await pipe.warm_up()  # the candidates are embedded by the bound encoder at activation
    assert worker.texts == ["refund my payment", "charged twice refund"]
    plan = await pipe.route(chat("please refund my payment"))
    assert (plan.decision, plan.selected_model) == ("billing", "billing-model")
    match = next(m for m in plan.signals.matches if m.name == "refunds")
    assert match.matched and match.detail["best_candidate"] == "refund my payment"
    other = await pipe.route(chat("what is the weather in paris"))
    assert other.decision in (None, "") and other.selected_model == "general"
    assert graph.calls == 0  # the heads' MiniLM was never asked


async def test_the_cache_partition_is_the_encoders_and_a_swap_starts_a_fresh_one(tmp_path):
    store = InMemorySemanticCache()
    first = EncoderWorker(dim=24, digest="sha256:" + "ab" * 32)
    pipe, _ = pipeline(tmp_path / "a", first, store)
    await pipe.warm_up()
    miss = await pipe.route(chat("please refund my payment"))
    assert miss.response_headers["x-cache-status"] == "miss" and miss.cache_write is not None
    assert miss.cache_write.partition.endswith("|enc:sha256:" + "ab" * 8)
    assert len(miss.cache_write.vector) == 24  # the bound encoder's vector, not MiniLM's
    await pipe.complete(
        miss, CompletionReport(status=200, model="billing-model", response=answer("refunded"))
    )
    hit = await pipe.route(chat("please refund my payment"))
    assert hit.immediate is not None and hit.immediate.kind == "cache_hit"
    assert hit.immediate.body["choices"][0]["message"]["content"] == "refunded"
    # another encoder (another digest, 40 dimensions) over the same store: a fresh partition
    second = EncoderWorker(dim=40, digest="sha256:" + "cd" * 32)
    swapped, _ = pipeline(tmp_path / "b", second, store)
    await swapped.warm_up()
    fresh = await swapped.route(chat("please refund my payment"))
    assert fresh.immediate is None and fresh.response_headers["x-cache-status"] == "miss"
    assert fresh.cache_write is not None and fresh.cache_write.partition.endswith("|enc:sha256:" + "cd" * 8)
    await swapped.complete(
        fresh, CompletionReport(status=200, model="billing-model", response=answer("refunded twice"))
    )
    again = await swapped.route(chat("please refund my payment"))
    assert again.immediate is not None
    assert again.immediate.body["choices"][0]["message"]["content"] == "refunded twice"
    assert store.stats().partitions == 2


async def test_a_store_that_cannot_take_the_dimension_degrades_to_a_counted_miss():
    store = InMemorySemanticCache()
    store.store("p", np.ones(8, dtype=np.float32), answer("eight"))
    with pytest.raises(VectorDimensionMismatch) as caught:  # the partition holds 8-d vectors
        store.lookup("p", np.ones(16, dtype=np.float32), 0.9)
    assert isinstance(caught.value, CacheUnavailable) and isinstance(caught.value, ValueError)
    counted: list[str] = []
    cache = AsyncCache(store, on_unavailable=lambda operation, exc: counted.append(operation))
    assert await cache.lookup("p", np.ones(16, dtype=np.float32), 0.9) is None
    assert await cache.store("p", np.ones(16, dtype=np.float32), answer("sixteen")) is False
    assert counted == ["lookup", "store"]


def test_the_worker_answer_and_card_are_read_strictly():
    good = {"data": [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1.0, 0.0]}]}
    assert vectors_of(good, 2, "e").tolist() == [[1.0, 0.0], [0.0, 1.0]]  # by index
    for bad in ({"data": []}, {"data": [{"index": 0, "error": {"code": "x"}}]}, None):
        with pytest.raises(RuntimeError):
            vectors_of(bad, 1, "e")
    assert card_identity({"digest": "sha256:" + "0f" * 32, "name": "x"}) == "sha256:" + "0f" * 8
    assert card_identity({"name": "minilm-embedding", "revision": "v1"}) == "minilm-embedding@v1"


def test_a_built_in_that_answers_no_vectors_is_refused_at_load():
    doc = document()
    doc["model_deployments"]["encoder"] = {"artifact": "domain-classifier"}
    with pytest.raises(ConfigError) as caught:
        parse_config(doc)
    assert BINDING in str(caught.value) and "reads embeddings" in str(caught.value)
    labels = document()
    labels["global"]["model_catalog"]["embeddings"]["semantic"]["labels"] = {"a": "b"}
    with pytest.raises(ConfigError):
        parse_config(labels)


@pytest.mark.slow  # tiny models: torch and transformers load
def test_a_directory_that_is_no_sentence_encoder_is_refused_at_validate(tmp_path):
    from tests.fakes.tiny_models import write_tiny_sentence_encoder, write_tiny_sequence_classifier

    encoder = write_tiny_sentence_encoder(tmp_path / "encoder", dim=16)
    classifier = write_tiny_sequence_classifier(tmp_path / "intents", ["a", "b"])
    assert bound_model_issues(parse_config(document(str(encoder))).config) == []
    found = {i.path: i.message for i in bound_model_issues(parse_config(document(str(classifier))).config)}
    assert list(found) == [BINDING]
    assert f"the model at {classifier} answers label_probabilities" in found[BINDING]
    assert "the embedding binding reads embeddings" in found[BINDING]


async def test_the_inventory_names_the_bound_encoder():
    config = parse_config(document()).config
    inventory = LocalInventory(config=lambda: config)
    (encoder,) = await inventory.embedding_models()
    assert (encoder["binding"], encoder["provider"], encoder["deployment"]) == (
        "embedding",
        "model_runtime",
        "encoder",
    )
    assert (encoder["task"], encoder["name"]) == ("embeddings", "/models/encoder")
    models = {m["binding"]: m for m in await inventory.models()}
    assert models["embedding"] == encoder
    unbound = parse_config(document()).config.model_copy()
    unbound.global_.model_catalog.pop("embeddings")
    (graph,) = await LocalInventory(config=lambda: unbound).embedding_models()
    assert (graph["provider"], graph["name"]) == ("svc-sr", "minilm-embedding")


class GraphEncoder:
    """The graph's MiniLM as the heads see it: 384-d vectors, calls counted."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def __call__(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return np.full((len(texts), 384), 384**-0.5, dtype=np.float32)


class HeadOnQueryVector:
    """A learned family as the graph hosts it: it reads the request's query vector."""

    family = "domain"

    def rule_names(self) -> list[str]:
        return ["math"]

    async def warm_up(self) -> None:
        return None

    async def evaluate(self, ctx: Any, names: frozenset[str]) -> list[SignalMatch]:
        width = len(await ctx.query_vector())
        return [
            SignalMatch(type="domain", name="math", matched=False, confidence=0.0, detail={"width": width})
        ]


async def test_the_learned_heads_keep_the_graphs_vector(tmp_path):
    worker = EncoderWorker(dim=24, digest="sha256:" + "ab" * 32)
    doc = document(cache=False)
    doc["routing"]["signals"]["domains"] = [{"name": "math"}]
    doc["routing"]["decisions"].append(
        {
            "name": "math",
            "priority": 5,
            "rules": {"type": "domain", "name": "math"},
            "modelRefs": [{"model": "general"}],
        }
    )
    config = parse_config(doc).config
    runtimes = ManagedRuntimes.from_config(config, env=SrunEnvironment(command=["svc-srun"], dir=tmp_path))
    serve_with(runtimes, worker)  # type: ignore[arg-type]
    graph = GraphEncoder()
    services = PipelineServices(
        embed=graph,
        bound_workers=runtimes,
        evaluators={"domain": lambda config, services: HeadOnQueryVector()},
    )
    pipe = RouterPipeline(config, services, rng=random.Random(0))
    await pipe.warm_up()
    plan = await pipe.route(chat("please refund my payment"))
    head = next(m for m in plan.signals.matches if m.type == "domain")
    assert head.detail == {"width": 384} and graph.texts == ["please refund my payment"]  # MiniLM's
    rule = next(m for m in plan.signals.matches if m.type == "embedding")
    assert rule.matched and worker.texts[-1] == "please refund my payment"  # the bound encoder's
    assert plan.decision == "billing"


class CountingEncoder:
    """A bound encoder whose identity the test sets; it counts the texts it embeds."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.texts: list[str] = []

    async def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return np.ones((len(texts), 8), dtype=np.float32) / np.sqrt(8)


async def test_a_reload_with_the_same_encoder_embeds_no_phrase_again():
    """The bound encoder's phrase vectors outlive a config version, per encoder digest: the same
    digest embeds nothing again, another digest (or an identity that is a name only) embeds all."""
    from app.pipeline.signals.embedding import EmbeddingEvaluator

    config = parse_config(document()).config
    caches: dict[str, dict[str, np.ndarray]] = {}
    digest = "sha256:" + "ab" * 8
    first = CountingEncoder(digest)
    await EmbeddingEvaluator.bound(config, first, caches).warm_up()
    assert first.texts == ["refund my payment", "charged twice refund"]
    same = CountingEncoder(digest)
    await EmbeddingEvaluator.bound(config, same, caches).warm_up()
    assert same.texts == []
    other = CountingEncoder("sha256:" + "cd" * 8)
    await EmbeddingEvaluator.bound(config, other, caches).warm_up()
    assert len(other.texts) == 2
    for _ in range(2):  # a name may stand for another model after a swap: never shared
        named = CountingEncoder("deployment:encoder")
        await EmbeddingEvaluator.bound(config, named, caches).warm_up()
        assert len(named.texts) == 2
    assert set(caches) == {digest, "sha256:" + "cd" * 8}
