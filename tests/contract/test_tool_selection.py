"""The `tool_selection` and `tools` plugins through the OpenAI SDK on both front doors (the
Ingress, and Envoy with the ext_proc bridge): the fake upstream receives only the tools the
decision keeps, and the client sees how many in x-tools-selected.

Real encoder (the router's MiniLM, as the embedding signals use it): a request offering 8
tools whose decision has `tool_selection` top_k=2 reaches the upstream with the 2 its
question needs; a decision with a static `tools` deny list drops that tool."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.contract.answers import Answer, sdk_chat, user
from tests.contract.conftest import DOORS, FrontDoors, Upstreams


def tool(name: str, description: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {}},
        },
    }


TOOLS = [
    tool("get_weather", "Get the current weather and forecast for a city"),
    tool("search_flights", "Search for airline flights between two airports on a date"),
    tool("book_hotel", "Book a hotel room in a city for given dates"),
    tool("send_email", "Send an email message to a recipient"),
    tool("create_calendar_event", "Create an event in the user's calendar"),
    tool("convert_currency", "Convert an amount of money from one currency to another"),
    tool("translate_text", "Translate text from one language to another"),
    tool("delete_file", "Delete a file from the user's drive"),
]


def tools_document(up: Upstreams) -> dict[str, Any]:
    def decision(name: str, keyword: str, plugins: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "name": name,
            "rules": {"type": "keyword", "name": keyword},
            "modelRefs": [{"model": "agent"}],
            "plugins": plugins,
        }

    selection = {"type": "tool_selection", "configuration": {"top_k": 2, "similarity_threshold": 0.2}}
    decisions = [
        decision("assistant", "assist", [selection]),
        decision("files", "files", [{"type": "tools", "configuration": {"deny": ["delete_file"]}}]),
    ]
    signals = {
        "keywords": [
            {"name": "assist", "keywords": ["assistant"]},
            {"name": "files", "keywords": ["cleanup"]},
        ]
    }
    return up.document(decisions, signals, models=("agent",))


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    return front_doors(tools_document(upstreams))


def ask(url: str, text: str) -> Answer:
    return sdk_chat(url, user(text), tools=TOOLS)


def forwarded_tools(upstreams: Upstreams) -> list[str]:
    body = upstreams.chat.requests[-1].body
    return [t["function"]["name"] for t in body.get("tools") or []]


CASES = [
    (
        "assistant: flights and weather",
        "Dear assistant, find me a flight from Boston to Denver on Friday and tell me the weather forecast there.",
        ["get_weather", "search_flights"],
    ),
    (
        "assistant: currency and translation",
        "Dear assistant, how many euros is 250 US dollars, and translate 'thank you' into Japanese?",
        ["convert_currency", "translate_text"],
    ),
    (
        "static deny",
        "Run the cleanup of my old documents.",
        [t["function"]["name"] for t in TOOLS if t["function"]["name"] != "delete_file"],
    ),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in CASES], ids=[n for n, _, _ in CASES])
def test_the_upstream_receives_only_the_selected_tools_on_both_doors(
    doors: FrontDoors, upstreams: Upstreams, text: str, expected: list[str]
) -> None:
    for door in DOORS:
        upstreams.reset()
        answer = ask(doors.url(door), text)
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        assert forwarded_tools(upstreams) == expected, door
        assert answer.headers["x-tools-selected"] == str(len(expected)), (door, answer.headers)
