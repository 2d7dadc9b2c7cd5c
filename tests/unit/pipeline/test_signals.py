"""Signal evaluators: keyword, embedding (real MiniLM encoder), context, SignalContext."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from app.common.chat_text import content_text
from app.config.document import RouterConfig
from app.config.signals import ContextSignal, EmbeddingSignal, KeywordSignal
from app.pipeline.signals import BUILTIN_EVALUATORS, ContextEvaluator, EmbeddingEvaluator, KeywordEvaluator
from app.pipeline.signals.base import SignalContext, estimate_tokens
from app.runtime.encoder import shared_encoder


@pytest.fixture(scope="module")
def encoder():
    enc = shared_encoder()
    enc.warm_up()
    return enc


class CountingEmbed:
    """The real encoder behind an async callable that counts texts and calls."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder
        self.calls: list[list[str]] = []

    async def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return await asyncio.to_thread(self.encoder.encode, list(texts))


def kw(name="k", keywords=("urgent", "asap", "immediately", "emergency"), **extra) -> KeywordSignal:
    return KeywordSignal.model_validate({"name": name, "keywords": list(keywords), **extra})


def keyword_match(rule: KeywordSignal, text: str):
    (match,) = KeywordEvaluator([rule]).evaluate_text(text, {rule.name})
    return match


def ctx_of(text: str, **kwargs) -> SignalContext:
    return SignalContext([{"role": "user", "content": text}], **kwargs)


# ------------------------------------------------------------------ keyword


@pytest.mark.parametrize(
    ("text", "confidence"),
    [
        ("this is urgent", 0.625),
        ("urgent, reply asap", 0.75),
        ("urgent asap immediately", 0.875),
        ("EMERGENCY: urgent, asap, immediately!", 1.0),
    ],
)
def test_keyword_or_confidence_grows_with_matched_fraction(text, confidence):
    match = keyword_match(kw(), text)
    assert match.matched
    assert match.confidence == pytest.approx(confidence)


def test_keyword_or_without_any_keyword_does_not_match():
    match = keyword_match(kw(), "a calm question about gardening")
    assert not match.matched
    assert match.confidence == 0.0
    assert match.error is None


def test_keyword_matches_whole_words_only_and_ignores_case_by_default():
    rule = kw(keywords=["urgent"])
    assert keyword_match(rule, "URGENT!").matched
    assert keyword_match(rule, "(urgent)").matched
    assert not keyword_match(rule, "an insurgent group").matched
    assert not keyword_match(rule, "urgently").matched


def test_keyword_case_sensitive():
    rule = kw(keywords=["SQL"], case_sensitive=True)
    assert keyword_match(rule, "write SQL for me").matched
    assert not keyword_match(rule, "write sql for me").matched


def test_keyword_with_symbol_edges():
    rule = kw(keywords=["C++", "$100"])
    assert keyword_match(rule, "a C++ question").matched
    assert not keyword_match(rule, "ABC++ compiler").matched  # left edge is a word char: boundary applies
    assert keyword_match(rule, "costs $100.").matched


def test_keyword_multi_word_phrase():
    rule = kw(keywords=["machine learning"])
    assert keyword_match(rule, "Intro to Machine Learning please").matched
    assert not keyword_match(rule, "machine-learning").matched


def test_keyword_and_needs_all_keywords():
    rule = kw(keywords=["python", "pandas"], operator="and")
    full = keyword_match(rule, "python with pandas")
    assert full.matched and full.confidence == 1.0
    partial = keyword_match(rule, "python only")
    assert not partial.matched and partial.confidence == 0.0
    assert partial.detail["keywords"] == ["python"]


def test_keyword_nor_matches_when_none_present():
    rule = kw(keywords=["password", "secret"], operator="NOR")
    clean = keyword_match(rule, "tell me a joke")
    assert clean.matched and clean.confidence == 1.0
    assert not keyword_match(rule, "what is my password").matched


def test_keyword_regex_method():
    rule = kw(keywords=[r"\b\d{3}-\d{4}\b", r"call\s+me"], method="regex")
    match = keyword_match(rule, "Call   me at 555-1234")
    assert match.matched and match.confidence == 1.0
    assert not keyword_match(rule, "no numbers here").matched


def test_keyword_invalid_regex_reports_error_not_exception():
    match = keyword_match(kw(keywords=["(unclosed"], method="regex"), "anything")
    assert not match.matched
    assert match.error and "invalid regex" in match.error


def test_keyword_fuzzy_catches_typos():
    rule = kw(keywords=["urgent"], method="fuzzy", fuzzy_threshold=0.8)
    assert keyword_match(rule, "this is urgnet!").matched
    assert not keyword_match(rule, "this is fine").matched


