"""The DecisionModel Ray Serve deployment in local testing mode (no cluster): the same engine
as the worker, batching concurrent callers' encoder texts."""

from __future__ import annotations

import pytest

QUESTION = {"type": "choice", "criteria": {"billing": "payments and refunds", "shipping": "delivery and tracking"}}


@pytest.fixture(scope="module")
def handle():
    from ray import serve

    from deployments.decision_model import DecisionModel
    from tests.unit.test_model_deployments import local_replica_context, stop_local_app

    with local_replica_context():
        h = serve.run(DecisionModel.bind(), name="test-decision-model", route_prefix=None, _local_testing_mode=True)
        h.info.remote().result()
        yield h
        stop_local_app(h)


def test_concurrent_decisions_through_the_deployment(handle):
    states = ["refund my double charge", "my parcel is lost in transit", "charge on my card is wrong",
              "tracking says delivered but nothing came"]
    calls = [handle.decide.remote({"state": s, "questions": {"q": QUESTION}}) for s in states]
    choices = [c.result()["answers"]["q"]["choice"] for c in calls]
    assert choices == ["billing", "shipping", "billing", "shipping"]
    assert handle.info.remote().result()["loaded"] is True
    assert handle.card.remote().result()["surfaces"] == ["decisions"]


def test_invalid_requests_raise_the_engine_error(handle):
    from app.runtime.schemas import InvalidRequest

    with pytest.raises(InvalidRequest):
        handle.decide.remote({"state": "x", "questions": {}}).result()


def test_models_unknown_names_and_metrics(handle):
    from app.runtime.schemas import InvalidRequest, ModelNotFound

    assert [c["name"] for c in handle.models.remote().result()] == ["decision-model"]
    for name in ("decision-model", "systemone", "decisions"):
        answer = handle.decide.remote({"model": name, "state": "refund me", "questions": {"q": QUESTION}}).result()
        assert answer["answers"]["q"]["choice"] == "billing"
    with pytest.raises(ModelNotFound):
        handle.decide.remote({"model": "gpt-4", "state": "x", "questions": {"q": QUESTION}}).result()
    with pytest.raises(InvalidRequest):
        handle.decide.remote({"model": 7, "state": "x", "questions": {"q": QUESTION}}).result()
    info = handle.info.remote().result()
    assert info["deployment"] == "decision-model" and info["managed"] is False
