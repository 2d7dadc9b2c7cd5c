"""API keys are one contract on both front doors (the Ingress, and the ext_proc bridge behind a
real Envoy, over one key gate and one pipeline): the same 401 without a key, 403 for a model
outside the grants, MoM inside the grants, and a budget near its limit stepped down to the
cheaper model with the same header and metadata."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.contract.conftest import ENVOY, INGRESS, FrontDoors, Upstreams
from tests.fakes.configs import keyed


@pytest.fixture(scope="module")
def doors(front_doors: Any, upstreams: Upstreams) -> FrontDoors:
    return front_doors(keyed(upstreams.chat.host_url, other=False))  # type: ignore[no-any-return]


def issue(doors: FrontDoors, **spec: Any) -> str:
    answer = httpx.post(f"{doors.url(INGRESS)}/api/v1/keys", json=spec, timeout=30)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["key"])


def chat(doors: FrontDoors, door: str, key: str | None, model: str = "MoM") -> httpx.Response:
    headers = {"x-api-key": key} if key else {}
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}]}
    answer = httpx.post(f"{doors.url(door)}/v1/chat/completions", json=body, headers=headers, timeout=60)
    doors.settle(door)  # the completion (and the spend it settles) ran
    return answer


def outcome(answer: httpx.Response) -> tuple[int, str | None, str | None]:
    body = answer.json()
    code = body["error"]["code"] if "error" in body else None
    return answer.status_code, code, answer.headers.get("x-selected-model")


def test_keys_and_grants_answer_alike(doors: FrontDoors) -> None:
    cheap_only = issue(doors, name="cheap-only", models=["cheap"])
    seen = {
        door: [
            outcome(chat(doors, door, None)),
            outcome(chat(doors, door, "sk-svc-unknown")),
            outcome(chat(doors, door, cheap_only, "pricey")),
            outcome(chat(doors, door, cheap_only)),
        ]
        for door in (INGRESS, ENVOY)
    }
    assert (
        seen[INGRESS]
        == seen[ENVOY]
        == [
            (401, "missing_api_key", None),
            (401, "invalid_api_key", None),
            (403, "model_not_granted", None),
            (200, None, "cheap"),
        ]
    )


def test_a_budget_near_its_limit_steps_down_alike(doors: FrontDoors) -> None:
    probe = issue(doors, name="probe", models=["cheap", "pricey"])
    cost = chat(doors, INGRESS, probe).json()["routing_metadata"]["cost"]
    for door in (INGRESS, ENVOY):
        near = issue(
            doors,
            name=f"near-{door}",
            models=["cheap", "pricey"],
            budget={"usd": cost * 1.5, "period": "day"},
        )
        assert outcome(chat(doors, door, near)) == (200, None, "pricey")
        stepped = chat(doors, door, near)
        assert outcome(stepped) == (200, None, "cheap"), door
        assert stepped.headers["x-vsr-budget"] == "step_down", door
        budget = stepped.json()["routing_metadata"]["budget"]
        assert (budget["from_model"], budget["to_model"]) == ("pricey", "cheap"), door
