"""The DecisionModel deployment's logic without Ray: HostedDecisions
(app/runtime/hosted_decisions.py) on the engine svc-srun serves, batching concurrent
callers' encoder texts. The Serve glue is tested in tests/integration/test_model_deployments.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.runtime.hosted_decisions import HostedDecisions
from app.runtime.schemas import InvalidRequest, ModelNotFound, NotReady
from app.srun.catalog import DECISION_MODEL, load
from app.srun.runtime_metrics import RuntimeMetrics, request_outcome
from tests.unit.runtime.test_model_deployments import TickBatcher

QUESTION = {
    "type": "choice",
    "criteria": {"billing": "payments and refunds", "shipping": "delivery and tracking"},
}
NAMES = {DECISION_MODEL, "decisions", "systemone"}


@pytest.fixture(scope="module")
def engine() -> Any:
    return load(DECISION_MODEL)


def hosted_with(engine: Any) -> tuple[HostedDecisions, RuntimeMetrics, Any]:
    metrics = RuntimeMetrics()
    hosted = HostedDecisions(DECISION_MODEL, NAMES, "r1", metrics, request_outcome)
    hosted.load(lambda: engine)
    one = TickBatcher(hosted.encode_batch)

    async def encode(texts: list[str]) -> list[Any]:
        return list(await asyncio.gather(*(one(t) for t in texts)))

    return hosted, metrics, encode


async def test_concurrent_decisions_share_encoder_batches(engine) -> None:
    hosted, metrics, encode = hosted_with(engine)
    states = [
        "refund my double charge",
        "my parcel is lost in transit",
        "charge on my card is wrong",
        "tracking says delivered but nothing came",
    ]
    answers = await asyncio.gather(
        *(hosted.decide({"state": s, "questions": {"q": QUESTION}}, encode, DECISION_MODEL) for s in states)
    )
    assert [a["answers"]["q"]["choice"] for a in answers] == ["billing", "shipping", "billing", "shipping"]
    assert hosted.card()["surfaces"] == ["decisions"]
    assert metrics.value("svc_model_runtime_ready", deployment=DECISION_MODEL) == 1.0
    assert metrics.value("svc_model_runtime_requests_total", deployment=DECISION_MODEL, outcome="ok") == 4
    assert metrics.value("svc_model_runtime_replica_inflight", deployment=DECISION_MODEL, replica="r1") == 0


async def test_model_names_and_invalid_requests(engine) -> None:
    hosted, metrics, encode = hosted_with(engine)
    for name in sorted(NAMES):
        answer = await hosted.decide(
            {"model": name, "state": "refund me", "questions": {"q": QUESTION}}, encode, "dm"
        )
        assert answer["answers"]["q"]["choice"] == "billing"
    with pytest.raises(ModelNotFound):
        await hosted.decide({"model": "gpt-4", "state": "x", "questions": {"q": QUESTION}}, encode, "dm")
    with pytest.raises(InvalidRequest):
        await hosted.decide({"model": 7, "state": "x", "questions": {"q": QUESTION}}, encode, "dm")
    with pytest.raises(InvalidRequest):
        await hosted.decide({"state": "x", "questions": {}}, encode, "dm")
    with pytest.raises(InvalidRequest):
        await hosted.decide(["not", "an", "object"], encode, "dm")
    assert metrics.value("svc_model_runtime_requests_total", deployment="dm", outcome="rejected") == 4
    assert metrics.value("svc_model_runtime_requests_total", deployment="dm", outcome="ok") == len(NAMES)


async def test_a_model_that_failed_to_load_answers_not_ready() -> None:
    metrics = RuntimeMetrics()
    hosted = HostedDecisions(DECISION_MODEL, NAMES, "r1", metrics, request_outcome)

    def broken() -> Any:
        raise FileNotFoundError("/srv/models/calibration.json")

    hosted.load(broken)
    assert hosted.error is not None and hosted.error.startswith("FileNotFoundError")
    assert metrics.value("svc_model_runtime_replica_ready", deployment=DECISION_MODEL, replica="r1") == 0.0

    async def encode(texts: list[str]) -> list[Any]:
        raise AssertionError("no encoder pass without a model")

    with pytest.raises(NotReady, match=r"decision model not loaded \(FileNotFoundError\)"):
        await hosted.decide({"state": "x", "questions": {"q": QUESTION}}, encode, DECISION_MODEL)
    assert (
        metrics.value("svc_model_runtime_requests_total", deployment=DECISION_MODEL, outcome="unavailable")
        == 1
    )
