"""The context_compression plugin (app/pipeline/compression.py): the budget is respected,
system messages and the last turns stay, a tool call never loses its result, a short
conversation is untouched, a bad configuration is rejected with its path, and the pipeline
applies it once per routed request (header, metrics)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from app.config.loader import ConfigError, parse_config
from app.config.plugins import ContextCompressionPlugin
from app.pipeline import RouterPipeline
from app.pipeline.compression import HEADER, compress, count_texts, counted_text, lead_sentence
from app.pipeline.compression_preview import preview_context_compression
from tests.unit.management.test_management_support import base_document

WORDS = [
    "river",
    "stone",
    "light",
    "paper",
    "garden",
    "window",
    "music",
    "silver",
    "forest",
    "harbor",
    "winter",
    "market",
]
SYSTEM = {"role": "system", "content": "You are a careful assistant. Answer briefly."}


def conversation(turns: int, words: int = 30) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM]
    for i in range(turns):
        filler = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words))
        messages.append({"role": "user", "content": f"Question {i} is about topic {i}. {filler}"})
        messages.append({"role": "assistant", "content": f"Answer {i} explains topic {i}. {filler}"})
    return messages


def tool_turn(i: int) -> list[dict[str, Any]]:
    call_id = f"call_{i}"
    return [
        {"role": "user", "content": f"What is the weather in city {i}?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "weather", "arguments": json.dumps({"city": f"c{i}"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": f"sunny, {20 + i} degrees " * 10},
        {"role": "assistant", "content": f"It is sunny in city {i}."},
    ]


def tokens_of(messages: list[dict[str, Any]]) -> int:
    return sum(n + 4 for n in count_texts([counted_text(m) for m in messages]))


@pytest.mark.parametrize("strategy", ["drop", "summarize"])
@pytest.mark.parametrize("budget", [400, 800, 2000])
def test_the_budget_is_respected_and_system_and_last_turns_stay(strategy: str, budget: int) -> None:
    messages = conversation(40)
    config = ContextCompressionPlugin(max_tokens=budget, keep_last_turns=3, strategy=strategy)
    out, outcome, _ = compress(messages, config)
    assert outcome.compressed and not outcome.over_budget
    assert outcome.tokens_before == tokens_of(messages) > budget
    assert outcome.tokens_after == tokens_of(out) <= budget  # the reported count is the real one
    assert out[0] is SYSTEM
    assert out[-6:] == messages[-6:]  # the last 3 turns, untouched
    kept = [m for m in out if m in messages]
    assert kept == [m for m in messages if m in kept]  # order preserved
    assert outcome.tokens_saved == outcome.tokens_before - outcome.tokens_after
    # the oldest turns went first: what was dropped is a prefix of the turns
    first_kept_user = next(m for m in out[1:] if m.get("role") == "user" and m in messages)
    dropped_users = [m for m in messages[1 : messages.index(first_kept_user)] if m["role"] == "user"]
    assert len(dropped_users) == outcome.turns_dropped
    summaries = [m for m in out if m not in messages]
    if strategy == "summarize":
        assert len(summaries) == 1 and summaries[0]["role"] == "system"
        assert summaries[0]["content"].startswith(f"Summary of {outcome.turns_dropped} earlier")
        assert out.index(summaries[0]) == 1  # where the dropped turns were
        assert "- user: Question 0 is about topic 0." in summaries[0]["content"] or budget < 500
    else:
        assert summaries == []


def test_drop_keeps_as_many_turns_as_fit() -> None:
    """Dropping one turn fewer would not fit: no turn is dropped needlessly."""
    messages = conversation(20)
    config = ContextCompressionPlugin(max_tokens=700, keep_last_turns=2)
    out, outcome, _ = compress(messages, config)
    first_kept = out.index(next(m for m in out[1:]))
    restored = [
        *out[:first_kept],
        *messages[messages.index(out[first_kept]) - 2 : messages.index(out[first_kept])],
    ]
    assert tokens_of(restored + out[first_kept:]) > 700 >= outcome.tokens_after


def test_a_conversation_within_budget_is_untouched_and_idempotent() -> None:
    messages = conversation(3)
    config = ContextCompressionPlugin(max_tokens=10_000)
    out, outcome, _ = compress(messages, config)
    assert out is messages and not outcome.compressed and outcome.turns_dropped == 0
    assert outcome.tokens_after == outcome.tokens_before
    squeezed, _, _ = compress(conversation(40), ContextCompressionPlugin(max_tokens=600))
    again, second, _ = compress(squeezed, ContextCompressionPlugin(max_tokens=600))
    assert again is squeezed and not second.compressed  # compressing twice changes nothing more


def test_a_tool_call_moves_with_its_results() -> None:
    messages: list[dict[str, Any]] = [SYSTEM]
    for i in range(12):
        messages += tool_turn(i)
    config = ContextCompressionPlugin(max_tokens=500, keep_last_turns=2, strategy="summarize")
    out, outcome, _ = compress(messages, config)
    assert outcome.compressed and outcome.tokens_after <= 500
    for index, message in enumerate(out):
        if message.get("tool_calls"):
            ids = {c["id"] for c in message["tool_calls"]}
            assert {m["tool_call_id"] for m in out[index + 1 : index + 1 + len(ids)]} == ids
        if message.get("role") == "tool":
            owner = next(m for m in reversed(out[:index]) if m.get("role") == "assistant")
            assert message["tool_call_id"] in {c["id"] for c in owner.get("tool_calls") or []}
    summary = next(m for m in out if m not in messages)
    assert "called weather" in summary["content"] and "sunny, 20" not in summary["content"]


def test_system_messages_in_the_middle_stay_in_place_and_keep_system_false_drops_them() -> None:
    messages = conversation(10)
    messages.insert(7, {"role": "system", "content": "Mid-conversation instruction."})
    out, _, _ = compress(messages, ContextCompressionPlugin(max_tokens=400, keep_last_turns=1))
    assert [m for m in out if m["role"] == "system"] == [SYSTEM, messages[7]]
    out, outcome, _ = compress(
        messages, ContextCompressionPlugin(max_tokens=400, keep_last_turns=1, keep_system=False)
    )
    assert SYSTEM not in out and outcome.tokens_after <= 400


def test_when_the_kept_part_alone_is_too_long_it_reports_over_budget() -> None:
    messages = conversation(6, words=80)
    out, outcome, _ = compress(messages, ContextCompressionPlugin(max_tokens=100, keep_last_turns=4))
    assert outcome.over_budget and outcome.turns_dropped == 2
    assert out == [SYSTEM, *messages[-8:]]


def test_a_disabled_plugin_changes_nothing() -> None:
    messages = conversation(30)
    out, outcome, _ = compress(messages, ContextCompressionPlugin(enabled=False, max_tokens=100))
    assert out is messages and not outcome.compressed


def test_token_counts_are_remembered_by_text_and_bounded() -> None:
    from app.pipeline.compression import _CountCache

    cache = _CountCache(size=3)
    texts = ["one two three", "four", "five six", "seven"]
    first = cache.counts(texts)
    assert first == [3, 1, 2, 1] == count_texts(texts)
    assert len(cache._counts) == 3  # the oldest evicted
    assert cache.counts(texts[::-1]) == first[::-1]


def test_lead_sentence() -> None:
    assert lead_sentence("First one. Second one.") == "First one."
    assert lead_sentence("  Why? Because.") == "Why?"
    assert lead_sentence(" ".join(["w"] * 60)).endswith("...")


@pytest.mark.parametrize(
    "configuration, path",
    [
        ({}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 1000, "strategy": "llm"}, "strategy"),
        ({"max_tokens": 1000, "keep_last_turns": 0}, "keep_last_turns"),
        ({"max_tokens": 1000, "budget": 5}, "budget"),
    ],
)
def test_a_bad_configuration_is_rejected_with_its_path(configuration: dict[str, Any], path: str) -> None:
    with pytest.raises(ValidationError) as raised:
        ContextCompressionPlugin.model_validate(configuration)
    assert raised.value.errors()[0]["loc"][0] == path
    document = with_plugin(configuration)
    with pytest.raises(ConfigError) as loaded:
        parse_config(document)
    assert f"routing.decisions[0].plugins[0].configuration.{path}" in str(loaded.value)


def with_plugin(configuration: dict[str, Any], base_url: str = "http://127.0.0.1:9/v1") -> dict[str, Any]:
    document = base_document(base_url)
    document["routing"]["decisions"][0]["plugins"] = [
        {"type": "context_compression", "configuration": configuration}
    ]
    return document


def test_preview_reports_retained_targets_and_dropped_turns() -> None:
    messages = conversation(10)
    preview = preview_context_compression({"max_tokens": 500, "keep_last_turns": 2}, messages)
    assert preview.mode == "preview" and preview.persisted is False and preview.backend_calls == 0
    dropped = {i for turn in preview.dropped for i in turn.indices}
    retained = {r.index: r.reason for r in preview.retained}
    assert set(retained) | dropped == set(range(len(messages))) and not set(retained) & dropped
    assert retained[0] == "system" and retained[len(messages) - 1] == "last_turns"
    assert all(turn.roles == ["user", "assistant"] for turn in preview.dropped)
    assert preview.messages == [messages[i] for i in sorted(retained)]
    assert preview.outcome.tokens_after <= 500


async def test_the_pipeline_compresses_once_and_says_so() -> None:
    document = with_plugin({"max_tokens": 400, "keep_last_turns": 2})
    pipeline = RouterPipeline(parse_config(document).config)
    messages = conversation(20)
    messages[-2]["content"] += " what is the integral of x"  # the keyword decision `math`
    plan = await pipeline.route({"model": "MoM", "messages": messages})
    assert plan.decision == "math"
    forwarded = plan.body["messages"]
    assert plan.compression is not None and plan.compression.compressed
    assert tokens_of(forwarded) == plan.compression.tokens_after <= 400
    assert forwarded[-4:] == messages[-4:] and forwarded[0] == SYSTEM
    assert plan.response_headers[HEADER] == (
        f"dropped={plan.compression.turns_dropped},tokens_before={plan.compression.tokens_before},"
        f"tokens_after={plan.compression.tokens_after},strategy=drop"
    )
    counters = pipeline.services.metrics.recorder.snapshot("t").counters
    seen = counters["svc_router_context_compression_requests_total"]
    assert seen == {'["default", "math", "true", "false"]': 1.0}
    # a short one through the same decision: untouched, no header, counted as seen
    short = [{"role": "user", "content": "what is the integral of x"}]
    plan = await pipeline.route({"model": "MoM", "messages": short})
    assert plan.body["messages"] == short and HEADER not in plan.response_headers
    # a request another decision routes is not compressed at all
    plan = await pipeline.route({"model": "MoM", "messages": conversation(20)})
    assert plan.decision != "math" and plan.compression is None and len(plan.body["messages"]) == 41
