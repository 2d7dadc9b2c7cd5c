"""API keys are one contract on both front doors (the Ingress, and the ext_proc bridge behind a
real Envoy, over one key gate and one pipeline): the same 401 without a key, 403 for a model
outside the grants, MoM inside the grants, and a budget near its limit stepped down to the
cheaper model with the same header and metadata."""

from __future__ import annotations

from typing import Any

import httpx
import openai
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


def sdk(doors: FrontDoors, door: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{doors.url(door)}/v1", max_retries=0, timeout=60)


def test_models_list_only_the_granted_models_alike(doors: FrontDoors) -> None:
    cheap_only = issue(doors, name="list-cheap", models=["cheap"])
    for door in (INGRESS, ENVOY):
        assert [m.id for m in sdk(doors, door, cheap_only).models.list()] == ["MoM", "cheap"], door
        with pytest.raises(openai.AuthenticationError) as refused:
            sdk(doors, door, "sk-svc-unknown").models.list()
        assert refused.value.code == "invalid_api_key", door


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/v1/responses/resp_x"),
        ("POST", "/v1/decisions"),
    ],
)
def test_no_data_plane_route_passes_without_a_key_on_either_door(
    doors: FrontDoors, method: str, path: str
) -> None:
    for door in (INGRESS, ENVOY):
        answer = httpx.request(method, f"{doors.url(door)}{path}", json={}, timeout=30)
        assert answer.status_code == 401, (door, path, answer.text)
        assert answer.json()["error"]["code"] == "missing_api_key", (door, path)


def test_envoy_forwards_no_other_api_without_a_key(doors: FrontDoors) -> None:
    """A path the router does not drive goes to the default model's backend as it came, but
    only with a known key: a listener that requires keys lets nothing through without one."""
    url = f"{doors.url(ENVOY)}/v1/embeddings"
    refused = httpx.post(url, json={"input": "x"}, timeout=30)
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "missing_api_key")
    key = issue(doors, name="passthrough", models=["cheap"])
    forwarded = httpx.post(url, json={"input": "x"}, headers={"x-api-key": key}, timeout=30)
    assert forwarded.status_code == 404  # the fake backend's answer: it has no embeddings


def test_another_keys_response_is_404_as_if_absent(doors: FrontDoors) -> None:
    mine = sdk(doors, INGRESS, issue(doors, name="resp-mine", models=["cheap"]))
    theirs = sdk(doors, INGRESS, issue(doors, name="resp-theirs", models=["cheap"]))
    created = mine.responses.create(model="MoM", input="hello there")
    doors.settle(INGRESS)
    assert mine.responses.retrieve(created.id).id == created.id
    with pytest.raises(openai.NotFoundError) as refused:
        theirs.responses.retrieve(created.id)
    assert refused.value.code == "response_not_found"


def test_a_listeners_grants_bound_every_caller_alike(front_doors: Any, upstreams: Upstreams) -> None:
    """Without keys required the listener's grants alone apply; a key never widens them."""
    document = keyed(upstreams.chat.host_url, required=False, listener_models=["cheap", "other"])
    bounded: FrontDoors = front_doors(document)
    wide = issue(bounded, name="wide", models=["pricey", "cheap"])
    seen = {
        door: [
            outcome(chat(bounded, door, None)),
            outcome(chat(bounded, door, None, "pricey")),
            outcome(chat(bounded, door, None, "other")),
            outcome(chat(bounded, door, wide, "other")),
            [m.id for m in sdk(bounded, door, wide).models.list()],
        ]
        for door in (INGRESS, ENVOY)
    }
    assert (
        seen[INGRESS]
        == seen[ENVOY]
        == [
            (200, None, "cheap"),
            (403, "model_not_granted", None),
            (200, None, "other"),
            (403, "model_not_granted", None),
            ["MoM", "cheap"],
        ]
    )
