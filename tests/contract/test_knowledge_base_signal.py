"""The `kb` signal decides the route, through the OpenAI SDK on both front doors.

A knowledge base of exemplars with two labels is created through the Ingress's management
route (202 pending, then active once the pipeline's encoder has embedded it); one decision
per label sends the requests nearest that label to its model, and a request near neither
goes to the default model. The matched rule is reported in x-vsr-matched-kb."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.contract.answers import chat
from tests.contract.conftest import DOORS, FrontDoors, Upstreams, wait_until

DEFAULT = "general"
KB = "topics"
COOKING = [
    "How long should I boil spaghetti?",
    "What temperature do I bake bread at?",
    "How do I make a creamy risotto?",
    "Which spices go well in a lentil curry?",
    "How do I keep pancakes from sticking to the pan?",
]
ASTRONOMY = [
    "How far away is the Andromeda galaxy?",
    "What causes a solar eclipse?",
    "Why does Mars look red in the night sky?",
    "How are black holes formed?",
    "What is a light year?",
]


def kb_document(up: Upstreams) -> dict[str, Any]:
    def decision(name: str, priority: int) -> dict[str, Any]:
        return {
            "name": name,
            "priority": priority,
            "rules": {"operator": "AND", "conditions": [{"type": "kb", "name": name}]},
            "modelRefs": [{"model": f"{name}-model"}],
        }

    signals = {
        "kb": [
            {"name": "cooking", "kb": KB, "labels": ["cooking"], "threshold": 0.3},
            {"name": "astronomy", "kb": KB, "labels": ["astronomy"], "threshold": 0.3},
        ]
    }
    decisions = [decision("cooking", 20), decision("astronomy", 10)]
    return up.document(decisions, signals, models=(DEFAULT, "cooking-model", "astronomy-model"))


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    doors = front_doors(kb_document(upstreams))
    entries = [{"text": t, "label": "cooking"} for t in COOKING]
    entries += [{"text": t, "label": "astronomy"} for t in ASTRONOMY]
    base = f"{doors.ingress_url}/api/v1/storage/knowledge-bases"
    with httpx.Client(timeout=30) as client:
        created = client.post(base, json={"name": KB, "entries": entries})
        if created.status_code != 409:  # the module's fixture ran before in this session
            assert created.status_code == 202, created.text
            assert created.json()["activation_status"] == "pending"

        def active() -> bool:
            return bool(client.get(f"{base}/{KB}").json()["activation_status"] == "active")

        wait_until(active, "the knowledge base to turn active")
    return doors


CASES = [
    ("a cooking question", "Should I salt the water before cooking pasta?", "cooking"),
    ("an astronomy question", "Which planet is closest to the Sun?", "astronomy"),
    ("neither", "Please review the indemnity clause of this contract.", ""),
]


@pytest.mark.parametrize("text, decision", [(t, d) for _, t, d in CASES], ids=[n for n, _, _ in CASES])
def test_kb_rules_route_their_label_on_both_doors(
    doors: FrontDoors, upstreams: Upstreams, text: str, decision: str
) -> None:
    for door in DOORS:
        upstreams.reset()
        answer = chat(text)(doors.url(door))
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        assert answer.headers["x-selected-model"] == (f"{decision}-model" if decision else DEFAULT), door
        assert answer.headers.get("x-vsr-selected-decision", "") == decision, (door, answer.headers)
        assert answer.headers.get("x-vsr-matched-kb", "") == decision, (door, answer.headers)
