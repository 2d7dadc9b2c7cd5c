"""The context_compression routes (app/api/routes/compression.py): capabilities, health,
preview of a candidate or a binding (mode, persisted, backend_calls; 400 with the path of a bad
candidate, 404 for an unknown binding) and the redacted statistics of routed requests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.observability.metrics import MetricsAggregator
from app.replays.classification_metrics import MetricsReport, aggregator_report
from tests.fakes.upstream import FakeUpstream
from tests.unit.management.test_management_support import Harness, base_document, with_auth
from tests.unit.pipeline.test_context_compression import conversation, with_plugin

PREFIX = "/api/v1/plugins/context_compression"
STATS = "/api/v1/observability/plugins/context_compression/stats"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="compress", reply="fine") as fake:
        yield fake


@pytest.mark.slow
async def test_capabilities_and_health() -> None:
    harness = Harness(with_plugin({"max_tokens": 500}))
    async with harness.client() as client:
        caps = (await client.get(PREFIX + "/capabilities")).json()
        health = await client.get(PREFIX + "/health")
    assert caps["strategies"] == ["drop", "summarize"] and caps["model_calls"] is False
    assert "WordPiece" in caps["tokenizer"] and caps["limits"]["max_tokens"][0] == 16
    assert "max_tokens" in caps["configuration_schema"]["properties"]
    assert health.status_code == 200
    assert health.json() | {"tokenizer": ""} == {
        "plugin": "context_compression",
        "status": "ok",
        "tokenizer": "",
        "tokenizer_loaded": True,
        "bindings": 1,
        "detail": None,
    }


@pytest.mark.slow
async def test_preview_of_a_candidate_and_of_a_binding() -> None:
    harness = Harness(with_plugin({"max_tokens": 400, "keep_last_turns": 2, "strategy": "summarize"}))
    messages = conversation(12)
    async with harness.client() as client:
        candidate = await client.post(
            PREFIX + "/preview", json={"messages": messages, "configuration": {"max_tokens": 400}}
        )
        bound = await client.post(
            PREFIX + "/preview",
            json={"messages": messages, "binding": {"decision": "math"}, "mode": "probe"},
        )
    assert candidate.status_code == 200, candidate.text
    body = candidate.json()
    assert (body["mode"], body["persisted"], body["backend_calls"]) == ("preview", False, 0)
    assert body["outcome"]["compressed"] and body["outcome"]["tokens_after"] <= 400
    assert body["outcome"]["tokens_before"] > 400 and body["binding"] is None
    assert body["summary_inserted"] is False and body["dropped"]
    assert bound.status_code == 200, bound.text
    answer = bound.json()
    assert (answer["mode"], answer["persisted"], answer["backend_calls"]) == ("probe", False, 0)
    assert answer["binding"] == {"recipe": "default", "decision": "math"}
    assert answer["configuration"]["strategy"] == "summarize" and answer["summary_inserted"] is True
    assert answer["messages"][1]["content"].startswith("Summary of")


@pytest.mark.parametrize(
    "body, status, expected",
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, 400, "exactly one of"),
        ({"messages": [], "configuration": {"max_tokens": 100}}, 400, "messages"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "configuration": {"max_tokens": 0}},
            400,
            "configuration.max_tokens",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "configuration": {"max_tokens": 99, "x": 1}},
            400,
            "configuration.x",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "binding": {"decision": "nope"}}, 404, "nope"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "binding": {"recipe": "r", "decision": "math"}},
            404,
            "recipe 'r'",
        ),
    ],
)
@pytest.mark.slow
async def test_bad_previews(body: dict[str, Any], status: int, expected: str) -> None:
    async with Harness(with_plugin({"max_tokens": 400})).client() as client:
        response = await client.post(PREFIX + "/preview", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == ("INVALID_INPUT" if status == 400 else "NOT_FOUND")
    assert expected in error["message"]


@pytest.mark.slow
async def test_a_binding_without_the_plugin_is_not_found() -> None:
    async with Harness().client() as client:
        response = await client.post(
            PREFIX + "/preview",
            json={"messages": [{"role": "user", "content": "x"}], "binding": {"decision": "math"}},
        )
    assert response.status_code == 404 and "no context_compression plugin" in response.text


@pytest.mark.slow
async def test_stats_count_routed_requests_without_content(upstream: FakeUpstream) -> None:
    aggregator = MetricsAggregator()
    harness: Harness

    def report() -> MetricsReport:
        aggregator.push(harness.pipeline.services.metrics.recorder.snapshot("router-1"))
        return aggregator_report(aggregator)

    harness = Harness(
        with_plugin({"max_tokens": 300, "keep_last_turns": 1}, upstream.base_url), metrics=report
    )
    long = conversation(15)
    long[-2]["content"] += " the integral of x"
    async with harness.client() as client:
        for messages in (long, [{"role": "user", "content": "an integral please"}], conversation(3)):
            answer = await client.post("/v1/chat/completions", json={"model": "MoM", "messages": messages})
            assert answer.status_code == 200
        response = await client.get(STATS)
    assert response.status_code == 200, response.text
    stats = response.json()
    assert (stats["requests_seen"], stats["requests_compressed"]) == (2, 1)  # the third is not `math`
    assert stats["turns_dropped"] > 0 and stats["tokens_saved"] > 0
    assert stats["latency"]["count"] == 2
    assert stats["by_decision"] == [
        {
            "recipe": "default",
            "decision": "math",
            "requests_seen": 2,
            "requests_compressed": 1,
            "requests_over_budget": 0,
            "turns_dropped": stats["turns_dropped"],
            "tokens_saved": stats["tokens_saved"],
        }
    ]
    assert "river" not in response.text and "integral" not in response.text  # no content


@pytest.mark.slow
async def test_stats_without_metrics_answer_404_and_permissions_apply() -> None:
    async with Harness().client() as client:
        response = await client.get(STATS)
    assert response.status_code == 404 and response.json()["error"]["code"] == "FEATURE_DISABLED"
    auth = {"mode": "bearer", "tokens": [{"name": "dash", "token_env": "VIEW", "role": "viewer"}]}
    harness = Harness(with_auth(base_document(), auth), environ={"VIEW": "viewer-token"})
    async with harness.client("viewer-token") as client:
        assert (await client.get(PREFIX + "/capabilities")).status_code == 200
        assert (await client.get(STATS)).status_code == 403  # observability.read: not a viewer's
    async with harness.client() as client:
        assert (await client.get(PREFIX + "/health")).status_code == 401
