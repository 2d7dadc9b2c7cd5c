"""PII masked and restored through the OpenAI SDK on both front doors (the Ingress, and Envoy
with the ext_proc bridge), over the real PII detector: the upstream, chat-style or
messages-style, receives placeholders; the client's stream, cut by the upstream into pieces
of three characters (so placeholders arrive split across chunks), carries every original
value; and the response cache, the replay records and the logs hold none of them (searched)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.contract.answers import sdk_chat, sdk_chat_stream, user
from tests.contract.conftest import DOORS, MESSAGES_KEY, FrontDoors, Upstreams

EMAIL, SSN = "ana.lopez@example.org", "431-27-5918"
ASK = f"Draft a short note to {EMAIL} confirming the SSN {SSN} on file."
CHAT_WORD, MESSAGES_WORD = "note", "letter"


def mask_document(up: Upstreams) -> dict[str, Any]:
    def decision(name: str, word: str, model: str) -> dict[str, Any]:
        return {
            "name": name,
            "rules": {"type": "keyword", "name": word},
            "modelRefs": [{"model": model}],
            "plugins": [
                {"type": "pii", "configuration": {"pii_types_allowed": ["PERSON"], "action": "mask"}},
                {"type": "semantic-cache", "configuration": {"enabled": True, "similarity_threshold": 0.99}},
                {"type": "router_replay", "configuration": {"capture_request_body": True, "capture_response_body": True}},
            ],
        }  # fmt: skip

    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "chat"},
            "models": [
                {"name": "chat", "backend_refs": [{"base_url": up.chat.host_url}]},
                {
                    "name": "claude",
                    "api_format": "messages",
                    "provider_model_id": "claude-test-1",
                    "backend_refs": [{"base_url": up.messages.base_url, "api_key": MESSAGES_KEY}],
                },
            ],
        },
        "routing": {
            "signals": {
                "keywords": [
                    {"name": CHAT_WORD, "operator": "OR", "keywords": [CHAT_WORD]},
                    {"name": MESSAGES_WORD, "operator": "OR", "keywords": [MESSAGES_WORD]},
                ]
            },
            "decisions": [decision("chat", CHAT_WORD, "chat"), decision("claude", MESSAGES_WORD, "claude")],
        },
    }


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    return front_doors(mask_document(upstreams))


def cache_text(doors: FrontDoors) -> str:
    cache = doors.cache
    return repr(list(cache._partitions)) + repr(list(cache._entries.values()))  # noqa: SLF001 (a test reads the store)


@pytest.mark.parametrize("word", [CHAT_WORD, MESSAGES_WORD], ids=["chat-upstream", "messages-upstream"])
def test_a_masked_stream_is_restored_at_the_client_and_stored_nowhere(
    doors: FrontDoors, upstreams: Upstreams, word: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    ask = ASK.replace(CHAT_WORD, word)
    fake = upstreams.chat if word == CHAT_WORD else upstreams.messages
    for door in DOORS:
        upstreams.reset()
        doors.forget()
        fake.configure(chunk_chars=3)
        answer = sdk_chat_stream(doors.url(door), user(ask))
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        assert answer.headers.get("x-vsr-pii-action") == "mask", door
        # the fake echoes what it received: the placeholders, restored on the way back
        assert EMAIL in answer.text and SSN in answer.text, (door, answer.text)
        assert "<EMAIL_ADDRESS_1>" not in answer.text and "<US_SSN_1>" not in answer.text, door
        received = json.dumps(fake.requests[-1].body)
        assert EMAIL not in received and SSN not in received, (door, received)
        assert "<EMAIL_ADDRESS_1>" in received and "<US_SSN_1>" in received, (door, received)
        assert len(doors.replays) == 1 and doors.replays[0]["pii_action"] == "mask", door
        replay = json.dumps(doors.replays)
        assert "<EMAIL_ADDRESS_1>" in replay, door  # the bodies were captured, masked
        kept = cache_text(doors) + replay + caplog.text
        assert EMAIL not in kept and SSN not in kept, door


def test_a_whole_answer_is_restored_and_the_cache_still_serves_other_requests(
    doors: FrontDoors, upstreams: Upstreams
) -> None:
    for door in DOORS:
        upstreams.reset()
        doors.forget()
        answer = sdk_chat(doors.url(door), user(ASK))
        doors.settle(door)
        assert answer.status == 200 and EMAIL in answer.text and SSN in answer.text, (door, answer.body)
        assert len(doors.cache) == 0, door  # a masked request neither looks up nor stores
        plain = sdk_chat(doors.url(door), user("Draft a short note thanking the team for the launch."))
        doors.settle(door)
        assert plain.status == 200 and plain.headers.get("x-vsr-pii-action") is None, door
        assert len(doors.cache) == 1, door  # the control: this decision does cache
