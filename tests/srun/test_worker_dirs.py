"""`svc-srun run DIR`: a user's model directory served over the worker's HTTP API by a real
worker process on 127.0.0.1, with its own labels (docs/model-runtime.md, "Your own models")."""

from __future__ import annotations

import pytest

from tests.fakes.tiny_models import write_tiny_sequence_classifier

LABELS = ["billing", "shipping", "returns"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_sequence_classifier(tmp_path_factory.mktemp("dirs") / "support-intent", LABELS)


@pytest.fixture(scope="module")
def worker(worker_factory, model_dir):
    return worker_factory([str(model_dir), "minilm-embedding"])


def test_run_dir_serves_classify_with_its_labels(worker, model_dir):
    with worker.client(timeout=30.0) as http:
        health = http.get("/health").json()
        assert health["status"] == "ready" and health["models"][str(model_dir)]["status"] == "ready"
        cards = {c["name"]: c for c in http.get("/v1/models").json()["data"]}
        card = cards["support-intent"]
        assert card["labels"] == LABELS and card["task"] == "label_probabilities"
        assert card["served_name"] == str(model_dir) and card["digest"].startswith("sha256:")
        for name in (str(model_dir), "support-intent"):  # the served name, or the directory's
            answer = http.post(
                "/v1/classify", json={"model": name, "input": ["I was charged twice", "where is it?"]}
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["task"] == "label_probabilities" and body["model"] == str(model_dir)
            for item in body["results"]:
                assert set(item["probabilities"]) == set(LABELS) and item["label"] in LABELS
        embeddings = http.post("/v1/embeddings", json={"model": str(model_dir), "input": "x"})
        assert embeddings.status_code == 422 and embeddings.json()["error"]["code"] == "unsupported_surface"
