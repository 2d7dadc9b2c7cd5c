"""OpenAI SDK -> real Envoy :listener -> ext_proc bridge -> fake upstreams (no Ray)."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from app.common.ports import free_port
from tests.envoy.conftest import EnvoyStack, bridge_config, start_envoy
from tests.fakes.upstream import FakeUpstream


def client(stack: EnvoyStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.v1, api_key="unused", max_retries=0)


def test_routed_request_is_rewritten_forwarded_and_annotated(envoy_stack: EnvoyStack) -> None:
    before = envoy_stack.a.request_count
    raw = client(envoy_stack).chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": "What is the derivative of x^3?"}]
    )
    completion = raw.parse()
    assert envoy_stack.a.request_count == before + 1
    seen = envoy_stack.a.last_request
    assert seen.body["model"] == "served-a"  # provider_model_id, not the router name
    assert seen.body["messages"][0] == {"role": "system", "content": "You are a math expert."}
    assert seen.headers["x-selected-model"] == "model-a"
    assert raw.headers["x-selected-model"] == "model-a"
    assert raw.headers["x-cache-status"] == "miss"
    assert raw.headers["x-security-checks"] == "pii:false,jailbreak:false"
    assert float(raw.headers["x-processing-time"]) > 0
    meta = completion.model_extra["routing_metadata"]
    assert meta["selected_model"] == "model-a" and meta["decision"] == "math"
    assert meta["cost"] > 0  # usage x the model's pricing


def test_stream_is_relayed_and_its_answer_cached_then_served_by_the_router(envoy_stack: EnvoyStack) -> None:
    question = "Compute the integral of sin(x) from 0 to pi, step by step."
    stream = client(envoy_stack).chat.completions.create(
        model="MoM", stream=True, messages=[{"role": "user", "content": question}]
    )
    chunks = [c for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert envoy_stack.a.last_request.body["stream_options"] == {"include_usage": True}
    assert any(c.usage is not None for c in chunks)
    envoy_stack.drain()  # complete() wrote the finished stream to the cache
    before = envoy_stack.a.request_count
    raw = client(envoy_stack).chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": question}]
    )
    assert envoy_stack.a.request_count == before  # answered by the bridge as an immediate response
    assert raw.headers["x-cache-status"] == "hit"
    assert raw.parse().choices[0].message.content == text
    assert raw.parse().model_extra["routing_metadata"]["cache_hit"] is True


def test_explicit_model_and_fast_response(envoy_stack: EnvoyStack) -> None:
    b_before = envoy_stack.b.request_count
    out = client(envoy_stack).chat.completions.create(
        model="model-b", messages=[{"role": "user", "content": "hello there"}]
    )
    assert envoy_stack.b.request_count == b_before + 1
    assert out.choices[0].message.content
    fast = client(envoy_stack).chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": "fastanswer please"}]
    )
    assert fast.parse().choices[0].message.content == "Answered by the router."
    assert fast.headers["x-vsr-fast-response"] == "true"
    assert envoy_stack.b.request_count == b_before + 1


def test_bad_input_gets_the_spec_errors(envoy_stack: EnvoyStack) -> None:
    url = f"{envoy_stack.v1}/chat/completions"
    bad = httpx.post(url, content=b"{nope", headers={"content-type": "application/json"})
    assert bad.status_code == 400
    assert bad.json()["error"]["message"] == "malformed JSON body"
    missing = httpx.post(url, json={"model": "MoM"})
    assert missing.status_code == 400 and "messages" in missing.json()["error"]["message"]
    with pytest.raises(openai.NotFoundError) as unknown:
        client(envoy_stack).chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert unknown.value.body["code"] == "model_not_found"


def test_a_failing_route_answers_503_and_the_bridge_keeps_serving(
    envoy_stack: EnvoyStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = envoy_stack.pipeline
    original = pipeline.route
    calls = {"n": 0}

    async def broken_once(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated router fault")
        return await original(*args, **kwargs)

    monkeypatch.setattr(pipeline, "route", broken_once)
    failed = httpx.post(
        f"{envoy_stack.v1}/chat/completions",
        json={"model": "MoM", "messages": [{"role": "user", "content": "an equation"}]},
    )
    assert failed.status_code == 503  # failure_mode closed
    assert failed.json()["error"]["type"]
    ok = client(envoy_stack).chat.completions.create(
        model="MoM", messages=[{"role": "user", "content": "another equation to solve"}]
    )
    assert ok.choices[0].message.content


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_bridge_down(mode: str, tmp_path: Path) -> None:
    with FakeUpstream(name="a") as a, FakeUpstream(name="b") as b:
        envoy, listener = start_envoy(bridge_config(a, b, mode), tmp_path, free_port(), mode)
        try:
            response = httpx.post(
                f"http://127.0.0.1:{listener}/v1/chat/completions",
                timeout=30,
                json={"model": "MoM", "messages": [{"role": "user", "content": "an equation"}]},
            )
        finally:
            envoy.stop()
        if mode == "open":  # unrouted but served: the default model's route
            assert response.status_code == 200
            assert b.request_count == 1 and a.request_count == 0
        else:
            assert response.status_code >= 500
            assert a.request_count == 0 and b.request_count == 0


def test_no_backend_answering_gets_the_spec_error_body(tmp_path: Path) -> None:
    """Envoy's own reply when the backend refuses connections is the standalone door's 503
    (JSON error body, Retry-After), not Envoy's plain text."""
    with FakeUpstream(name="a") as a, FakeUpstream(name="b") as b:
        config = bridge_config(a, b, "open")
        dead = free_port()
        config["providers"]["models"][1]["backend_refs"] = [{"base_url": f"http://127.0.0.1:{dead}"}]
        envoy, listener = start_envoy(config, tmp_path, free_port(), "open")  # bridge down, fail-open
        try:
            response = httpx.post(
                f"http://127.0.0.1:{listener}/v1/chat/completions",
                timeout=30,
                json={"model": "MoM", "messages": [{"role": "user", "content": "hello"}]},
            )
        finally:
            envoy.stop()
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("service_unavailable_error", "upstream_unavailable")
