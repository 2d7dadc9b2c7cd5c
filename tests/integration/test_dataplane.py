"""End to end through real Ray Serve with the OpenAI Python SDK as the client."""

from __future__ import annotations

import json
import os
import stat
import time

import httpx
import openai
import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration


@pytest.fixture
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.v1, api_key="unused", max_retries=0, timeout=60)


def _raw(client: openai.OpenAI, **kwargs: object) -> tuple[dict, httpx.Headers]:
    response = client.chat.completions.with_raw_response.create(**kwargs)
    return json.loads(response.text), response.headers


def test_one_request_id_on_the_answer_the_clients_own_when_it_sent_one(
    client: openai.OpenAI, stack: Stack
) -> None:
    # Questions no other test asks: the math decision's semantic cache must not answer them.
    messages = [
        {"role": "user", "content": "Which integral gives the area between y = x^2 and the line y = 4?"}
    ]
    sent = client.chat.completions.with_raw_response.create(
        model="MoM", messages=messages, extra_headers={"x-request-id": "client-chosen-id"}
    )
    assert sent.headers.get_list("x-request-id") == ["client-chosen-id"]
    assert stack.upstream_a.last_request.headers.get("x-request-id") == "client-chosen-id"
    messages = [
        {"role": "user", "content": "Name three integral tests for whether an infinite series converges."}
    ]
    minted = client.chat.completions.with_raw_response.create(model="MoM", messages=messages)
    (request_id,) = minted.headers.get_list("x-request-id")
    assert request_id and request_id != "client-chosen-id"
    assert stack.upstream_a.last_request.headers.get("x-request-id") == request_id


def test_routed_non_stream_reaches_the_decisions_model(client: openai.OpenAI, stack: Stack) -> None:
    before = stack.upstream_a.request_count
    body, headers = _raw(
        client,
        model="MoM",
        messages=[{"role": "user", "content": "What is the integral of cos(x) dx? run 1"}],
    )
    assert stack.upstream_a.request_count == before + 1
    seen = stack.upstream_a.last_request.body
    assert seen["model"] == "served-a"  # provider_model_id sent upstream
    assert seen["messages"][0] == {"role": "system", "content": "You are a math expert."}
    assert stack.upstream_a.last_request.headers.get("x-route-source") == "svc-sr"
    assert headers["x-selected-model"] == "model-a"
    assert headers["x-cache-status"] == "miss"
    assert float(headers["x-processing-time"]) > 0
    assert headers["x-security-checks"] == "pii:false,jailbreak:false"
    assert headers["x-request-id"]
    meta = body["routing_metadata"]
    assert meta["selected_model"] == "model-a" and meta["cache_hit"] is False
    assert meta["cost"] > 0  # model-a has pricing
    assert body["choices"][0]["message"]["content"]


def test_embedding_signal_routes_code_requests(client: openai.OpenAI, stack: Stack) -> None:
    _, headers = _raw(
        client,
        model="auto",
        messages=[{"role": "user", "content": "Could you write a Python function that reverses a list?"}],
    )
    assert headers["x-selected-model"] == "model-b"
    assert headers.get("x-vsr-selected-decision") == "code"


def test_stream_is_relayed_chunk_by_chunk(client: openai.OpenAI, stack: Stack) -> None:
    stack.upstream_a.configure(chunk_delay_s=0.05)
    try:
        chunks = list(
            client.chat.completions.create(
                model="MoM",
                stream=True,
                messages=[{"role": "user", "content": "Solve this equation for x: 3x + 5 = 11 (stream)"}],
            )
        )
    finally:
        stack.upstream_a.configure(chunk_delay_s=0.0)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 2
    assert text
    assert stack.upstream_a.last_request.body["stream"] is True


def test_explicit_model_is_passed_through_without_signals(client: openai.OpenAI, stack: Stack) -> None:
    body, headers = _raw(
        client, model="model-b", messages=[{"role": "user", "content": "what is the derivative of x^3"}]
    )
    assert headers["x-selected-model"] == "model-b"  # math keyword ignored: explicit model wins
    assert stack.upstream_b.last_request.body["messages"][0]["role"] == "user"  # no system prompt
    assert body["routing_metadata"]["reason_code"] == "model_specified"


def _cache_entries() -> int:
    from ray import serve

    entries: int = serve.get_deployment_handle("ResponseCache", "svc-sr").stats.remote().result()["entries"]
    return entries


def _written(before: int, timeout_s: float = 10.0) -> int:
    """Wait until the cache holds more than `before` entries: the front door writes an answer
    after it has sent it (accounting never delays a client). Returns the count."""
    deadline = time.monotonic() + timeout_s
    while (entries := _cache_entries()) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    return entries


def test_paraphrase_is_answered_from_the_cache(client: openai.OpenAI, stack: Stack) -> None:
    before = _cache_entries()
    _raw(
        client,
        model="MoM",
        messages=[{"role": "user", "content": "What is the derivative of sin(x) times x?"}],
    )
    _written(before)
    count = stack.upstream_a.request_count
    body, headers = _raw(
        client,
        model="MoM",
        messages=[{"role": "user", "content": "what's the derivative of x times sin(x)?"}],
    )
    assert stack.upstream_a.request_count == count  # no upstream call
    assert headers["x-cache-status"] == "hit"
    assert body["routing_metadata"]["cache_hit"] is True
    assert body["choices"][0]["message"]["content"]


