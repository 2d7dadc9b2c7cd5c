"""Issued API keys through the Ingress app in process (the real pipeline, the OpenAI SDK, a fake
upstream on 127.0.0.1): the management API issues, lists and revokes them; the data plane
answers 401 without a known key, 403 for an ungranted model, keeps MoM inside the grants, steps
a budget near its limit down to the cheaper model and answers 429 at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from app.api.app import StaticConfigView, create_app
from app.api.parts import DataPlaneStores, IngressParts
from app.config.loader import parse_config
from app.keys.records import KeyStore
from app.management.service import Management
from app.pipeline import PipelineServices, RouterPipeline
from app.upstream.client import UpstreamClient
from tests.fakes.configs import keyed
from tests.fakes.upstream import FakeUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="llm") as fake:
        yield fake


def ingress(
    upstream: FakeUpstream,
    keys: KeyStore | None = None,
    required: bool = True,
    listener_models: list[str] | None = None,
) -> FastAPI:
    config = parse_config(keyed(upstream.base_url, required=required, listener_models=listener_models)).config
    view = StaticConfigView(config)
    parts = IngressParts(data_plane=DataPlaneStores(keys=keys or KeyStore(cache_seconds=0)))
    pipeline = RouterPipeline(config, PipelineServices())
    return create_app(
        pipeline, UpstreamClient(), view, management=Management(config, config_view=view), parts=parts
    )


def http(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc")


def sdk(app: FastAPI, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=key, base_url="http://svc/v1", http_client=http(app), max_retries=0)


async def issue(app: FastAPI, **spec: Any) -> dict[str, Any]:
    async with http(app) as client:
        answer = await client.post("/api/v1/keys", json=spec)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


async def chat(app: FastAPI, key: str, model: str = "MoM") -> Any:
    return await sdk(app, key).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hello there"}]
    )


async def test_issue_list_revoke_and_the_secret_is_shown_once(upstream: FakeUpstream) -> None:
    store = KeyStore(cache_seconds=0)
    app = ingress(upstream, store)
    issued = await issue(app, name="ci", models=["cheap"])
    assert issued["key"].startswith("sk-svc-") and issued["models"] == ["cheap"]
    async with http(app) as client:
        listed = (await client.get("/api/v1/keys")).json()["data"]
        assert [k["id"] for k in listed] == [issued["id"]]
        assert issued["key"] not in (await client.get("/api/v1/keys")).text  # never again
        assert issued["key"] not in store.backend.load_json()  # stored as a hash only
        bad = await client.post("/api/v1/keys", json={"name": "x", "models": ["nope"]})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_INPUT"
        audit = (await client.get("/api/v1/observability/audit")).json()
        assert "key.create" in {e["action"] for e in audit["entries"]}
        assert (await chat(app, issued["key"])).http_response.status_code == 200
        assert (await client.delete(f"/api/v1/keys/{issued['id']}")).status_code == 200
        assert (await client.delete(f"/api/v1/keys/{issued['id']}")).status_code == 404
    with pytest.raises(openai.AuthenticationError) as revoked:
        await chat(app, issued["key"])
    assert revoked.value.body["code"] == "invalid_api_key"


async def test_no_key_or_an_unknown_one_is_401_where_keys_are_required(upstream: FakeUpstream) -> None:
    app = ingress(upstream)
    with pytest.raises(openai.AuthenticationError) as unknown:
        await chat(app, "sk-svc-guessed")
    assert unknown.value.status_code == 401 and unknown.value.body["code"] == "invalid_api_key"
    async with http(app) as client:
        body = {"model": "MoM", "messages": [{"role": "user", "content": "hi"}]}
        missing = await client.post("/v1/chat/completions", json=body)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "missing_api_key"
    assert missing.json()["error"]["type"] == "authentication_error"


async def test_a_listener_without_keys_serves_anyone_and_applies_a_known_keys_grants(
    upstream: FakeUpstream,
) -> None:
    app = ingress(upstream, required=False)
    assert (await chat(app, "sk-anything")).http_response.headers["x-selected-model"] == "pricey"
    issued = await issue(app, name="cheap-only", models=["cheap"])
    assert (await chat(app, issued["key"])).http_response.headers["x-selected-model"] == "cheap"


async def test_grants_keep_mom_inside_and_refuse_an_explicit_other_model(upstream: FakeUpstream) -> None:
    app = ingress(upstream)
    cheap_only = await issue(app, name="a", models=["cheap"])
    both = await issue(app, name="b", models=["cheap", "pricey"])
    assert (await chat(app, cheap_only["key"])).http_response.headers["x-selected-model"] == "cheap"
    assert (await chat(app, both["key"])).http_response.headers["x-selected-model"] == "pricey"
    assert (await chat(app, both["key"], "pricey")).http_response.status_code == 200
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await chat(app, cheap_only["key"], "other")
    error = refused.value.body
    assert (error["type"], error["code"]) == ("security_violation", "model_not_granted")
    assert error["details"] == {"model": "other", "granted": ["cheap"], "action_taken": "block"}
    assert upstream.requests[-1].body["model"] != "other"  # nothing reached a backend for it


async def test_a_budget_steps_down_near_its_limit_then_answers_429(upstream: FakeUpstream) -> None:
    app = ingress(upstream)
    probe = await issue(app, name="probe", models=["cheap", "pricey"])
    first = (await chat(app, probe["key"])).parse()
    cost = first.model_extra["routing_metadata"]["cost"]  # one pricey answer
    assert cost > 0
    # Spent after one answer: 2/3 of the budget, past step_down_at 0.5, under the limit.
    near = await issue(
        app, name="near", models=["cheap", "pricey"], budget={"usd": cost * 1.5, "period": "day"}
    )
    assert (await chat(app, near["key"])).http_response.headers["x-selected-model"] == "pricey"
    stepped = await chat(app, near["key"])
    assert stepped.http_response.headers["x-selected-model"] == "cheap"
    assert stepped.http_response.headers["x-vsr-budget"] == "step_down"
    budget = stepped.parse().model_extra["routing_metadata"]["budget"]
    assert (budget["state"], budget["from_model"], budget["to_model"]) == ("step_down", "pricey", "cheap")
    # Under the whole cost of one answer: the first is served, the next is 429 until the period ends.
    small = await issue(app, name="small", models=["pricey"], budget={"usd": cost / 2, "period": "day"})
    assert (await chat(app, small["key"])).http_response.status_code == 200
    with pytest.raises(openai.RateLimitError) as limited:
        await chat(app, small["key"])
    error = limited.value.body
    assert error["code"] == "budget_exceeded"
    assert error["details"]["budget"]["usd"] == pytest.approx(cost / 2)
    assert error["details"]["budget"]["spent_usd"] == pytest.approx(cost, rel=1e-3)
    assert 1 <= int(limited.value.response.headers["retry-after"]) <= 86_400
    async with http(app) as client:
        listed = {k["name"]: k for k in (await client.get("/api/v1/keys")).json()["data"]}
    assert listed["small"]["spend"][0]["spent_usd"] == pytest.approx(cost, rel=1e-3)
    # The spend metric (pushed to :9190 with the replica's other metrics).
    recorder = app.state.plane.metrics.recorder
    spent = recorder.value("svc_router_api_key_spend_usd_total", key_id=small["id"], key_name="small")
    assert spent == pytest.approx(cost, rel=1e-3)
