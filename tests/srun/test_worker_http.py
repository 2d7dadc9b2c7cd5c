"""The worker's HTTP API against a real `svc-srun run` process (TCP): every endpoint's
success and error paths, Server-Timing on every answer, limits, item errors, the cache."""

from __future__ import annotations

import json

import pytest
import yaml

MODELS = ["decision-model", "minilm-embedding", "domain-classifier", "minilm-reranker"]
PHASES = ["parse", "tokenize", "queue", "forward", "post", "serialize", "total"]
SUPPORT = {
    "type": "choice",
    "criteria": {
        "billing": "Invoices, charges, refunds or payment methods",
        "shipping": "Delivery status, tracking or the shipping address of an order",
    },
}


@pytest.fixture(scope="module")
def worker(worker_factory):
    return worker_factory([*MODELS, "--max-request-bytes", "1000000", "--result-cache-entries", "64"])


@pytest.fixture()
def http(worker):
    with worker.client(timeout=30.0) as client:
        yield client


def timing(response) -> dict[str, float]:
    header = response.headers["server-timing"]
    out = {}
    for part in header.split(","):
        name, dur = part.strip().split(";dur=")
        out[name] = float(dur)
    return out


def test_health_live_and_models(http):
    health = http.get("/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ready"
    assert set(health.json()["models"]) == set(MODELS)
    live = http.get("/health/live").json()
    assert live["status"] == "alive" and live["api_version"] == health.json()["api_version"]
    models = http.get("/v1/models").json()
    assert [c["name"] for c in models["data"]] == MODELS
    assert models["process_limits"]["max_request_bytes"] == 1_000_000
    assert models["process_limits"]["max_bundle_tasks"] == 64
    decision = models["data"][0]
    assert decision["surfaces"] == ["decisions"] and decision["limits"]["max_input_tokens"] == 256
    assert decision["digest"].startswith("sha256:") and decision["status"] == "ready"


def test_decisions_answers_every_question_kind(http):
    body = {
        "model": "decision-model",
        "state": "My parcel never arrived and the tracking page has not changed in a week. I bought a Kindle.",
        "questions": {
            "team": SUPPORT,
            "refund": {"type": "noul", "instructions": "Does the customer ask for their money back?"},
            "urgency": {"type": "score", "levels": ["not urgent", "urgent", "emergency"]},
            "topics": {
                "type": "set",
                "labels": [
                    {"key": "delivery", "description": "shipping and parcels"},
                    {"key": "price", "description": "cost and discounts"},
                ],
            },
            "things": {"type": "span", "criteria": {"product": "a product or device name"}},
            "broken": {"type": "choice", "criteria": {"only": "one option"}},
        },
    }
    response = http.post("/v1/decisions", json=body)
    assert response.status_code == 200, response.text
    assert set(timing(response)) == set(PHASES)
    out = response.json()
    team = out["answers"]["team"]
    assert team["choice"] == "shipping"
    assert sum(team["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
    assert 0 <= team["abstain_probability"] <= 1
    assert 0 <= out["answers"]["refund"]["noul"] <= 1
    urgency = out["answers"]["urgency"]
    assert 0 <= urgency["score"] <= 2 and set(urgency["legend"]) == {"0", "1", "2"}
    assert set(out["sets"]["topics"]["probabilities"]) == {"delivery", "price"}
    assert out["answers"]["topics.delivery"]["type"] == "noul"
    for span in out["spans"]["things"]:
        assert body["state"][span["start"] : span["end"]] == span["text"]
    assert out["answers"]["broken"] == {
        "type": "choice",
        "error": "invalid_question",
        "message": out["answers"]["broken"]["message"],
    }
    assert "questions.broken" in out["answers"]["broken"]["message"]
    assert set(out["thresholds"]) == {"team", "refund", "urgency", "topics", "things"}
    assert out["usage"]["tokens"] > 10 and "tokens_lower_bound" not in out["usage"]


def test_systemone_is_the_same_surface_and_states_nest(http):
    body = {
        "state": "please refund the double charge on my card",
        "questions": {"q": SUPPORT},
        "states": {"other": {"state": "where is my package, tracking is stuck", "questions": {"q": SUPPORT}}},
        "model": "decisions",
    }
    out = http.post("/v1/systemone", json=body).json()
    assert out["answers"]["q"]["choice"] == "billing"
    assert out["states"]["other"]["answers"]["q"]["choice"] == "shipping"
    assert (
        out["usage"]["tokens"] == out["states"]["other"]["usage"]["tokens"] + 11
        or out["usage"]["tokens"] > out["states"]["other"]["usage"]["tokens"]
    )


def test_long_state_is_read_in_part_with_a_lower_bound(http):
    state = "The shipment is late again. " * 200
    out = http.post(
        "/v1/decisions",
        json={
            "model": "decision-model",
            "state": state,
            "questions": {"q": SUPPORT},
            "options": {"max_tokens": 32, "return_meta": True},
        },
    ).json()
    assert out["usage"] == {"tokens": 32, "tokens_lower_bound": True}
    assert out["meta"]["engine"] == "onnxruntime" and "timings" in out["meta"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"model": "nope", "state": "x", "questions": {"q": SUPPORT}}, 404, "model_not_found"),
        (
            {"model": "domain-classifier", "state": "x", "questions": {"q": SUPPORT}},
            422,
            "unsupported_surface",
        ),
        (
            {"model": "decision-model", "state": "x", "questions": {"q": {"type": "choice"}}},
            400,
            "invalid_request",
        ),
        ({"model": "decision-model", "state": "x", "questions": {}}, 400, "invalid_request"),
        (
            {
                "model": "decision-model",
                "state": "x",
                "questions": {"q": SUPPORT},
                "images": ["data:image/png;base64,AA=="],
            },
            400,
            "invalid_request",
        ),
        ({"state": "x", "questions": {"q": SUPPORT}, "unknown_field": 1}, 400, "invalid_request"),
    ],
)
def test_decision_errors(http, body, status, code):
    response = http.post("/v1/decisions", json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert set(timing(response)) == set(PHASES)


def test_image_rejection_names_the_reason(http):
    response = http.post(
        "/v1/decisions",
        json={
            "model": "decision-model",
            "state": "x",
            "questions": {"q": SUPPORT},
            "images": ["data:image/png;base64,AA=="],
        },
    )
    assert response.json()["error"]["reason"] == "modality_not_supported"


def test_bad_json_and_oversized_body(http):
    bad = http.post("/v1/classify", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    big = http.post("/v1/classify", json={"model": "domain-classifier", "input": "x" * 1_100_000})
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    assert "total" in timing(big)


def test_classify_item_errors_fail_one_item_only(http):
    long_text = "word " * 400
    out = http.post("/v1/classify", json={"model": "domain", "input": ["What is 2 + 2?", long_text]}).json()
    assert out["results"][0]["label"]
    assert out["results"][1]["error"]["code"] == "max_length_exceeded"
    scan = http.post(
        "/v1/classify",
        json={
            "model": "domain-classifier",
            "input": ["hello", "word " * 33_000],
            "options": {"overflow": "window"},
        },
    ).json()
    assert scan["results"][0]["label"] and scan["results"][1]["error"]["code"] == "scan_budget_exceeded"


def test_embeddings_dimensions_and_layer(http):
    ok = http.post(
        "/v1/embeddings", json={"model": "minilm-embedding", "input": ["a", "b"], "dimensions": 384}
    )
    assert ok.status_code == 200 and len(ok.json()["data"][1]["embedding"]) == 384
    assert (
        http.post(
            "/v1/embeddings", json={"model": "minilm-embedding", "input": "a", "dimensions": 8}
        ).status_code
        == 400
    )
    assert (
        http.post("/v1/embeddings", json={"model": "minilm-embedding", "input": "a", "layer": 3}).status_code
        == 400
    )
    assert http.post("/v1/embeddings", json={"model": "decision-model", "input": "a"}).status_code == 422


def test_rerank_orders_by_relevance_and_honours_top_n(http):
    docs = [
        "The stock market fell sharply on Tuesday.",
        "Knead the dough, let it rise, then bake the bread.",
        "Bread prices rose in the bakery.",
        "A guide to tuning car engines.",
    ]
    out = http.post(
        "/v1/rerank",
        json={
            "model": "minilm-reranker",
            "query": "how do I bake bread at home",
            "documents": docs,
            "top_n": 2,
            "return_documents": True,
        },
    ).json()
    assert [r["index"] for r in out["results"]][0] == 1 and len(out["results"]) == 2
    assert out["results"][0]["relevance_score"] >= out["results"][1]["relevance_score"]
    assert out["results"][0]["document"] == docs[1]
    assert (
        http.post("/v1/rerank", json={"model": "minilm-reranker", "query": "x", "documents": []}).status_code
        == 400
    )


def test_bundle_answers_in_order_with_each_status(http):
    body = {
        "tasks": [
            {
                "id": "d",
                "decisions": {"model": "decision-model", "state": "refund me", "questions": {"q": SUPPORT}},
            },
            {"id": "missing", "classify": {"model": "nope", "input": "x"}},
            {"id": "c", "classify": {"model": "domain-classifier", "input": "What is an enzyme?"}},
            {"id": "bad", "decisions": {"model": "decision-model", "state": "x", "questions": {}}},
        ]
    }
    response = http.post("/v1/bundle", json=body)
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["id"] for r in results] == ["d", "missing", "c", "bad"]
    assert [r["status"] for r in results] == [200, 404, 200, 400]
    assert results[1]["error"]["code"] == "model_not_found"
    assert set(timing(response)) == set(PHASES)
    too_many = http.post(
        "/v1/bundle",
        json={"tasks": [{"id": str(i), "classify": {"model": "domain", "input": "x"}} for i in range(65)]},
    )
    assert too_many.status_code == 400 and too_many.json()["error"]["limit"] == 64


def test_bundle_deadline_fails_only_late_tasks(http):
    questions = {
        f"q{i}": {"type": "choice", "criteria": {f"a{i}": f"option {i} one", f"b{i}": f"option {i} two"}}
        for i in range(40)
    }
    body = {
        "tasks": [
            {
                "id": "slow",
                "decisions": {
                    "model": "decision-model",
                    "state": "deadline test " * 30,
                    "questions": questions,
                },
            }
        ],
        "options": {"deadline_ms": 1},
    }
    result = http.post("/v1/bundle", json=body).json()["results"][0]
    assert result["status"] == 504 and result["error"]["code"] == "deadline_exceeded"


def test_result_cache_hits_on_a_repeat(http):
    body = {"model": "decision-model", "state": "cache me: where is my order?", "questions": {"q": SUPPORT}}
    first = http.post("/v1/decisions", json=body).json()
    second = http.post("/v1/decisions", json=body).json()
    assert first == second
    text = http.get("/metrics").text
    hits = [
        line
        for line in text.splitlines()
        if line.startswith('svc_srun_result_cache_total{model="decision-model",outcome="hit"}')
    ]
    assert hits and float(hits[0].split()[-1]) >= 1


def test_metrics_and_openapi(http):
    http.post("/v1/classify", json={"model": "domain-classifier", "input": "hello there"})
    text = http.get("/metrics").text
    for name in (
        "svc_srun_requests_total",
        "svc_srun_request_duration_seconds",
        "svc_srun_queue_duration_seconds",
        "svc_srun_forward_duration_seconds",
        "svc_srun_batch_rows",
        "svc_srun_batch_tokens",
        "svc_srun_queue_depth",
        "svc_srun_ready",
        "svc_srun_model_info",
        "svc_srun_model_memory_bytes",
        "svc_srun_bundle_tasks",
    ):
        assert name in text, name
    assert 'svc_srun_ready{model="decision-model"} 1.0' in text
    doc = yaml.safe_load(http.get("/openapi.yaml").text)
    assert doc["info"]["version"] == http.get("/health/live").json()["api_version"]
    for path in (
        "/v1/decisions",
        "/v1/systemone",
        "/v1/classify",
        "/v1/embeddings",
        "/v1/rerank",
        "/v1/bundle",
    ):
        assert "requestBody" in doc["paths"][path]["post"]
        assert "parameters" not in doc["paths"][path]["post"]
    assert "DecisionRequest" in doc["components"]["schemas"]
    assert json.dumps(doc)  # plain data


def test_unknown_route_uses_the_error_body(http):
    response = http.get("/v1/nothing")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
