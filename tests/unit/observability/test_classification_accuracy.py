"""svc_router_classification_accuracy is recorded from outcomes (docs/envoy.md "Metrics"): each
outcome on a routed request's replay scores that request's category; the gauge is the
category's mean score, rendered on /metrics, and an idempotent replay counts once."""

from __future__ import annotations

from typing import Any

import pytest

from app.observability.metrics import MetricsAggregator, MetricsRecorder
from app.pipeline import PipelineServices
from app.pipeline.plan import CompletionReport
from app.pipeline.replay import REPLAY_ID_HEADER
from app.replays.accuracy import ClassificationAccuracy, record_category
from app.replays.replays import OutcomeIn, ReplayStore
from tests.unit.management.test_management_support import Harness
from tests.unit.pipeline.test_management_elo import document

OUTCOMES = "/api/v1/observability/outcomes"
METRIC = "svc_router_classification_accuracy"


async def _routed(harness: Harness) -> tuple[str, str]:
    """Route and complete one request: (its replay id, its decision)."""
    plan = await harness.pipeline.route({"model": "MoM", "messages": [{"role": "user", "content": "hi"}]})
    await harness.pipeline.complete(plan, CompletionReport(status=200, model=plan.selected_model))
    assert plan.decision is not None
    return plan.response_headers[REPLAY_ID_HEADER], plan.decision


async def _post(harness: Harness, outcome: dict[str, Any], **headers: str) -> int:
    async with harness.client() as client:
        response = await client.post(OUTCOMES, json=outcome, headers=headers)
    return response.status_code


@pytest.mark.slow
async def test_outcomes_set_the_category_accuracy_gauge() -> None:
    replays = ReplayStore()
    recorder = MetricsRecorder()
    harness = Harness(
        document(),
        replays=replays,
        recorder=recorder,
        services=PipelineServices(record_replay=replays.record),
    )
    first, category = await _routed(harness)
    second, _ = await _routed(harness)
    third, _ = await _routed(harness)
    assert await _post(harness, {"replay_id": first, "target": "big", "verdict": "correct"}) == 201
    assert recorder.value(METRIC, category=category) == pytest.approx(1.0)
    assert (
        await _post(
            harness, {"replay_id": second, "target": "big", "verdict": "wrong"}, **{"Idempotency-Key": "k"}
        )
        == 201
    )
    assert recorder.value(METRIC, category=category) == pytest.approx(0.5)
    # The same outcome again is a replay: it does not count a second time.
    assert (
        await _post(
            harness, {"replay_id": second, "target": "big", "verdict": "wrong"}, **{"Idempotency-Key": "k"}
        )
        == 200
    )
    assert recorder.value(METRIC, category=category) == pytest.approx(0.5)
    # A verdict that says nothing about correctness is stored but not counted.
    assert await _post(harness, {"replay_id": third, "target": "big", "verdict": "maybe"}) == 201
    assert recorder.value(METRIC, category=category) == pytest.approx(0.5)
    aggregator = MetricsAggregator()
    aggregator.push(recorder.snapshot("ingress-1"))
    assert f'{METRIC}{{category="{category}"}} 0.5' in aggregator.render()


def test_replicas_combine_by_max_not_sum() -> None:
    aggregator = MetricsAggregator()
    for source, verdict in (("a", "correct"), ("b", "correct")):
        recorder = MetricsRecorder()
        ClassificationAccuracy(recorder).record(
            {"decision": "math"}, OutcomeIn(replay_id="r", target="m", verdict=verdict)
        )
        aggregator.push(recorder.snapshot(source))
    assert aggregator.value(METRIC, category="math") == pytest.approx(1.0)


def test_the_category_is_the_first_matched_domain_else_the_decision() -> None:
    assert (
        record_category({"matched_signals": ["keyword:x", "domain:law", "domain:math"], "decision": "d"})
        == "law"
    )
    assert record_category({"matched_signals": ["keyword:x"], "decision": "d"}) == "d"
    assert record_category({"matched_signals": [], "decision": None}) == "none"
    scored = ClassificationAccuracy(None).record(
        {"decision": "d"}, OutcomeIn(replay_id="r", target="m", verdict="x", score=0.25)
    )
    assert scored == pytest.approx(0.25)
