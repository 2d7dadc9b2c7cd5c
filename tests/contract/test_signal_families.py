"""The preference, complexity, language, modality, fact_check and user_feedback signals decide
the route, through the
OpenAI SDK on both front doors (the Ingress, and Envoy with the ext_proc bridge).

One decision per family, each sending its matches to its own model (the chat fake serves them
all and names the model it was asked for), priorities so a request that several families
match goes where the table says; a request none matches goes to the default model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.contract.answers import Answer, Call, chat, sdk_chat
from tests.contract.conftest import DOORS, FrontDoors, Upstreams

DEFAULT = "general"
IMAGE_PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def families_document(up: Upstreams) -> dict[str, Any]:
    def model(name: str) -> dict[str, Any]:
        return {"name": name, "backend_refs": [{"base_url": up.chat.host_url}]}

    def decision(name: str, priority: int, kind: str, rule: str) -> dict[str, Any]:
        return {
            "name": name,
            "priority": priority,
            "rules": {"operator": "AND", "conditions": [{"type": kind, "name": rule}]},
            "modelRefs": [{"model": f"{name}-model"}],
        }

    names = ("retry", "vision", "german", "deep", "travel", "facts")
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": DEFAULT},
            "models": [model(DEFAULT), *(model(f"{n}-model") for n in names)],
        },
        "routing": {
            "signals": {
                "modality": [{"name": "image"}],
                "fact_check": [{"name": "needs_fact_check", "threshold": 0.6}],
                "user_feedbacks": [{"name": "wrong_answer"}],
                "language": [{"name": "de"}],
                "complexity": [
                    {
                        "name": "depth",
                        "threshold": 0.05,
                        "hard": {
                            "candidates": [
                                "prove this theorem rigorously",
                                "derive the equations of motion step by step",
                                "analyse the asymptotic complexity of this algorithm",
                            ]
                        },
                        "easy": {
                            "candidates": ["what is the capital of France", "hello there", "tell me a joke"]
                        },
                    }
                ],
                "preferences": [
                    {
                        "name": "trips",
                        "description": "planning trips: flights, hotels, itineraries and sights",
                        "examples": ["find me a cheap flight to Lisbon", "a good hotel near the Louvre"],
                    },
                    {
                        "name": "food",
                        "description": "recipes, ingredients and how to cook a meal",
                        "examples": ["how do I make pancakes without eggs"],
                    },
                ],
            },
            "decisions": [
                decision("retry", 50, "user_feedback", "wrong_answer"),
                decision("vision", 40, "modality", "image"),
                decision("german", 30, "language", "de"),
                decision("deep", 20, "complexity", "depth:hard"),
                decision("travel", 10, "preference", "trips"),
                decision("facts", 5, "fact_check", "needs_fact_check"),
            ],
        },
    }


def chat_messages(messages: list[dict[str, Any]]) -> Call:
    """A chat completion with these messages."""

    def call(url: str) -> Answer:
        return sdk_chat(url, messages)

    return call


def chat_parts(parts: list[dict[str, Any]]) -> Call:
    """A chat completion whose user message is a list of content parts."""
    return chat_messages([{"role": "user", "content": parts}])


COMPLAINT = [
    {"role": "user", "content": "What is the capital of Australia?"},
    {"role": "assistant", "content": "Sydney."},
    {"role": "user", "content": "That's wrong, it is Canberra."},
]


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    return front_doors(families_document(upstreams))


CASES: list[tuple[str, Call, str]] = [
    ("image part", chat_parts([{"type": "text", "text": "What is in this picture?"}, IMAGE_PART]), "vision"),
    ("german", chat("Kannst du mir bitte erklären, wie man eine Steuererklärung ausfüllt?"), "german"),
    ("hard question", chat("Prove that the square root of two is irrational."), "deep"),
    ("trip planning", chat("Which sights should I see during a weekend in Vienna?"), "travel"),
    ("factual question", chat("When did the Berlin Wall fall?"), "facts"),
    ("a complaint about the last answer", chat_messages(COMPLAINT), "retry"),
    ("none of them", chat("Write a limerick about a cat who loves naps."), ""),
]


@pytest.mark.parametrize("call, decision", [(c, d) for _, c, d in CASES], ids=[n for n, _, _ in CASES])
def test_each_family_routes_its_requests_on_both_doors(
    doors: FrontDoors, upstreams: Upstreams, call: Call, decision: str
) -> None:
    for door in DOORS:
        upstreams.reset()
        answer = call(doors.url(door))
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        model = f"{decision}-model" if decision else DEFAULT
        assert answer.headers["x-selected-model"] == model, (door, answer.headers)
        assert answer.headers.get("x-vsr-selected-decision", "") == decision, (door, answer.headers)
