"""Agent traffic's text (app/common/chat_text.py): harness reminders and compaction summaries
are set apart from the human's ask, a pending tool call is seen in both layouts, and each
text-reading rule reads the parts its `read` names (docs/routing-quality.md "Agent traffic")."""

from __future__ import annotations

import asyncio

import numpy as np

from app.common.chat_text import (
    ask_text,
    harness_texts,
    human_ask,
    is_ask,
    is_compaction,
    pending_tool_call,
    read_digest,
)
from app.config.loader import parse_config
from app.pipeline import RouterPipeline
from app.pipeline.services import PipelineServices

REMINDER = "<system-reminder>The user's calendar shows a dentist appointment at 3pm.</system-reminder>"
SUMMARY = (
    "This session is being continued from a previous conversation that ran out of context. "
    "Summary: we discussed tax law and refund deadlines."
)


def call(name: str = "search") -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}],
    }


def tool_msg(text: str) -> dict:
    return {"role": "tool", "tool_call_id": "call_1", "content": text}


def test_reminders_are_taken_out_of_the_ask_and_a_reminder_only_turn_is_no_ask():
    turn = {
        "role": "user",
        "content": [{"type": "text", "text": REMINDER}, {"type": "text", "text": "Fix the bug"}],
    }
    assert ask_text(turn["content"]) == "Fix the bug"
    assert is_ask(turn)
    only = {"role": "user", "content": REMINDER}
    assert not is_ask(only)
    messages = [
        {"role": "user", "content": "Refactor the parser"},
        {"role": "assistant", "content": "ok"},
        only,
    ]
    assert human_ask(messages) == "Refactor the parser"
    assert harness_texts(messages) == [REMINDER]


def test_a_compaction_summary_is_no_ask():
    assert is_compaction(SUMMARY)
    assert is_compaction("<summary>we talked about taxes</summary>")
    assert not is_compaction("Please write a summary of this text: <summary> tags are fine")
    messages = [{"role": "user", "content": SUMMARY}, {"role": "user", "content": "Now add unit tests"}]
    assert human_ask(messages) == "Now add unit tests"
    assert human_ask([{"role": "user", "content": "What is 2+2?"}, {"role": "user", "content": SUMMARY}]) == (
        "What is 2+2?"
    )
    assert harness_texts(messages) == [SUMMARY]


def test_a_tool_result_turn_with_a_reminder_is_no_ask_messages_style():
    turn = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "stock prices fell 3%"},
            {"type": "text", "text": REMINDER},
        ],
    }
    assert not is_ask(turn)
    messages = [{"role": "user", "content": "Write a sort function in Rust"}, call(), turn]
    assert human_ask(messages) == "Write a sort function in Rust"


def test_pending_tool_call_in_both_layouts():
    ask = {"role": "user", "content": "Find the bug"}
    assert pending_tool_call([ask, call(), tool_msg("file contents")])
    assert pending_tool_call(
        [ask, call(), tool_msg("a"), tool_msg("b"), {"role": "user", "content": REMINDER}]
    )
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "grep", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}
    assert pending_tool_call([ask, use, result])
    # a new human ask closes the loop; an answer without tool calls is no loop; a bare call is not answered
    assert not pending_tool_call([ask, call(), tool_msg("x"), {"role": "assistant", "content": "done"}, ask])
    assert not pending_tool_call([ask, call(), tool_msg("x"), ask])
    assert not pending_tool_call([ask, {"role": "assistant", "content": "hi"}])
    assert not pending_tool_call([ask, call()])
    assert not pending_tool_call([ask])


def test_read_digest_is_short_stable_and_not_the_text():
    assert read_digest("secret text") == read_digest("secret text")
    assert read_digest("secret text") != read_digest("other text")
    assert len(read_digest("secret text")) == 16 and "secret" not in read_digest("secret text")


CONFIG = {
    "version": "v0.3",
    "providers": {
        "defaults": {"default_model": "general"},
        "models": [
            {"name": m, "backend_refs": [{"base_url": "http://127.0.0.1:9/v1"}]}
            for m in ("general", "finance", "code")
        ],
    },
    "routing": {
        "signals": {
            "keywords": [
                {"name": "money", "operator": "OR", "keywords": ["stock", "tax"]},
                {
                    "name": "money_anywhere",
                    "operator": "OR",
                    "keywords": ["stock", "tax"],
                    "read": ["tool_results"],
                },
                {"name": "code", "operator": "OR", "keywords": ["function", "bug"]},
            ]
        },
        "decisions": [
            {
                "name": "finance",
                "priority": 20,
                "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "money"}]},
                "modelRefs": [{"model": "finance"}],
            },
            {
                "name": "tools_money",
                "priority": 5,
                "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "money_anywhere"}]},
                "modelRefs": [{"model": "general"}],
            },
            {
                "name": "code",
                "priority": 10,
                "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "code"}]},
                "modelRefs": [{"model": "code"}],
            },
        ],
    },
}


async def _embed(texts: list[str]) -> np.ndarray:
    return np.ones((len(texts), 4), dtype=np.float32) / 2


def test_routing_follows_the_ask_not_the_tool_result_and_says_what_each_rule_read():
    pipeline = RouterPipeline(parse_config(CONFIG).config, PipelineServices(embed=_embed))
    body = {
        "model": "MoM",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the bug in the sort function"},
            call("fetch_news"),
            tool_msg("Stock markets fell; the tax office extended the deadline."),
            {
                "role": "user",
                "content": "<system-reminder>Remind: tax and stock news pending.</system-reminder>",
            },
        ],
    }
    plan = asyncio.run(pipeline.route(body))
    assert plan.decision == "code" and plan.selected_model == "code"
    matches = {m.name: m for m in plan.signals.matches}
    assert not matches["money"].matched and matches["money"].read == ["latest_ask"]
    assert matches["money_anywhere"].matched and matches["money_anywhere"].read == [
        "latest_ask",
        "tool_results",
    ]
    assert matches["money"].read_digest == read_digest("Fix the bug in the sort function")
    assert matches["money_anywhere"].read_digest != matches["money"].read_digest
    preview = asyncio.run(pipeline.preview(body))
    assert {s["name"]: s["read"] for s in preview["signals"]}["money_anywhere"] == [
        "latest_ask",
        "tool_results",
    ]
    assert all("Stock" not in str(s["read_digest"]) for s in preview["signals"])
