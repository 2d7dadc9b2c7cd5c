"""The context_compression plugin through the OpenAI SDK on both front doors (the Ingress, and
Envoy with the ext_proc bridge): a long conversation whose decision has the plugin reaches the
upstream compressed (system message and last turns kept, the oldest turns dropped, within the
budget) and the client sees x-vsr-context-compressed; a short one and one another decision
routes reach it untouched, without the header."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.pipeline.compression import HEADER, count_texts, counted_text
from tests.contract.answers import Answer, sdk_chat
from tests.contract.conftest import DOORS, FrontDoors, Upstreams
from tests.unit.pipeline.test_context_compression import conversation

BUDGET = 600
KEEP = 3


def compression_document(up: Upstreams) -> dict[str, Any]:
    compression = {
        "type": "context_compression",
        "configuration": {"max_tokens": BUDGET, "keep_last_turns": KEEP},
    }
    long_chat = {
        "name": "long-chat",
        "priority": 10,
        "rules": {"operator": "AND", "conditions": [{"type": "keyword", "name": "recap"}]},
        "modelRefs": [{"model": "long-model"}],
        "plugins": [compression],
    }
    signals = {"keywords": [{"name": "recap", "keywords": ["recap"]}]}
    return up.document([long_chat], signals, models=("general", "long-model"))


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    return front_doors(compression_document(upstreams))


def send(url: str, messages: list[dict[str, Any]]) -> Answer:
    return sdk_chat(url, messages)


def tokens(messages: list[dict[str, Any]]) -> int:
    return sum(n + 4 for n in count_texts([counted_text(m) for m in messages]))


def long_conversation() -> list[dict[str, Any]]:
    messages = conversation(40)
    messages.append({"role": "user", "content": "Please give me a short recap of the above."})
    return messages


def test_a_long_conversation_is_compressed_on_both_doors(doors: FrontDoors, upstreams: Upstreams) -> None:
    messages = long_conversation()
    for door in DOORS:
        upstreams.reset()
        answer = send(doors.url(door), messages)
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        assert answer.headers["x-vsr-selected-decision"] == "long-chat", (door, answer.headers)
        forwarded = upstreams.chat.requests[-1].body["messages"]
        assert forwarded[0] == messages[0], door  # the system message
        assert forwarded[-(2 * KEEP - 1) :] == messages[-(2 * KEEP - 1) :], door  # the last turns
        assert len(forwarded) < len(messages) and tokens(forwarded) <= BUDGET, door
        dropped = (len(messages) - len(forwarded)) // 2
        assert answer.headers[HEADER] == (
            f"dropped={dropped},tokens_before={tokens(messages)},tokens_after={tokens(forwarded)},strategy=drop"
        ), door


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "A quick recap of photosynthesis, please."}],  # the decision, short
        conversation(40),  # long, but another decision routes it
    ],
    ids=["short", "other decision"],
)
def test_other_requests_reach_the_upstream_untouched(
    doors: FrontDoors, upstreams: Upstreams, messages: list[dict[str, Any]]
) -> None:
    for door in DOORS:
        upstreams.reset()
        answer = send(doors.url(door), messages)
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        assert upstreams.chat.requests[-1].body["messages"] == messages, door
        assert HEADER not in answer.headers, door
