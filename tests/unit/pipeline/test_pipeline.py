"""RouterPipeline end to end (no Ray): real MiniLM encoder, real in-memory semantic cache."""

from __future__ import annotations

import asyncio
import copy
import random
import time
from typing import Any

import numpy as np
import pytest

from app.cache import InMemorySemanticCache
from app.common.errors import SvcError
from app.config.document import RouterConfig
from app.pipeline import (
    ModelNotFoundError,
    NoRouteError,
    PipelineServices,
    RouterPipeline,
    cache_calls,
    cache_partition,
)
from app.pipeline.plan import CompletionReport, SignalMatch
from app.pipeline.signals.base import SignalContext
from app.runtime.encoder import shared_encoder

BREAD = "How do I bake a loaf of sourdough bread?"
BREAD_PARAPHRASE = "What's the way to bake a sourdough bread loaf?"


@pytest.fixture(scope="module")
def encoder():
    enc = shared_encoder()
    enc.warm_up()
    return enc


class CountingEmbed:
    def __init__(self, encoder) -> None:
        self.encoder = encoder
        self.calls: list[list[str]] = []

    async def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return await asyncio.to_thread(self.encoder.encode, list(texts))


def base_document(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "providers": {
            "defaults": {
                "default_model": "small",
                "default_reasoning_effort": "high",
                "reasoning_families": {
                    "qwen3": {"type": "chat_template_kwargs", "parameter": "enable_thinking"}
                },
            },
            "models": [
                {
                    "name": "small",
                    "backend_refs": [{"endpoint": "127.0.0.1:8000"}],
                    "pricing": {"currency": "USD", "prompt_per_1m": 1.0, "completion_per_1m": 2.0},
                },
                {
                    "name": "large",
                    "reasoning_family": "qwen3",
                    "provider_model_id": "org/large",
                    "backend_refs": [{"base_url": "http://127.0.0.1:9000/v1"}],
                    "pricing": {"currency": "EUR", "prompt_per_1m": 10.0, "completion_per_1m": 30.0},
                },
                {"name": "backup", "backend_refs": [{"endpoint": "127.0.0.1:8001"}]},
            ],
        },
        "routing": {
            "strategy": "priority",
            "signals": {
                "keywords": [
                    {
                        "name": "urgent",
                        "operator": "OR",
                        "keywords": ["urgent", "asap", "immediately", "now"],
                    },
                    {"name": "unused", "keywords": ["never referenced"]},
                    {"name": "blocked_words", "keywords": ["forbidden"]},
                ],
                "embeddings": [
                    {
                        "name": "cooking",
                        "threshold": 0.55,
                        "candidates": [
                            "how do I bake bread",
                            "recipe for sourdough",
                            "cooking pasta at home",
                        ],
                    },
                ],
                "context": [{"name": "long_prompt", "min_tokens": 2000}],
            },
            "decisions": [
                {
                    "name": "blocked",
                    "priority": 1000,
                    "rules": {"type": "keyword", "name": "blocked_words"},
                    "plugins": [
                        {"type": "fast_response", "configuration": {"message": "I can't help with that."}}
                    ],
                },
                {
                    "name": "urgent_route",
                    "priority": 100,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "urgent"}]},
                    "modelRefs": [{"model": "large", "use_reasoning": True}, {"model": "backup"}],
                    "plugins": [
                        {"type": "system_prompt", "configuration": {"system_prompt": "Be quick."}},
                        {
                            "type": "header_mutation",
                            "configuration": {
                                "add": [{"name": "X-Route-Source", "value": "svc-sr"}],
                                "delete": ["x-debug"],
                            },
                        },
                        {"type": "request_params", "configuration": {"max_tokens_limit": 256}},
                    ],
                },
                {
                    "name": "cooking_route",
                    "priority": 50,
                    "rules": {"operator": "AND", "conditions": [{"type": "embedding", "name": "cooking"}]},
                    "modelRefs": [{"model": "small"}],
                    "plugins": [
                        {
                            "type": "semantic-cache",
                            "configuration": {"enabled": True, "similarity_threshold": 0.85},
                        }
                    ],
                },
                {
                    "name": "long_route",
                    "priority": 10,
                    "rules": {"type": "context", "name": "long_prompt"},
                    "modelRefs": [{"model": "large", "use_reasoning": False}],
                },
            ],
        },
    }
    for key, value in overrides.items():
        doc[key] = value
    return doc


