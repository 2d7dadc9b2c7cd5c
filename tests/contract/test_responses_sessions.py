"""A Responses `previous_response_id` is a hard session lock (docs/configuration.md
"Session-aware routing"): through the OpenAI SDK's `responses.create`, a continuation is served
by the model that answered the stored response, even when its new ask wants another model and
a switch would be worth it; the same ask in a new conversation goes to its own model. The
Ingress only: it keeps the Responses store (the ext_proc bridge answers previous_response_id
with 400)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.contract.answers import sdk
from tests.contract.conftest import INGRESS, FrontDoors, Upstreams
from tests.fakes.configs import keyword_routing

ROUTES = [("finance", 20, ["tax", "stock"], "finance"), ("code", 10, ["bug", "function"], "code")]


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    # a switch worth 10 USD: without the lock every new ask would move the session
    return front_doors(keyword_routing(upstreams.chat.host_url, ROUTES, "general", switch_value=10.0))


def test_a_continued_response_stays_on_the_model_that_answered_it(doors: FrontDoors) -> None:
    client = sdk(doors.url(INGRESS))
    first = client.responses.with_raw_response.create(model="MoM", input="Fix the bug in this function.")
    assert first.headers["x-vsr-selected-model"] == "code"
    assert first.headers["x-vsr-session"] == "started"
    continued = client.responses.with_raw_response.create(
        model="MoM", input="What is the tax on stock dividends?", previous_response_id=first.parse().id
    )
    assert continued.parse().status == "completed"
    assert continued.headers["x-vsr-selected-decision"] == "finance"
    assert continued.headers["x-vsr-selected-model"] == "code"
    assert (continued.headers["x-vsr-session"], continued.headers["x-vsr-session-reason"]) == (
        "kept",
        "provider_state",
    )
    # the same ask, no stored response to continue: the session is new, the ask's model serves
    alone = client.responses.with_raw_response.create(
        model="MoM", input="What is the tax on stock dividends?"
    )
    assert alone.headers["x-vsr-selected-model"] == "finance"
    assert alone.headers["x-vsr-session"] == "started"


@pytest.fixture(scope="module")
def falling_back(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    """`code` is down; its decision falls back to `general`."""
    document = keyword_routing(upstreams.chat.host_url, ROUTES, "general", switch_value=10.0)
    for model in document["providers"]["models"]:
        if model["name"] == "code":
            model["backend_refs"] = [{"base_url": upstreams.dead_url}]
    for decision in document["routing"]["decisions"]:
        if decision["name"] == "code":
            decision["modelRefs"] = [{"model": "code"}, {"model": "general"}]
            decision["fallback"] = {"enabled": True, "max_attempts": 2}
    return front_doors(document)


def test_a_continuation_is_tied_to_the_model_that_answered_not_to_one_that_failed(
    falling_back: FrontDoors,
) -> None:
    client = sdk(falling_back.url(INGRESS))
    first = client.responses.with_raw_response.create(model="MoM", input="Fix the bug in this function.")
    assert first.parse().status == "completed"
    # the Router chose `code`; its backend refused and `general` answered
    assert first.headers["x-vsr-selected-model"] == "code"
    assert first.headers["x-selected-model"] == "general"
    continued = client.responses.with_raw_response.create(
        model="MoM", input="Now fix the other bug in this function.", previous_response_id=first.parse().id
    )
    assert continued.parse().status == "completed"
    # the stored answer is general's: the continuation is tied there, and the session (on
    # `code`, the Router's choice) moves to it
    assert continued.headers["x-vsr-selected-model"] == "general"
    assert (continued.headers["x-vsr-session"], continued.headers["x-vsr-session-reason"]) == (
        "switched",
        "provider_state",
    )