def test_the_cache_replica_serves_a_private_same_node_lane(client: openai.OpenAI, stack: Stack) -> None:
    import ray
    from ray import serve

    cache = serve.get_deployment_handle("ResponseCache", "svc-sr")
    info = cache.channel.remote().result()
    assert info["node_id"] == ray.get_runtime_context().get_node_id()  # one node: every caller uses it
    assert stat.S_IMODE(os.stat(info["path"]).st_mode) == 0o600
    before = cache.stats.remote().result()["entries"]
    _raw(client, model="MoM", messages=[{"role": "user", "content": "Solve the equation 3x + 7 = 22 for x"}])
    # the Ingress writes the answer (math decision: cached) after sending it, once
    assert _written(before) == before + 1


def test_cached_answer_served_to_a_streaming_client(client: openai.OpenAI, stack: Stack) -> None:
    before = _cache_entries()
    _raw(client, model="MoM", messages=[{"role": "user", "content": "Find the integral of e^x from 0 to 1"}])
    _written(before)
    count = stack.upstream_a.request_count
    chunks = list(
        client.chat.completions.create(
            model="MoM",
            stream=True,
            messages=[{"role": "user", "content": "find the integral of e^x from 0 to 1"}],
        )
    )
    assert stack.upstream_a.request_count == count
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_fallback_to_next_model_when_first_backend_is_down(client: openai.OpenAI, stack: Stack) -> None:
    body, headers = _raw(client, model="MoM", messages=[{"role": "user", "content": "fallbacktest please"}])
    assert headers["x-selected-model"] == "model-a"
    assert body["routing_metadata"]["selected_model"] == "model-a"


def test_every_upstream_down_gives_503_with_retry_after(client: openai.OpenAI, stack: Stack) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="MoM", messages=[{"role": "user", "content": "alldowntest"}])
    assert info.value.status_code == 503
    assert info.value.response.headers.get("retry-after")
    assert info.value.response.json()["error"]["code"]


def test_responses_api_round_trip(client: openai.OpenAI) -> None:
    response = client.responses.create(model="MoM", input="What is the integral of 2x? responses")
    assert response.output_text and response.store
    # The Responses store (the Ingress's memory here): continue, read back, list, delete.
    follow_up = client.responses.create(
        model="MoM", input="Now differentiate the result.", previous_response_id=response.id
    )
    assert follow_up.output_text and follow_up.previous_response_id == response.id
    assert client.responses.retrieve(follow_up.id).output_text == follow_up.output_text
    items = client.responses.input_items.list(follow_up.id)
    assert [item.content[0].text for item in items.data] == ["Now differentiate the result."]
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_models_list_always_has_mom(client: openai.OpenAI) -> None:
    ids = {m.id for m in client.models.list()}
    assert "MoM" in ids and {"model-a", "model-b"} <= ids


# ---------------------------------------------------------------- bad input


def _post(stack: Stack, content: bytes, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(
        stack.base_url + path, content=content, headers={"content-type": "application/json"}, timeout=30
    )


def _assert_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert {"message", "type", "code"} <= set(error)
    return error


def test_malformed_json_is_400(stack: Stack) -> None:
    _assert_error(_post(stack, b'{"model": "MoM", "messages": ['), 400)


def test_missing_messages_is_400(stack: Stack) -> None:
    error = _assert_error(_post(stack, b'{"model": "MoM"}'), 400)
    assert "messages" in error["message"]


def test_invalid_messages_is_400(stack: Stack) -> None:
    _assert_error(_post(stack, b'{"model": "MoM", "messages": "hi"}'), 400)
    _assert_error(_post(stack, b'{"model": "MoM", "messages": []}'), 400)
    _assert_error(_post(stack, b'{"model": "MoM", "messages": [{"content": 3}]}'), 400)


def test_unknown_explicit_model_is_404(stack: Stack) -> None:
    body = json.dumps({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
    _assert_error(_post(stack, body), 404)


def test_no_decision_and_no_default_model_is_400(stack: Stack) -> None:
    body = json.dumps({"model": "MoM", "messages": [{"role": "user", "content": "hello"}]}).encode()
    error = _assert_error(_post(stack, body, "/noroute/v1/chat/completions"), 400)
    assert "default model" in error["message"]


def test_body_too_large_is_413(stack: Stack) -> None:
    big = json.dumps({"model": "MoM", "messages": [{"role": "user", "content": "x" * 70_000}]}).encode()
    _assert_error(_post(stack, big), 413)


def test_replica_survives_bad_input(stack: Stack, client: openai.OpenAI) -> None:
    for payload in (
        b"\xff\xfe",
        b"null",
        b"[]",
        b'{"model": 5, "messages": [{"role": "user", "content": "x"}]}',
    ):
        assert _post(stack, payload).status_code == 400
    _, headers = _raw(client, model="MoM", messages=[{"role": "user", "content": "still alive? equation"}])
    assert headers["x-selected-model"] == "model-a"


def test_router_with_its_own_encoder_routes_the_same(stack: Stack) -> None:
    """`router_local_encoder`: the Router encodes the request itself (one hop fewer)."""
    local = openai.OpenAI(base_url=f"{stack.base_url}/local/v1", api_key="unused", max_retries=0, timeout=60)
    _, code_headers = _raw(
        local,
        model="MoM",
        messages=[{"role": "user", "content": "Could you write a Python function that reverses a list?"}],
    )
    assert code_headers.get("x-vsr-selected-decision") == "code"
    assert code_headers["x-vsr-matched-embeddings"] == "code_help"
    _, math_headers = _raw(
        local, model="MoM", messages=[{"role": "user", "content": "Integral of x squared, local encoder"}]
    )
    assert math_headers["x-selected-model"] == "model-a"