def config_of(doc: dict[str, Any]) -> RouterConfig:
    return RouterConfig.model_validate(doc)


def pipeline_of(
    doc: dict[str, Any],
    encoder,
    cache: InMemorySemanticCache | None = None,
    embed: CountingEmbed | None = None,
    **services: Any,
) -> RouterPipeline:
    cache = cache if cache is not None else InMemorySemanticCache()
    calls = cache_calls(cache)
    svc = PipelineServices(
        embed=embed or CountingEmbed(encoder),
        cache_lookup=calls.lookup,
        cache_store=calls.store,
        cache_epoch=calls.epoch,
        **services,
    )
    return RouterPipeline(config_of(doc), svc, rng=random.Random(0))


def chat(text: str, model: str = "MoM", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def completion(content: str = "Mix flour and water.", prompt: int = 20, completion_tokens: int = 10) -> dict:
    return {
        "id": "chatcmpl-upstream",
        "object": "chat.completion",
        "created": 1,
        "model": "small",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
    }


# ------------------------------------------------------------------ explicit model


async def test_explicit_model_is_a_pass_through(encoder):
    embed = CountingEmbed(encoder)
    pipe = pipeline_of(base_document(), encoder, embed=embed)
    request = chat("urgent! fix this now", model="backup", max_tokens=5000)
    plan = await pipe.route(request, request_id="req-1")
    assert plan.auto is False and plan.reason_code == "model_specified"
    assert plan.selected_model == "backup" and [t.model for t in plan.candidates] == ["backup"]
    assert plan.signals.matches == [] and plan.decision is None
    assert plan.body == request  # no system prompt, no clamp, no reasoning
    assert plan.request_id == "req-1"
    assert plan.response_headers["x-cache-status"] == "bypass"
    assert plan.upstream_headers["x-selected-model"] == "backup"
    assert embed.calls == []  # nothing embedded


async def test_explicit_model_by_external_id(encoder):
    doc = base_document()
    doc["providers"]["models"][2]["external_model_ids"] = {"openai": "backup-v2"}
    plan = await pipeline_of(doc, encoder).route(chat("hi", model="backup-v2"))
    assert plan.selected_model == "backup"


async def test_unknown_model_is_404(encoder):
    pipe = pipeline_of(base_document(), encoder)
    with pytest.raises(ModelNotFoundError) as info:
        await pipe.route(chat("hi", model="gpt-nonexistent"))
    assert isinstance(info.value, SvcError)
    assert info.value.status == 404 and info.value.code == "model_not_found"


async def test_the_front_doors_validated_body_is_routed(encoder):
    # What a front door's exchange hands the Router: decoded and validated once, the client's
    # fields untouched (app/exchange/openai_schemas.py).
    from app.exchange.client_api import ChatApi

    body = ChatApi().parse({**chat("urgent please"), "model": " MoM ", "seed": 3})
    plan = await pipeline_of(base_document(), encoder).route(body)
    assert plan.decision == "urgent_route" and plan.requested_model == "MoM"
    assert plan.body["seed"] == 3


# ------------------------------------------------------------------ auto routing


async def test_auto_route_by_keyword_with_all_mutations(encoder):
    pipe = pipeline_of(base_document(), encoder)
    plan = await pipe.route(
        chat("urgent: the server is down", max_tokens=4096), headers={"X-Request-Id": "abc"}
    )
    assert plan.auto and plan.decision == "urgent_route" and plan.reason_code == "auto_routing"
    assert plan.confidence == pytest.approx(0.625)  # 1 of 4 keywords
    assert plan.selected_model == "large"
    assert [t.model for t in plan.candidates] == ["large", "backup"]
    assert plan.candidates[0].upstream_model == "org/large"
    assert plan.body["messages"][0] == {"role": "system", "content": "Be quick."}
    assert plan.body["chat_template_kwargs"] == {"enable_thinking": True}
    assert plan.body["max_tokens"] == 256
    assert plan.reasoning["enabled"] is True and plan.reasoning["family"] == "qwen3"
    assert plan.request_id == "abc"
    headers = plan.response_headers
    assert headers["x-selected-model"] == "large"
    assert headers["x-routing-confidence"] == "0.6250"
    assert headers["x-vsr-selected-decision"] == "urgent_route"
    assert headers["x-vsr-matched-keywords"] == "urgent"
    assert headers["x-vsr-injected-system-prompt"] == "true"
    assert headers["x-security-checks"] == "pii:false,jailbreak:false"
    assert headers["x-cache-status"] == "bypass"
    assert float(headers["x-classification-time"]) >= 0
    assert plan.upstream_headers["x-route-source"] == "svc-sr"
    assert plan.upstream_headers["x-request-id"] == "abc"
    assert plan.upstream_headers_remove == ["x-debug"]
    assert set(plan.pricing) == {"large"}  # backup has no pricing


async def test_only_referenced_signals_are_evaluated(encoder):
    plan = await pipeline_of(base_document(), encoder).route(chat("never referenced words here"))
    evaluated = {(m.type, m.name) for m in plan.signals.matches}
    assert ("keyword", "unused") not in evaluated
    assert evaluated == {
        ("keyword", "urgent"),
        ("keyword", "blocked_words"),
        ("embedding", "cooking"),
        ("context", "long_prompt"),
    }
    assert set(plan.signals.timings_ms) == {"keyword", "embedding", "context"}


async def test_embedding_route_and_matched_header(encoder):
    plan = await pipeline_of(base_document(), encoder).route(chat(BREAD))
    assert plan.decision == "cooking_route" and plan.selected_model == "small"
    assert plan.response_headers["x-vsr-matched-embeddings"] == "cooking"
    assert 0.55 <= plan.confidence <= 1.0


async def test_context_route(encoder):
    plan = await pipeline_of(base_document(), encoder).route(chat("word " * 2000))
    assert plan.decision == "long_route"
    assert plan.body["chat_template_kwargs"] == {"enable_thinking": False}


async def test_priority_vs_confidence_strategy(encoder):
    # "urgent ... bake bread": urgent (p100, conf .625) and cooking (p50, conf ~.7+) both match
    text = "urgent: how do I bake bread"
    plan = await pipeline_of(base_document(), encoder).route(chat(text))
    assert plan.decision == "urgent_route"
    doc = base_document()
    doc["routing"]["strategy"] = "confidence"
    plan = await pipeline_of(doc, encoder).route(chat(text))
    assert plan.decision == "cooking_route" and plan.confidence > 0.625


async def test_tiers_override_priority(encoder):
    doc = base_document()
    doc["routing"]["decisions"][2]["tier"] = 1  # cooking_route
    plan = await pipeline_of(doc, encoder).route(chat("urgent: how do I bake bread"))
    assert plan.decision == "cooking_route"


async def test_catch_all_decision(encoder):
    doc = base_document()
    doc["routing"]["decisions"].append(
        {"name": "everything", "priority": 0, "modelRefs": [{"model": "backup"}]}
    )
    plan = await pipeline_of(doc, encoder).route(chat("tell me about the weather"))
    assert plan.decision == "everything" and plan.selected_model == "backup"
    assert plan.reason_code == "auto_routing" and plan.confidence == 1.0


async def test_no_match_uses_default_model(encoder):
    plan = await pipeline_of(base_document(), encoder).route(chat("tell me about the weather"))
    assert plan.decision is None and plan.selected_model == "small"
    assert plan.reason_code == "default_model" and plan.confidence == 0.0
    assert "x-vsr-selected-decision" not in plan.response_headers


async def test_no_match_and_no_default_is_no_route(encoder):
    doc = base_document()
    doc["providers"]["defaults"]["default_model"] = None
    with pytest.raises(NoRouteError) as info:
        await pipeline_of(doc, encoder).route(chat("tell me about the weather"))
    assert info.value.status == 400


async def test_routing_disabled_sends_auto_requests_to_the_default_model_unrouted(encoder):
    doc = base_document()
    doc["global"] = {"router": {"enabled": False}}
    embed = CountingEmbed(encoder)
    pipe = pipeline_of(doc, encoder, embed=embed)
    plan = await pipe.route(chat("urgent: the server is down"))  # the urgent_route keyword decision's text
    assert plan.decision is None and plan.selected_model == "small"
    assert plan.reason_code == "router_disabled" and plan.immediate is None
    assert not plan.signals.matches and not embed.calls  # no signal, encoder or cache work
    assert plan.response_headers["x-cache-status"] == "bypass"
    explicit = await pipe.route(chat("urgent: the server is down", model="large"))
    assert explicit.selected_model == "large" and explicit.reason_code == "model_specified"
    doc["providers"]["defaults"]["default_model"] = None
    with pytest.raises(NoRouteError) as info:
        await pipeline_of(doc, encoder).route(chat("hello"))
    assert info.value.status == 400 and "routing is disabled" in info.value.message


@pytest.mark.parametrize("alias", ["MoM", "auto", "router-x"])
async def test_auto_aliases(encoder, alias):
    doc = base_document()
    doc["global"] = {"router": {"auto_model_names": ["router-x"]}}
    plan = await pipeline_of(doc, encoder).route(chat("urgent", model=alias))
    assert plan.auto and plan.decision == "urgent_route"


# ------------------------------------------------------------------ fast_response


async def test_fast_response_answers_without_a_model(encoder):
    doc = base_document()
    doc["providers"]["defaults"]["default_model"] = None
    plan = await pipeline_of(doc, encoder).route(chat("something forbidden", stream=True))
    assert plan.immediate is not None and plan.immediate.kind == "fast_response"
    assert plan.immediate.status == 200
    assert plan.immediate.body["choices"][0]["message"]["content"] == "I can't help with that."
    assert plan.immediate.headers["x-vsr-fast-response"] == "true"
    assert plan.immediate.headers["x-vsr-selected-decision"] == "blocked"
    assert plan.stream is True and plan.candidates == [] and plan.reason_code == "fast_response"


# ------------------------------------------------------------------ response cache


async def test_cache_miss_then_hit_on_paraphrase(encoder):
    cache = InMemorySemanticCache()
    pipe = pipeline_of(base_document(), encoder, cache=cache)
    first = await pipe.route(chat(BREAD))
    assert first.response_headers["x-cache-status"] == "miss"
    assert first.cache_write is not None and first.cache_write.partition == "small|cooking_route"
    accounting = await pipe.complete(
        first, CompletionReport(status=200, model="small", response=completion())
    )
    assert accounting.cache_written and len(cache) == 1

    second = await pipe.route(chat(BREAD_PARAPHRASE))
    assert second.immediate is not None and second.immediate.kind == "cache_hit"
    body = second.immediate.body
    assert body["choices"][0]["message"]["content"] == "Mix flour and water."
    assert body["model"] == "small" and body["id"] != "chatcmpl-upstream"
    assert second.response_headers["x-cache-status"] == "hit"
    assert second.immediate.headers["x-vsr-cache-hit"] == "true"
    similarity = float(second.immediate.headers["x-vsr-cache-similarity"])
    assert 0.85 <= similarity <= 1.0
    assert second.cache_write is None

    unrelated = await pipe.route(chat("recipe for cooking pasta at home with tomatoes"))
    assert unrelated.decision == "cooking_route" and unrelated.immediate is None

    hit_accounting = await pipe.complete(second, CompletionReport(status=200, model="small"))
    assert hit_accounting.cached and hit_accounting.cost == 0.0


async def test_global_cache_applies_to_decisions_without_plugin(encoder):
    doc = base_document(
        **{"global": {"stores": {"response_cache": {"enabled": True, "similarity_threshold": 0.9}}}}
    )
    pipe = pipeline_of(doc, encoder)
    plan = await pipe.route(chat("the weather today in Paris"))
    assert plan.reason_code == "default_model"
    assert plan.cache_write is not None and plan.cache_write.partition == "small|"
    assert plan.response_headers["x-cache-status"] == "miss"


async def test_cache_control_header(encoder):
    pipe = pipeline_of(base_document(), encoder)
    no_store = await pipe.route(chat(BREAD), headers={"x-vsr-cache-control": "no-store"})
    assert no_store.cache_write is None and no_store.response_headers["x-cache-status"] == "miss"
    bypass = await pipe.route(chat(BREAD), headers={"x-vsr-cache-control": "bypass"})
    assert bypass.cache_write is None and bypass.response_headers["x-cache-status"] == "bypass"


async def test_conversation_context_separates_cache_entries(encoder):
    cache = InMemorySemanticCache()
    pipe = pipeline_of(base_document(), encoder, cache=cache)
    single = await pipe.route(chat(BREAD))
    await pipe.complete(single, CompletionReport(status=200, model="small", response=completion()))
    multi_turn = {
        "model": "MoM",
        "messages": [
            {"role": "user", "content": "I only have rye flour."},
            {"role": "assistant", "content": "Rye works differently."},
            {"role": "user", "content": BREAD},
        ],
    }
    plan = await pipe.route(multi_turn)
    assert plan.immediate is None  # a different conversation: no cross-conversation hit
    assert plan.cache_write is not None and plan.cache_write.partition.startswith("small|cooking_route|ctx:")
    assert cache_partition("m", "d", multi_turn) == cache_partition("m", "d", copy.deepcopy(multi_turn))


async def test_one_encoder_pass_per_request(encoder):
    embed = CountingEmbed(encoder)
    pipe = pipeline_of(base_document(), encoder, embed=embed)
    await pipe.warm_up()
    warm_calls = len(embed.calls)
    plan = await pipe.route(chat(BREAD))  # embedding signal + cache lookup share one vector
    assert plan.cache_write is not None
    assert embed.calls[warm_calls:] == [[BREAD]]
    await pipe.complete(plan, CompletionReport(status=200, model="small", response=completion()))
    assert len(embed.calls) == warm_calls + 1  # the write reuses the route-time vector


async def test_cache_failure_never_fails_the_request(encoder):
    async def broken_lookup(*args):
        raise ConnectionError("redis down")

    async def broken_store(*args):
        raise ConnectionError("redis down")

    svc = PipelineServices(embed=CountingEmbed(encoder), cache_lookup=broken_lookup, cache_store=broken_store)
    pipe = RouterPipeline(config_of(base_document()), svc)
    plan = await pipe.route(chat(BREAD))
    assert plan.immediate is None and plan.selected_model == "small"
    accounting = await pipe.complete(plan, CompletionReport(status=200, model="small", response=completion()))
    assert accounting.cache_written is False


# ------------------------------------------------------------------ complete()


async def test_complete_cost_and_tpot_non_stream(encoder):
    pipe = pipeline_of(base_document(), encoder)
    plan = await pipe.route(chat("urgent help"))
    report = CompletionReport(
        status=200,
        model="large",
        response=completion(prompt=1000, completion_tokens=500),
        ttft_s=0.9,
        total_s=1.0,
    )
    accounting = await pipe.complete(plan, report)
    assert accounting.model == "large" and accounting.currency == "EUR"
    assert accounting.cost == pytest.approx((1000 * 10 + 500 * 30) / 1e6)
    assert accounting.usage == {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
    assert accounting.tpot_s == pytest.approx(1.0 / 500)
    assert accounting.ttft_s == pytest.approx(0.9)


async def test_complete_stream_tpot_and_fallback_model_pricing(encoder):
    pipe = pipeline_of(base_document(), encoder)
    plan = await pipe.route(chat("urgent help", stream=True))
    report = CompletionReport(
        status=200,
        model="backup",
        stream=True,
        stream_finished=True,
        response=completion(completion_tokens=11),
        ttft_s=0.2,
        total_s=1.2,
    )
    accounting = await pipe.complete(plan, report)
    assert accounting.model == "backup" and accounting.cost == 0.0  # backup has no pricing
    assert accounting.tpot_s == pytest.approx(1.0 / 10)


async def test_cache_write_only_for_finished_streams(encoder):
    cache = InMemorySemanticCache()
    pipe = pipeline_of(base_document(), encoder, cache=cache)
    plan = await pipe.route(chat(BREAD, stream=True))
    aborted = await pipe.complete(
        plan,
        CompletionReport(
            status=200, model="small", stream=True, stream_finished=False, response=completion("Mix fl")
        ),
    )
    assert not aborted.cache_written and len(cache) == 0
    assert (await pipe.route(chat(BREAD))).immediate is None
    finished = await pipe.complete(
        plan,
        CompletionReport(status=200, model="small", stream=True, stream_finished=True, response=completion()),
    )
    assert finished.cache_written and len(cache) == 1


async def test_no_cache_write_on_error_or_other_model(encoder):
    cache = InMemorySemanticCache()
    pipe = pipeline_of(base_document(), encoder, cache=cache)
    plan = await pipe.route(chat(BREAD))
    assert not (
        await pipe.complete(plan, CompletionReport(status=502, model="small", response=completion()))
    ).cache_written
    assert not (
        await pipe.complete(plan, CompletionReport(status=200, model="backup", response=completion()))
    ).cache_written
    assert not (
        await pipe.complete(plan, CompletionReport(status=200, model="small", response={"choices": []}))
    ).cache_written
    assert len(cache) == 0


@pytest.mark.parametrize(
    "response",
    [
        None,
        {},
        {"usage": "lots"},
        {"usage": {"prompt_tokens": -4, "completion_tokens": True}},
        {"usage": {"prompt_tokens": 3.0}, "choices": "x"},
    ],
)
async def test_complete_tolerates_odd_input(encoder, response):
    pipe = pipeline_of(base_document(), encoder)
    plan = await pipe.route(chat("urgent"))
    accounting = await pipe.complete(
        plan,
        CompletionReport(status=200, model="large", response=response, ttft_s=float("nan"), total_s=-1.0),
    )
    assert accounting.model == "large" and accounting.cost >= 0.0
    assert accounting.tpot_s is None and accounting.ttft_s is None


# ------------------------------------------------------------------ extension points


class DomainStub:
    """A learned-signal evaluator as the next issue will plug it in (keyed by condition type)."""

    family = "domain"

    def __init__(self, config, services) -> None:
        self.labels = [d.name for d in config.routing.signals.domains]
        self.seen: list[frozenset[str]] = []

    def rule_names(self) -> list[str]:
        return self.labels

    async def warm_up(self) -> None:
        return None

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        self.seen.append(names)
        vector = await ctx.query_vector()  # shares the request's single embedding
        assert vector.shape == (384,)
        is_math = "integral" in ctx.text
        return [
            SignalMatch(type="domain", name=n, matched=(n == "math") == is_math, confidence=0.9)
            for n in names
        ]


def domain_document() -> dict[str, Any]:
    doc = base_document()
    doc["routing"]["signals"]["domains"] = [{"name": "math"}, {"name": "other"}]
    doc["routing"]["decisions"].append(
        {
            "name": "math_route",
            "priority": 500,
            "rules": {"type": "domain", "name": "math"},
            "modelRefs": [{"model": "large"}],
        }
    )
    return doc


async def test_extra_evaluator_plugs_in_by_condition_type(encoder):
    embed = CountingEmbed(encoder)
    pipe = pipeline_of(domain_document(), encoder, embed=embed, evaluators={"domain": DomainStub})
    await pipe.warm_up()
    before = len(embed.calls)
    plan = await pipe.route(chat("compute the integral of x squared"))
    assert plan.decision == "math_route" and plan.confidence == pytest.approx(0.9)
    assert plan.response_headers["x-vsr-matched-domains"] == "math"
    assert len(embed.calls) == before + 1  # the domain stub and the embedding signal shared one pass


async def test_missing_evaluator_is_a_signal_error_and_on_error_decides(encoder):
    doc = domain_document()
    plan = await pipeline_of(doc, encoder).route(chat("compute the integral"))
    assert plan.decision != "math_route"
    assert any("domain:math" in e for e in plan.signals.errors)
    doc["routing"]["decisions"][-1]["rules"]["on_error"] = "match"
    plan = await pipeline_of(doc, encoder).route(chat("compute the integral"))
    assert plan.decision == "math_route"


async def test_failing_evaluator_does_not_fail_routing(encoder):
    class Broken(DomainStub):
        async def evaluate(self, ctx, names):
            raise RuntimeError("model crashed")

    plan = await pipeline_of(domain_document(), encoder, evaluators={"domain": Broken}).route(chat("urgent"))
    assert plan.decision == "urgent_route"
    assert any("model crashed" in e for e in plan.signals.errors)


async def test_security_signals_fill_security_checks(encoder):
    class PIIStub:
        family = "pii"

        def __init__(self, config, services) -> None:
            pass

        def rule_names(self):
            return ["any_pii"]

        async def warm_up(self):
            return None

        async def evaluate(self, ctx, names):
            found = "@" in ctx.text
            return [
                SignalMatch(
                    type="pii",
                    name="any_pii",
                    matched=found,
                    detail={"entities": ["EMAIL_ADDRESS"] if found else []},
                )
            ]

    doc = base_document()
    doc["routing"]["signals"]["pii"] = [{"name": "any_pii"}]
    doc["routing"]["decisions"].append(
        {
            "name": "pii_block",
            "priority": 2000,
            "rules": {"type": "pii", "name": "any_pii"},
            "plugins": [{"type": "fast_response", "configuration": {"message": "No PII please."}}],
        }
    )
    pipe = pipeline_of(doc, encoder, evaluators={"pii": PIIStub})
    plan = await pipe.route(chat("mail me at a@b.co"))
    assert plan.security.pii_detected and plan.security.pii_entities == ["EMAIL_ADDRESS"]
    assert plan.response_headers["x-security-checks"] == "pii:true,jailbreak:false"
    assert plan.immediate is not None and plan.immediate.kind == "fast_response"


# ------------------------------------------------------------------ config updates, preview, selection


async def test_update_config_hot_swaps_and_embeds_only_new_phrases(encoder):
    embed = CountingEmbed(encoder)
    pipe = pipeline_of(base_document(), encoder, embed=embed)
    await pipe.warm_up()
    assert len(embed.calls) == 1
    doc = base_document()
    doc["routing"]["signals"]["embeddings"][0]["candidates"].append("grilling steak on a barbecue")
    doc["routing"]["decisions"][2]["modelRefs"] = [{"model": "backup"}]
    await pipe.update_config(config_of(doc))
    assert embed.calls[1:] == [["grilling steak on a barbecue"]]
    plan = await pipe.route(chat("how long do I grill a steak on the barbecue"))
    assert plan.decision == "cooking_route" and plan.selected_model == "backup"


async def test_preview_reports_every_signal_without_touching_the_cache(encoder):
    cache = InMemorySemanticCache()
    pipe = pipeline_of(base_document(), encoder, cache=cache)
    result = await pipe.preview(chat(BREAD))
    assert result["decision"] == "cooking_route" and result["selected_model"] == "small"
    assert result["selection_status"] == "selected" and result["selection_method"] == "static"
    assert ("keyword", "unused") in {(s["type"], s["name"]) for s in result["signals"]}
    assert result["matched_decisions"][0]["name"] == "cooking_route"
    assert len(cache) == 0 and cache.stats().misses == 0
    blocked = await pipe.preview(chat("forbidden"))
    assert blocked["selection_status"] == "not_required" and blocked["selection_method"] == "fast_response"


async def test_weighted_decision_is_reproducible_with_seeded_rng(encoder):
    doc = base_document()
    doc["routing"]["decisions"][1]["algorithm"] = {"type": "weighted"}
    doc["routing"]["decisions"][1]["modelRefs"] = [
        {"model": "large", "weight": 1},
        {"model": "backup", "weight": 1},
    ]

    async def picks(seed: int) -> list[str]:
        pipe = RouterPipeline(
            config_of(doc), PipelineServices(embed=CountingEmbed(encoder)), rng=random.Random(seed)
        )
        return [(await pipe.route(chat("urgent"))).selected_model for _ in range(12)]

    first = await picks(42)
    assert first == await picks(42)
    assert set(first) == {"large", "backup"}


async def test_concurrent_routes_are_independent(encoder):
    pipe = pipeline_of(base_document(), encoder)
    texts = ["urgent fix", BREAD, "weather?", "word " * 2000] * 3
    plans = await asyncio.gather(*(pipe.route(chat(t)) for t in texts))
    decisions = [p.decision for p in plans]
    assert decisions == ["urgent_route", "cooking_route", None, "long_route"] * 3
    assert len({p.request_id for p in plans}) == len(plans)


async def test_route_never_mutates_the_callers_request(encoder):
    request = chat("urgent: deploy", max_tokens=9999, chat_template_kwargs={"x": 1})
    snapshot = copy.deepcopy(request)
    plan = await pipeline_of(base_document(), encoder).route(request)
    assert plan.body != snapshot  # the plan's body was rewritten...
    assert request == snapshot  # ...the caller's was not


async def test_cache_max_age_and_ttl_directives(encoder):
    # the entry is stored with a wall-clock time 10 s in the past: older than max-age=1, no sleep needed
    cache = InMemorySemanticCache(wall_clock=lambda: time.time() - 10)
    pipe = pipeline_of(base_document(), encoder, cache=cache)
    plan = await pipe.route(chat(BREAD), headers={"x-vsr-cache-control": "ttl=42"})
    assert plan.cache_write is not None and plan.cache_write.ttl_seconds == 42
    await pipe.complete(plan, CompletionReport(status=200, model="small", response=completion()))
    stale = await pipe.route(chat(BREAD), headers={"x-vsr-cache-control": "max-age=1"})
    assert stale.immediate is None and stale.response_headers["x-cache-status"] == "miss"
    fresh = await pipe.route(chat(BREAD), headers={"x-vsr-cache-control": "max-age=3600"})
    assert fresh.immediate is not None and fresh.immediate.kind == "cache_hit"
