"""Long-term memories end to end, through the OpenAI SDK on both front doors (the Ingress,
and Envoy with the ext_proc bridge): user A says who they are and what they prefer; A's next
request carries the recalled memory to the fake upstream as a system message (and the
answer says how many in x-vsr-memories-recalled and routing_metadata); B's request never
does, and the memories API lists A's memories under A's scope only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.pipeline.memory.plugin import PREAMBLE
from tests.contract.answers import Answer, sdk_chat, user
from tests.contract.conftest import DOORS, FrontDoors, Upstreams


def memory_document(up: Upstreams) -> dict[str, Any]:
    memory = {"type": "memory", "configuration": {"scope": "user", "recall_top_k": 3}}
    return up.document([{"name": "assistant", "modelRefs": [{"model": "general"}], "plugins": [memory]}])


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    return front_doors(memory_document(upstreams))


def ask(url: str, text: str, who: str) -> Answer:
    return sdk_chat(url, user(text), extra_headers={"x-user-id": who})


def recalled_system(upstreams: Upstreams) -> str | None:
    return upstreams.forwarded_system(PREAMBLE)


def test_a_users_memory_reaches_their_next_request_and_never_another_users(
    doors: FrontDoors, upstreams: Upstreams
) -> None:
    for door in DOORS:
        doors.forget()
        upstreams.reset()
        url = doors.url(door)
        told = ask(url, "my name is Ada and I prefer answers in French", "ada")
        doors.settle(door)  # the answer is sent; the memory is written after it
        assert told.status == 200 and told.headers["x-vsr-memories-recalled"] == "0", (door, told.headers)
        assert recalled_system(upstreams) is None

        again = ask(url, "What is my name?", "ada")
        doors.settle(door)
        injected = recalled_system(upstreams)
        assert injected is not None and "The user's name is Ada." in injected, (
            door,
            upstreams.chat.requests[-1].body,
        )
        count = int(again.headers["x-vsr-memories-recalled"])
        assert count >= 1 and again.body["routing_metadata"]["memories_recalled"] == count, door

        other = ask(url, "What is my name?", "bob")
        doors.settle(door)
        assert recalled_system(upstreams) is None, door
        assert other.headers["x-vsr-memories-recalled"] == "0" and "Ada" not in str(
            upstreams.chat.requests[-1].body
        )

        listing = httpx.get(
            f"{doors.ingress_url}/api/v1/storage/memories", params={"scope": "user:ada"}, timeout=60
        )
        assert sorted(m["text"] for m in listing.json()["data"]) == [
            "The user prefers answers in French.",
            "The user's name is Ada.",
        ], door
        bobs = httpx.get(
            f"{doors.ingress_url}/api/v1/storage/memories", params={"scope": "user:bob"}, timeout=60
        )
        assert bobs.json()["total"] == 0, door
