"""UpstreamClient against real HTTP fakes, plus durations, policies and targets."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from app.common.durations import format_duration, parse_duration
from app.common.ports import free_port
from app.config.reliability import FailureKind, FallbackConfig, ReliabilityConfig
from app.upstream.client import UpstreamClient
from app.upstream.headers import parse_retry_after
from app.upstream.results import UnsupportedUpstreamFormat, UpstreamStreamError, UpstreamUnavailable
from app.upstream.sse import StreamAccumulator
from app.upstream.targets import UpstreamTarget
from tests.fakes.upstream import FakeUpstream

BODY = {"model": "MoM", "messages": [{"role": "user", "content": "what is 2+2"}]}


# -- fixtures -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def servers():
    with FakeUpstream(name="a") as a, FakeUpstream(name="b") as b, FakeUpstream(name="c") as c:
        yield a, b, c


@pytest.fixture
def fakes(servers):
    for fake in servers:
        fake.reset()
    return servers


@pytest.fixture
def recorded_sleeps():
    return []


@pytest.fixture
async def client(recorded_sleeps):
    async def no_wait(seconds: float) -> None:
        recorded_sleeps.append(seconds)

    async with UpstreamClient(sleep=no_wait) as c:
        yield c


def target(fake: FakeUpstream, model: str, **kw) -> UpstreamTarget:
    return UpstreamTarget(model=model, base_url=fake.base_url, **kw)


def dead_target(model: str = "dead") -> UpstreamTarget:
    return UpstreamTarget(model=model, base_url=f"http://127.0.0.1:{free_port()}/v1")


def content_of(response) -> str:
    return response.json_body["choices"][0]["message"]["content"]


# -- durations ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, seconds",
    [
        ("30s", 30.0),
        ("1.5s", 1.5),
        ("500ms", 0.5),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("0s", 0.0),
        ("1m30s", 90.0),
        (" 250ms ", 0.25),
        (5, 5.0),
        (0.25, 0.25),
        ("12", 12.0),
        ("100us", 1e-4),
        (None, None),
    ],
)
def test_parse_duration_accepts_go_style_values(value, seconds):
    assert (
        parse_duration(value) == pytest.approx(seconds)
        if seconds is not None
        else parse_duration(value) is None
    )


@pytest.mark.parametrize(
    "value", ["", "abc", "10x", "-5s", "s", "5 s s", "1.2.3s", -1, float("nan"), True, [1]]
)
def test_parse_duration_rejects_bad_values(value):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize("seconds", [0.0, 0.025, 0.25, 1.5, 30.0, 1e6])
def test_format_duration_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


# -- policies -----------------------------------------------------------------------------
def test_reliability_accepts_reference_file_shapes():
    rel = ReliabilityConfig.model_validate(
        {
            "total_timeout": "120s",
            "per_try_timeout": "30s",
            "retry_count": 2,
            "retry_on": "5xx,retriable-status-codes",
            "retriable_status_codes": [429],
            "retry_after_max": "10s",
        }
    )
    assert rel.retry_on == ["5xx", "retriable-status-codes"]
    assert (rel.total_timeout_s, rel.per_try_timeout_s, rel.retry_after_max_s) == (120.0, 30.0, 10.0)
    assert rel.back_off_base_s == pytest.approx(0.025)
    assert rel.back_off_max_s == pytest.approx(0.25)  # ten times the base by default
    assert ReliabilityConfig(retry_back_off_base="100ms").back_off_max_s == pytest.approx(1.0)


def test_reliability_numbers_become_duration_strings():
    rel = ReliabilityConfig(total_timeout=30, idle_timeout=0.5)
    assert (rel.total_timeout, rel.idle_timeout) == ("30s", "500ms")


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"retry_count": 6}, "retry_count"),
        ({"retry_on": "5xx,sometimes"}, "unknown retry_on condition"),
        ({"retriable_status_codes": [99]}, "100"),
        ({"retriable_status_codes": [600]}, "599"),
        ({"total_timeout": "soon"}, "invalid duration"),
        ({"retry_back_off_base": "1s", "retry_back_off_max": "10ms"}, "retry_back_off_max"),
        ({"retry_budget": 3}, "retry_budget"),
    ],
)
def test_reliability_rejects_bad_values_clearly(fields, fragment):
    with pytest.raises(ValidationError, match=fragment):
        ReliabilityConfig.model_validate(fields)


def test_retry_conditions_follow_envoy_semantics():
    default = ReliabilityConfig(retry_count=1)
    assert default.effective_retry_on == {"connect-failure", "refused-stream"}
    assert default.retries_failure(FailureKind.CONNECT)
    assert not default.retries_failure(FailureKind.TIMEOUT)
    assert not default.retries_status(503)

    fivexx = ReliabilityConfig(retry_on=["5xx"])
    assert fivexx.retries_status(500) and fivexx.retries_status(503) and not fivexx.retries_status(429)
    # No response at all counts as a 5xx.
    assert all(
        fivexx.retries_failure(k) for k in (FailureKind.CONNECT, FailureKind.RESET, FailureKind.TIMEOUT)
    )
    assert not fivexx.retries_failure(FailureKind.DEADLINE)

    gateway = ReliabilityConfig(retry_on="gateway-error")
    assert gateway.retries_status(502) and not gateway.retries_status(500)

    codes = ReliabilityConfig(retriable_status_codes=[429])  # implies retriable-status-codes
    assert codes.retries_status(429) and not codes.retries_status(500)

    timeout_only = ReliabilityConfig(retry_on=["timeout"])
    assert timeout_only.retries_failure(FailureKind.TIMEOUT)
    assert not timeout_only.retries_failure(FailureKind.RESET)


def test_reliability_merge_replaces_fields_and_adds_conditions():
    provider = ReliabilityConfig(
        total_timeout="60s", retry_count=1, retry_on="reset", retriable_status_codes=[503]
    )
    decision = ReliabilityConfig(total_timeout="600s", retry_on=["5xx"], retriable_status_codes=[429])
    merged = decision.merged_over(provider)
    assert merged.total_timeout == "600s"
    assert merged.retry_count == 1  # not written by the decision: provider's value stays
    assert merged.retry_on == ["reset", "5xx"]
    assert merged.retriable_status_codes == [503, 429]
    assert decision.merged_over(None) is decision


def test_fallback_config_validation_and_limits():
    assert FallbackConfig().retryable_status_codes == [500, 502, 503, 504]
    assert FallbackConfig(max_attempts=3).candidate_limit == 3
    assert FallbackConfig(max_attempts=0).candidate_limit == 1
    assert FallbackConfig(enabled=False, max_attempts=5).candidate_limit == 1
    with pytest.raises(ValidationError, match="cannot exceed total_timeout"):
        FallbackConfig(total_timeout="5s", per_attempt_timeout="10s")
    with pytest.raises(ValidationError, match="max_attempts"):
        FallbackConfig(max_attempts=-1)
    with pytest.raises(ValidationError, match="max_attempt"):
        FallbackConfig.model_validate({"max_attempt": 2})
    with pytest.raises(ValidationError, match="599"):
        FallbackConfig(retryable_status_codes=[700])


def test_fallback_merge_only_overrides_written_fields():
    global_policy = FallbackConfig(max_attempts=4, total_timeout="30s", retryable_status_codes=[502, 503])
    decision = FallbackConfig.model_validate({"max_attempts": 2})
    merged = decision.merged_over(global_policy)
    assert merged.max_attempts == 2
    assert merged.total_timeout == "30s"
    assert merged.retryable_status_codes == [502, 503]


# -- targets ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "base_url, chat_path, expected",
    [
        ("http://h:8000", None, "http://h:8000/v1/chat/completions"),
        ("http://h:8000/", None, "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1", None, "http://h:8000/v1/chat/completions"),
        ("https://api.x.com/openai/v1/", None, "https://api.x.com/openai/v1/chat/completions"),
        ("h:8000", None, "http://h:8000/v1/chat/completions"),
        ("http://h:8000", "/v2/chat", "http://h:8000/v2/chat"),
        (
            "http://h:8000/base",
            "chat/completions?api-version=1",
            "http://h:8000/base/chat/completions?api-version=1",
        ),
        ("http://h:8000", "http://other:9/x", "http://other:9/x"),
    ],
)
def test_target_chat_url_rules(base_url, chat_path, expected):
    assert UpstreamTarget(model="m", base_url=base_url, chat_path=chat_path).chat_url == expected


def test_target_defaults_and_auth(monkeypatch):
    t = UpstreamTarget(model="m", base_url="http://user:secret@h:1/v1", api_key_env="SVC_TEST_KEY")
    assert t.upstream_model == "m" and t.provider_model_id == "m"
    assert "secret" not in t.label and t.label == "m@h:1"
    monkeypatch.delenv("SVC_TEST_KEY", raising=False)
    assert t.auth_headers() == {}
    monkeypatch.setenv("SVC_TEST_KEY", "k-123")
    assert t.auth_headers() == {"Authorization": "Bearer k-123"}
    with pytest.raises(ValidationError, match="scheme"):
        UpstreamTarget(model="m", base_url="ftp://h/x")


def test_retry_after_parsing():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert parse_retry_after("-3") == 0.0


# -- complete(): success, forwarding --------------------------------------------------------
async def test_complete_rewrites_model_and_forwards_headers(fakes, client, monkeypatch):
    a, _, _ = fakes
    monkeypatch.setenv("SVC_TEST_UPSTREAM_KEY", "sk-test")
    t = target(
        a,
        "small",
        provider_model_id="org/small-v2",
        api_key_env="SVC_TEST_UPSTREAM_KEY",
        extra_headers={"x-provider": "p1"},
    )
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"x-request-id": "rid-1", "Host": "evil", "Content-Length": "3", "Connection": "close"}
    response = await client.complete([t], body, headers)
    assert response.ok and response.status == 200
    assert response.target is t
    assert "model=org/small-v2" in content_of(response) and "what is 2+2" in content_of(response)
    assert response.usage["total_tokens"] > 0
    seen = a.last_request
    assert seen.body["model"] == "org/small-v2"
    assert seen.body["stream"] is False and "stream_options" not in seen.body
    assert seen.headers["x-request-id"] == "rid-1"
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.headers["x-provider"] == "p1"
    assert seen.headers["host"] != "evil"
    assert [r.status for r in response.attempts] == [200]
    assert 0 <= response.first_byte_s <= response.total_s
    assert body["model"] == "MoM"  # the caller's dict is not mutated


async def test_complete_retries_same_model_then_succeeds(fakes, client, recorded_sleeps):
    a, b, _ = fakes
    a.configure(fail_status=503, fail_times=2)
    rel = ReliabilityConfig(
        retry_count=2, retry_on="5xx", retry_back_off_base="10ms", retry_back_off_max="40ms"
    )
    response = await client.complete([target(a, "ma"), target(b, "mb")], BODY, {}, rel, None)
    assert response.status == 200 and response.target.model == "ma"
    assert [(r.status, r.error) for r in response.attempts] == [(503, "status"), (503, "status"), (200, None)]
    assert [r.retry for r in response.attempts] == [0, 1, 2]
    assert a.request_count == 3 and b.request_count == 0
    assert len(recorded_sleeps) == 2
    assert all(0.01 <= s <= 0.04 for s in recorded_sleeps)


async def test_retry_after_is_honoured_up_to_its_bound(fakes, client, recorded_sleeps):
    a, _, _ = fakes
    a.configure(fail_status=429, fail_times=2, retry_after="3")
    rel = ReliabilityConfig(retry_count=2, retriable_status_codes=[429], retry_after_max="1s")
    response = await client.complete([target(a, "ma")], BODY, {}, rel, None)
    assert response.status == 200
    assert recorded_sleeps == [1.0, 1.0]


async def test_retries_exhausted_on_4xx_relays_it(fakes, client):
    a, _, _ = fakes
    a.configure(fail_status=429, retry_after="2")
    rel = ReliabilityConfig(retry_count=1, retriable_status_codes=[429])
    response = await client.complete([target(a, "ma")], BODY, {}, rel, None)
    assert response.status == 429 and a.request_count == 2
    assert "failing with 429" in response.json_body["error"]["message"]


async def test_unretried_5xx_raises_unavailable_with_retry_after(fakes, client):
    a, _, _ = fakes
    a.configure(fail_status=503, retry_after="7")
    with pytest.raises(UpstreamUnavailable) as info:
        await client.complete([target(a, "ma")], BODY, {}, None, None)
    exc = info.value
    assert exc.retry_after == 7.0 and not exc.timed_out
    assert exc.last_status == 503 and exc.last_response.status == 503
    assert a.request_count == 1


# -- complete(): fallback ------------------------------------------------------------------
async def test_fallback_to_second_candidate_on_500(fakes, client):
    a, b, _ = fakes
    a.configure(fail_status=500)
    t_b = target(b, "mb", provider_model_id="pb")
    response = await client.complete([target(a, "ma"), t_b], BODY, {}, None, FallbackConfig())
    assert response.status == 200 and response.target is t_b
    assert "[b] model=pb" in content_of(response)
    assert a.last_request.body["model"] == "ma" and b.last_request.body["model"] == "pb"
    assert [(r.model, r.status) for r in response.attempts] == [("ma", 500), ("mb", 200)]


async def test_fallback_on_refused_connection(fakes, client):
    _, b, _ = fakes
    response = await client.complete([dead_target(), target(b, "mb")], BODY, {}, None, FallbackConfig())
    assert response.target.model == "mb"
    assert response.attempts[0].error == FailureKind.CONNECT.value and response.attempts[0].status is None


async def test_fallback_on_timeout(fakes, client):
    a, b, _ = fakes
    a.configure(delay_s=2.0)
    fallback = FallbackConfig(per_attempt_timeout="200ms")
    response = await client.complete([target(a, "ma"), target(b, "mb")], BODY, {}, None, fallback)
    assert response.target.model == "mb"
    assert response.attempts[0].error == FailureKind.TIMEOUT.value


async def test_per_try_timeout_retries_then_falls_back(fakes, client):
    a, b, _ = fakes
    a.configure(delay_s=2.0)
    rel = ReliabilityConfig(per_try_timeout="150ms", retry_count=1, retry_on="timeout")
    response = await client.complete([target(a, "ma"), target(b, "mb")], BODY, {}, rel, FallbackConfig())
    assert [(r.model, r.error) for r in response.attempts] == [
        ("ma", "timeout"),
        ("ma", "timeout"),
        ("mb", None),
    ]


async def test_4xx_is_relayed_without_fallback(fakes, client):
    a, b, _ = fakes
    a.configure(
        fail_status=400, fail_body={"error": {"message": "bad temperature", "type": "invalid_request_error"}}
    )
    response = await client.complete([target(a, "ma"), target(b, "mb")], BODY, {}, None, FallbackConfig())
    assert response.status == 400 and not response.ok
    assert response.json_body["error"]["message"] == "bad temperature"
    assert b.request_count == 0


async def test_all_candidates_down_raises_unavailable(fakes, client):
    a, b, _ = fakes
    a.configure(fail_status=500)
    b.configure(fail_status=502, retry_after="4")
    with pytest.raises(UpstreamUnavailable) as info:
        await client.complete([target(a, "ma"), target(b, "mb")], BODY, {}, None, FallbackConfig())
    exc = info.value
    assert [(r.model, r.status) for r in exc.attempts] == [("ma", 500), ("mb", 502)]
    assert exc.retry_after == 4.0 and not exc.timed_out


async def test_all_candidates_timing_out_is_flagged(fakes, client):
    a, b, _ = fakes
    a.configure(delay_s=2.0)
    b.configure(delay_s=2.0)
    fallback = FallbackConfig(per_attempt_timeout="100ms")
    with pytest.raises(UpstreamUnavailable) as info:
        await client.complete([target(a, "ma"), target(b, "mb")], BODY, {}, None, fallback)
    assert [r.error for r in info.value.attempts] == ["timeout", "timeout"]
    assert info.value.timed_out


async def test_mixed_failures_are_not_a_timeout(fakes, client):
    a, _, _ = fakes
    a.configure(delay_s=2.0)
    with pytest.raises(UpstreamUnavailable) as info:
        await client.complete(
            [target(a, "ma"), dead_target("refusing")],
            BODY,
            {},
            ReliabilityConfig(per_try_timeout="100ms"),
            FallbackConfig(),
        )
    assert [r.error for r in info.value.attempts] == ["timeout", "connect-failure"]
    assert not info.value.timed_out


async def test_total_timeout_stops_everything(fakes, client):
    a, b, _ = fakes
    a.configure(delay_s=2.0)
    rel = ReliabilityConfig(total_timeout="300ms", retry_count=3, retry_on="5xx")
    with pytest.raises(UpstreamUnavailable) as info:
        await client.complete([target(a, "ma"), target(b, "mb")], BODY, {}, rel, FallbackConfig())
    assert info.value.timed_out
    assert b.request_count == 0 and a.request_count == 1


async def test_max_attempts_bounds_the_candidates(fakes, client):
    a, b, c = fakes
    a.configure(fail_status=500)
    b.configure(fail_status=500)
    candidates = [target(a, "ma"), target(b, "mb"), target(c, "mc")]
    with pytest.raises(UpstreamUnavailable):
        await client.complete(candidates, BODY, {}, None, FallbackConfig(max_attempts=2))
    assert c.request_count == 0
    response = await client.complete(candidates, BODY, {}, None, FallbackConfig(max_attempts=3))
    assert response.target.model == "mc"


async def test_fallback_disabled_or_absent_tries_only_the_first(fakes, client):
    a, b, _ = fakes
    a.configure(fail_status=500)
    for fallback in (None, FallbackConfig(enabled=False)):
        with pytest.raises(UpstreamUnavailable):
            await client.complete([target(a, "ma"), target(b, "mb")], BODY, {}, None, fallback)
    assert b.request_count == 0


async def test_retry_prefers_an_untried_replica(fakes, client):
    _, b, _ = fakes
    replicas = [dead_target("m"), UpstreamTarget(model="m", base_url=b.base_url)]
    response = await client.complete(replicas, BODY, {}, ReliabilityConfig(retry_count=1), None)
    assert response.target is replicas[1]
    assert [r.error for r in response.attempts] == ["connect-failure", None]


async def test_circuit_breaker_skips_a_failing_model(fakes, client):
    a, b, _ = fakes
    a.configure(fail_status=500)
    fallback = FallbackConfig.model_validate(
        {"circuit_breaker": {"consecutive_failures": 1, "cooldown_period": "60s"}}
    )
    candidates = [target(a, "ma"), target(b, "mb")]
    first = await client.complete(candidates, BODY, {}, None, fallback)
    second = await client.complete(candidates, BODY, {}, None, fallback)
    assert first.target.model == second.target.model == "mb"
    assert a.request_count == 1
    assert second.attempts[0].error == FailureKind.CIRCUIT_OPEN.value


async def test_circuit_breaker_half_open_probe_closes_on_success(fakes, client):
    a, b, _ = fakes
    a.configure(fail_status=500, fail_times=1)
    fallback = FallbackConfig.model_validate(
        {"circuit_breaker": {"consecutive_failures": 1, "cooldown_period": "0s"}}
    )
    candidates = [target(a, "ma"), target(b, "mb")]
    assert (await client.complete(candidates, BODY, {}, None, fallback)).target.model == "mb"
    # Cool-down over: one probe goes to "ma", succeeds and closes the circuit.
    assert (await client.complete(candidates, BODY, {}, None, fallback)).target.model == "ma"
    assert (await client.complete(candidates, BODY, {}, None, fallback)).target.model == "ma"


async def test_bad_candidate_lists_are_refused(client):
    with pytest.raises(ValueError, match="no upstream candidates"):
        await client.complete([], BODY)
    anthropic = UpstreamTarget(model="claude", base_url="http://127.0.0.1:1", api_format="bedrock")
    with pytest.raises(UnsupportedUpstreamFormat, match="claude"):
        await client.complete([anthropic], BODY)


# -- stream() ---------------------------------------------------------------------------------
async def test_stream_relays_chunks_as_they_arrive(fakes, client):
    a, _, _ = fakes
    a.configure(hold_after_chunks=2)
    stream = await client.stream([target(a, "ma")], {**BODY, "stream_options": {"include_usage": True}}, {})
    assert stream.status == 200 and stream.is_event_stream
    accumulator = StreamAccumulator()
    chunks = stream.aiter_bytes()
    first = await anext(chunks)
    # The upstream is still holding the rest of its answer when the first chunk is here.
    assert a.chunks_sent <= 2 and a.streams_completed == 0
    accumulator.feed_bytes(first)
    a.release()
    async for chunk in chunks:
        accumulator.feed_bytes(chunk)
    assert a.streams_completed == 1
    assert stream.completed and stream.error is None
    assert accumulator.done and accumulator.finish_reason == "stop"
    assert accumulator.content == "[a] model=ma echo: what is 2+2"
    assert accumulator.usage["completion_tokens"] == len(accumulator.content.split())
    assert a.last_request.body["stream"] is True


async def test_stream_falls_back_before_the_first_byte(fakes, client):
    a, b, _ = fakes
    a.configure(fail_status=503)
    async with await client.stream(
        [target(a, "ma"), target(b, "mb")], BODY, {}, None, FallbackConfig()
    ) as stream:
        accumulator = StreamAccumulator()
        accumulator.feed_bytes(await stream.read())
    assert stream.target.model == "mb" and accumulator.content.startswith("[b] model=mb")
    assert [(r.model, r.status) for r in stream.attempts] == [("ma", 503), ("mb", 200)]


async def test_stream_first_byte_timeout_falls_back(fakes, client):
    a, b, _ = fakes
    a.configure(first_byte_delay_s=2.0)
    rel = ReliabilityConfig(first_byte_timeout="200ms")
    stream = await client.stream([target(a, "ma"), target(b, "mb")], BODY, {}, rel, FallbackConfig())
    await stream.aclose()
    assert stream.target.model == "mb"
    assert stream.attempts[0].error == "timeout" and stream.attempts[0].status == 200


async def test_stream_break_after_first_byte_is_not_retried(fakes, client):
    a, b, _ = fakes
    a.configure(abort_after_chunks=2)
    rel = ReliabilityConfig(retry_count=2, retry_on="5xx")
    stream = await client.stream([target(a, "ma"), target(b, "mb")], BODY, {}, rel, FallbackConfig())
    received = []
    with pytest.raises(UpstreamStreamError) as info:
        async for chunk in stream.aiter_bytes():
            received.append(chunk)
    assert info.value.kind == "reset" and stream.error is info.value
    assert received and not stream.completed
    assert a.request_count == 1 and b.request_count == 0


async def test_stream_idle_timeout_ends_the_stream(fakes, client):
    a, _, _ = fakes
    a.configure(chunk_delay_s=1.0)
    stream = await client.stream([target(a, "ma")], BODY, {}, ReliabilityConfig(idle_timeout="150ms"))
    with pytest.raises(UpstreamStreamError) as info:
        async for _ in stream.aiter_bytes():
            pass
    assert info.value.kind == "idle_timeout"
    assert stream.bytes_received > 0 and not stream.completed


async def test_stream_relays_a_4xx_error_document(fakes, client):
    a, b, _ = fakes
    a.configure(fail_status=404)
    stream = await client.stream([target(a, "ma"), target(b, "mb")], BODY, {}, None, FallbackConfig())
    assert stream.status == 404 and not stream.ok
    assert "failing with 404" in json.loads(await stream.read())["error"]["message"]
    assert b.request_count == 0


async def test_stream_all_down_raises_before_returning(fakes, client):
    a, _, _ = fakes
    a.configure(fail_status=500)
    with pytest.raises(UpstreamUnavailable):
        await client.stream([target(a, "ma"), dead_target()], BODY, {}, None, FallbackConfig())