def test_keyword_ngram_method():
    rule = kw(keywords=["kubernetes"], method="ngram", ngram_threshold=0.5)
    assert keyword_match(rule, "deploy on kubernetis").matched
    assert not keyword_match(rule, "deploy on a laptop").matched


def test_keyword_bm25_is_reported_unsupported():
    match = keyword_match(kw(method="bm25"), "urgent")
    assert not match.matched
    assert "not supported" in (match.error or "")


def test_keyword_evaluator_only_answers_requested_rules_and_flags_unknown_names():
    evaluator = KeywordEvaluator([kw("a", ["x"]), kw("b", ["y"])])
    matches = evaluator.evaluate_text("x y", {"a", "ghost"})
    assert {m.name for m in matches} == {"a", "ghost"}
    ghost = next(m for m in matches if m.name == "ghost")
    assert ghost.error and not ghost.matched


async def test_keyword_evaluator_reads_last_user_message():
    evaluator = KeywordEvaluator([kw("u", ["urgent"])])
    ctx = SignalContext(
        [
            {"role": "user", "content": "urgent!"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "thanks"},
        ]
    )
    (match,) = await evaluator.evaluate(ctx, frozenset({"u"}))
    assert not match.matched  # only the last user turn is the query


# ------------------------------------------------------------------ embedding


def emb(
    name="cooking", candidates=("how do I bake bread", "a recipe for pasta sauce"), **extra
) -> EmbeddingSignal:
    return EmbeddingSignal.model_validate({"name": name, "candidates": list(candidates), **extra})


async def test_embedding_max_matches_paraphrase_with_similarity_as_confidence(encoder):
    rule = emb(threshold=0.6)
    evaluator = EmbeddingEvaluator([rule], CountingEmbed(encoder))
    query = "What's the best way to bake a loaf of bread at home?"
    (match,) = await evaluator.evaluate(ctx_of(query, embed=CountingEmbed(encoder)), frozenset({"cooking"}))
    vectors = encoder.encode([query, *rule.candidates])
    expected = float(np.max(vectors[1:] @ vectors[0]))
    assert match.matched
    assert match.confidence == pytest.approx(expected, abs=1e-4)
    assert match.detail["best_candidate"] == "how do I bake bread"


async def test_embedding_unrelated_query_does_not_match(encoder):
    evaluator = EmbeddingEvaluator([emb(threshold=0.6)], CountingEmbed(encoder))
    (match,) = await evaluator.evaluate(
        ctx_of("Explain quantum chromodynamics", embed=CountingEmbed(encoder)), frozenset({"cooking"})
    )
    assert not match.matched
    assert match.confidence < 0.6


async def test_embedding_mean_vs_max_vs_any(encoder):
    candidates = ["how do I bake bread", "the stock market crashed today"]
    query = "how do I bake bread at home"
    vectors = encoder.encode([query, *candidates])
    sims = vectors[1:] @ vectors[0]
    threshold = float((sims.max() + sims.mean()) / 2)  # between mean and max
    embed = CountingEmbed(encoder)
    rules = [
        emb("by_max", candidates, threshold=threshold, aggregation_method="max"),
        emb("by_mean", candidates, threshold=threshold, aggregation_method="mean"),
        emb("by_avg", candidates, threshold=threshold, aggregation_method="avg"),
        emb("by_any", candidates, threshold=threshold, aggregation_method="any"),
    ]
    evaluator = EmbeddingEvaluator(rules, embed)
    matches = {
        m.name: m
        for m in await evaluator.evaluate(ctx_of(query, embed=embed), frozenset(r.name for r in rules))
    }
    assert matches["by_max"].matched and matches["by_any"].matched
    assert not matches["by_mean"].matched and not matches["by_avg"].matched
    assert matches["by_mean"].confidence == pytest.approx(float(sims.mean()), abs=1e-4)
    assert matches["by_max"].confidence == pytest.approx(float(sims.max()), abs=1e-4)


async def test_embedding_candidates_are_embedded_once_and_shared_across_rules(encoder):
    embed = CountingEmbed(encoder)
    rules = [emb("a", ["shared phrase", "alpha"]), emb("b", ["shared phrase", "beta"])]
    evaluator = EmbeddingEvaluator(rules, embed)
    await evaluator.warm_up()
    await evaluator.warm_up()
    assert embed.calls == [["shared phrase", "alpha", "beta"]]
    for text in ("first query", "second query"):
        await evaluator.evaluate(ctx_of(text, embed=embed), frozenset({"a", "b"}))
    assert embed.calls[1:] == [["first query"], ["second query"]]  # one query embedding each


async def test_embedding_phrase_cache_survives_a_new_evaluator(encoder):
    embed = CountingEmbed(encoder)
    cache: dict[str, np.ndarray] = {}
    await EmbeddingEvaluator([emb("a", ["one", "two"])], embed, cache).warm_up()
    await EmbeddingEvaluator([emb("a", ["one", "two", "three"])], embed, cache).warm_up()
    assert embed.calls == [["one", "two"], ["three"]]


