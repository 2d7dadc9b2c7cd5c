"""The `request_params` plugin through the OpenAI SDK on both front doors (the Ingress, and
Envoy with the ext_proc bridge): the fake upstream receives the request with the blocked
parameters removed and max_tokens and n clamped; a decision without the plugin forwards the
client's parameters as sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.contract.answers import Answer, sdk_chat, user
from tests.contract.conftest import DOORS, FrontDoors, Upstreams

PARAMS = {"blocked_params": ["logprobs", "top_logprobs"], "max_tokens_limit": 64, "max_n": 1}


def params_document(up: Upstreams) -> dict[str, Any]:
    guarded = {
        "name": "guarded",
        "rules": {"type": "keyword", "name": "limits"},
        "modelRefs": [{"model": "guarded"}],
        "plugins": [{"type": "request_params", "configuration": PARAMS}],
    }
    signals = {"keywords": [{"name": "limits", "keywords": ["budget"]}]}
    return up.document([guarded], signals, models=("open", "guarded"))


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    return front_doors(params_document(upstreams))


def ask(url: str, text: str) -> Answer:
    return sdk_chat(url, user(text), max_tokens=4000, n=3, logprobs=True, top_logprobs=2, temperature=0.2)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Keep this on a budget: what is 2 + 2?", {"model": "guarded", "max_tokens": 64, "n": 1}),
        (
            "What is 2 + 2?",
            {"model": "open", "max_tokens": 4000, "n": 3, "logprobs": True, "top_logprobs": 2},
        ),
    ],
    ids=["clamped", "untouched"],
)
def test_the_upstream_receives_the_guarded_parameters_on_both_doors(
    doors: FrontDoors, upstreams: Upstreams, text: str, expected: dict[str, Any]
) -> None:
    for door in DOORS:
        upstreams.reset()
        answer = ask(doors.url(door), text)
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        body = upstreams.chat.requests[-1].body
        assert {k: body.get(k) for k in expected} == expected, (door, body)
        assert body["temperature"] == 0.2, door  # what the plugin does not name passes as sent
        if expected["model"] == "guarded":
            assert "logprobs" not in body and "top_logprobs" not in body, door
