"""The native decision API (docs/model-runtime.md) through the real Ray graph: the Ingress publishes POST
/v1/decisions, /v1/systemone and GET /v1/systemone/models, answered by the DecisionModel
deployment over its handle; errors keep the public words; the DecisionModel replica's
svc_model_runtime_* metrics reach the router's metrics endpoint (:9190)."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.conftest import Stack
from tests.integration.test_metrics import eventually, scrape, value

pytestmark = pytest.mark.integration

SUPPORT = {
    "type": "choice",
    "criteria": {
        "billing": "Invoices, charges, refunds or payment methods",
        "shipping": "Delivery status, tracking or the shipping address of an order",
    },
}
DEPLOYMENT = "decision-model"


def post(stack: Stack, path: str, body: object) -> httpx.Response:
    return httpx.post(f"{stack.base_url}{path}", json=body, timeout=60)


def test_decisions_and_systemone_are_answered_by_the_decision_model(stack: Stack) -> None:
    before = scrape(stack.metrics_url)
    body = {
        "state": "I was charged twice for my order this month, please refund one of the payments.",
        "questions": {
            "team": SUPPORT,
            "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
            "mood": {"type": "score", "criteria": ["calm", "annoyed", "furious"]},
        },
        "options": {"return_meta": True},
    }
    answer = post(stack, "/v1/decisions", body)
    assert answer.status_code == 200, answer.text
    out = answer.json()
    assert out["model"] == DEPLOYMENT and out["answers"]["team"]["choice"] == "billing"
    assert out["answers"]["refund"]["type"] == "noul" and 0.0 <= out["answers"]["refund"]["noul"] <= 1.0
    assert out["answers"]["mood"]["type"] == "score" and out["usage"]["tokens"] > 0
    assert out["meta"]["engine"] and out["meta"]["timings"]

    same = post(
        stack,
        "/v1/systemone",
        {"model": "systemone", "state": "my parcel never arrived", "questions": {"team": SUPPORT}},
    )
    assert same.status_code == 200 and same.json()["answers"]["team"]["choice"] == "shipping"

    models = httpx.get(f"{stack.base_url}/v1/systemone/models", timeout=30)
    assert models.status_code == 200
    (card,) = models.json()["data"]
    assert card["name"] == DEPLOYMENT and card["surfaces"] == ["decisions"] and card["status"] == "ready"
    # Chat model discovery stays /v1/models, without the native model.
    assert DEPLOYMENT not in {m["id"] for m in httpx.get(f"{stack.v1}/models", timeout=30).json()["data"]}

    def check() -> None:
        after = scrape(stack.metrics_url)
        ok = ("svc_model_runtime_requests_total", {"deployment": DEPLOYMENT, "outcome": "ok"})
        assert value(after, ok[0], **ok[1]) - value(before, ok[0], **ok[1]) >= 2
        assert value(after, "svc_model_runtime_ready", deployment=DEPLOYMENT) == 1.0
        count = "svc_model_runtime_request_duration_seconds_count"
        assert value(after, count, deployment=DEPLOYMENT, surface="decisions") >= 2
        forward = "svc_model_runtime_server_seconds_count"
        assert value(after, forward, deployment=DEPLOYMENT, surface="decisions", phase="forward") >= 2
        replicas = [labels for (name, labels) in after if name == "svc_model_runtime_replica_ready"]
        assert replicas and all(dict(labels)["deployment"] == DEPLOYMENT for labels in replicas)

    eventually(check)


def test_errors_use_the_public_words(stack: Stack) -> None:
    before = scrape(stack.metrics_url)
    invalid = post(stack, "/v1/decisions", {"state": "x", "questions": {"q": {"type": "set"}}})
    assert invalid.status_code == 400
    assert invalid.json() == {"error": {"code": "invalid_request", "message": "invalid request"}}
    unknown = post(stack, "/v1/systemone", {"model": "gpt-4o", "state": "x", "questions": {"team": SUPPORT}})
    assert unknown.status_code == 404
    assert unknown.json() == {"error": {"code": "model_not_found", "message": "model not found"}}
    not_json = httpx.post(
        f"{stack.base_url}/v1/decisions",
        content=b"{nope",
        timeout=30,
        headers={"content-type": "application/json"},
    )
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_request"
    # An app built without the DecisionModel deployment still publishes the routes.
    absent = post(stack, "/noroute/v1/decisions", {"state": "x", "questions": {"team": SUPPORT}})
    assert absent.status_code == 503 and absent.headers["retry-after"] == "5"
    assert absent.json()["error"]["code"] == "not_ready"

    def check() -> None:
        after = scrape(stack.metrics_url)
        name, labels = "svc_model_runtime_requests_total", {"deployment": DEPLOYMENT, "outcome": "rejected"}
        assert value(after, name, **labels) - value(before, name, **labels) == 2

    eventually(check)