async def test_embedding_service_failure_becomes_signal_error():
    async def broken(texts):
        raise ConnectionError("encoder down")

    evaluator = EmbeddingEvaluator([emb()], broken)
    (match,) = await evaluator.evaluate(ctx_of("bread?", embed=broken), frozenset({"cooking"}))
    assert not match.matched
    assert "encoder down" in (match.error or "")


async def test_embedding_without_user_text_is_a_clean_non_match(encoder):
    evaluator = EmbeddingEvaluator([emb()], CountingEmbed(encoder))
    ctx = SignalContext([{"role": "system", "content": "be nice"}], embed=CountingEmbed(encoder))
    (match,) = await evaluator.evaluate(ctx, frozenset({"cooking"}))
    assert not match.matched and match.error is None


# ------------------------------------------------------------------ context


def test_context_bounds_are_inclusive_and_accept_suffixes():
    evaluator = ContextEvaluator(
        [
            ContextSignal.model_validate({"name": "short", "max_tokens": 100}),
            ContextSignal.model_validate({"name": "long", "min_tokens": "1K"}),
            ContextSignal.model_validate({"name": "mid", "min_tokens": 101, "max_tokens": "1k"}),
        ]
    )
    names = {"short", "long", "mid"}

    def matched(tokens):
        return {m.name for m in evaluator.evaluate_count(tokens, names) if m.matched}

    assert matched(100) == {"short"}
    assert matched(101) == {"mid"}
    assert matched(1024) == {"mid", "long"}
    assert matched(5000) == {"long"}


async def test_context_uses_whole_prompt_token_estimate():
    evaluator = ContextEvaluator([ContextSignal(name="big", min_tokens=50)])
    messages = [{"role": "system", "content": "x" * 120}, {"role": "user", "content": "y" * 80}]
    ctx = SignalContext(messages)
    assert ctx.token_count == estimate_tokens("x" * 120 + "\n" + "y" * 80) == 51
    (match,) = await evaluator.evaluate(ctx, frozenset({"big"}))
    assert match.matched and match.detail["token_count"] == 51


async def test_context_prefers_injected_token_counter(encoder):
    text = "tokenizers split words into word pieces"
    ctx = SignalContext([{"role": "user", "content": text}], count_tokens=encoder.count_tokens)
    assert ctx.token_count == encoder.count_tokens(text)


# ------------------------------------------------------------------ SignalContext


async def test_query_vector_is_computed_once_for_concurrent_users(encoder):
    embed = CountingEmbed(encoder)
    ctx = ctx_of("one encoder pass please", embed=embed)
    vectors = await asyncio.gather(*(ctx.query_vector() for _ in range(5)))
    assert len(embed.calls) == 1
    assert all(np.allclose(v, vectors[0]) for v in vectors)
    assert vectors[0].shape == (384,)
    assert float(np.linalg.norm(vectors[0])) == pytest.approx(1.0, abs=1e-3)


def test_context_reads_multipart_content_and_history():
    ctx = SignalContext(
        [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "answer"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "second"}, {"type": "image_url", "image_url": {}}],
            },
        ]
    )
    assert ctx.text == "second"
    assert ctx.history_text == "first\nsecond"
    assert ctx.message_count == 3
    assert content_text(None) == ""


def test_builtin_registry_builds_each_family_from_config():
    config = RouterConfig.model_validate(
        {
            "routing": {
                "signals": {
                    "keywords": [{"name": "k", "keywords": ["a"]}],
                    "embeddings": [{"name": "e", "candidates": ["b"]}],
                    "context": [{"name": "c", "max_tokens": 10}],
                    "preferences": [{"name": "p", "description": "travel"}],
                    "complexity": [
                        {"name": "x", "hard": {"candidates": ["h"]}, "easy": {"candidates": ["e"]}}
                    ],
                    "language": [{"name": "fr"}],
                    "modality": [{"name": "image"}],
                    "fact_check": [{"name": "needs_fact_check"}],
                    "user_feedbacks": [{"name": "wrong_answer"}],
                    "kb": [{"name": "s", "kb": "support"}],
                }
            },
        }
    )
    built = {family: factory(config, None) for family, factory in BUILTIN_EVALUATORS.items()}
    assert {family: ev.rule_names() for family, ev in built.items()} == {
        "keyword": ["k"],
        "embedding": ["e"],
        "context": ["c"],
        "preference": ["p"],
        "complexity": ["x:hard", "x:medium", "x:easy"],
        "language": ["fr"],
        "modality": ["image"],
        "fact_check": ["needs_fact_check"],
        "user_feedback": ["wrong_answer"],
        "kb": ["s"],
    }
    assert all(ev.family == family for family, ev in built.items())
