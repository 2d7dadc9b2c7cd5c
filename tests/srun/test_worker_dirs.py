"""`svc-srun run DIR` and `ORG/NAME@COMMIT`: a user's model directories served over the worker's
HTTP API by a real worker process on 127.0.0.1, with their own labels; a bad directory is
`failed` at load with its path and reason (never a 500 on a request), and the others serve
(docs/model-runtime.md, "Your own models")."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time

import pytest

from tests.fakes.tiny_models import (
    write_tiny_cross_encoder,
    write_tiny_sentence_encoder,
    write_tiny_sequence_classifier,
    write_tiny_token_classifier,
)
from tests.srun.workers import ROOT, WorkerProcess

LABELS = ["billing", "shipping", "returns"]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("dirs")
    good = write_tiny_sequence_classifier(base / "support-intent", LABELS)
    snapshot = base / "hub" / "models--acme--intent" / "snapshots" / COMMIT
    shutil.copytree(good, snapshot)
    bad = shutil.copytree(good, base / "no-tokenizer")
    (bad / "tokenizer.json").unlink()
    return {
        "good": good,
        "hub": base / "hub",
        "bad": bad,
        "tok": write_tiny_token_classifier(base / "pii-ner", ["EMAIL", "PERSON"]),
        "enc": write_tiny_sentence_encoder(base / "my-encoder", 48),
        "ce": write_tiny_cross_encoder(base / "my-reranker"),
    }


@pytest.fixture(scope="module")
def worker(dirs, tmp_path_factory):
    models = [str(dirs[k]) for k in ("good", "bad", "tok", "enc", "ce")]
    args = [*models, f"acme/intent@{COMMIT}", "--cache-dir", str(dirs["hub"])]
    proc = WorkerProcess(args, tmp_path_factory.mktemp("srun") / "worker.log")
    try:
        deadline = time.monotonic() + 60
        with proc.client(timeout=2.0) as http:
            while time.monotonic() < deadline:
                try:
                    models = http.get("/health").json()["models"]
                    if all(m["status"] in ("ready", "failed") for m in models.values()):
                        break
                except Exception:  # not listening yet
                    pass
                time.sleep(0.2)
        yield proc
    finally:
        proc.stop()


def test_run_dir_serves_classify_with_its_labels(worker, dirs):
    good = str(dirs["good"])
    with worker.client(timeout=30.0) as http:
        cards = {c["name"]: c for c in http.get("/v1/models").json()["data"]}
        card = cards["support-intent"]
        assert card["labels"] == LABELS and card["task"] == "label_probabilities"
        assert card["served_name"] == good and card["digest"].startswith("sha256:")
        for name in (good, "support-intent"):  # the served name, or the directory's
            answer = http.post(
                "/v1/classify", json={"model": name, "input": ["I was charged twice", "where?"]}
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["task"] == "label_probabilities" and body["model"] == good
            for item in body["results"]:
                assert set(item["probabilities"]) == set(LABELS) and item["label"] in LABELS
        embeddings = http.post("/v1/embeddings", json={"model": good, "input": "x"})
        assert embeddings.status_code == 422 and embeddings.json()["error"]["code"] == "unsupported_surface"


def test_repo_at_commit_is_served_from_the_cache_dir(worker):
    with worker.client(timeout=30.0) as http:
        card = next(c for c in http.get("/v1/models").json()["data"] if c["name"] == "acme/intent")
        assert card["revision"] == COMMIT and card["status"] == "ready" and card["labels"] == LABELS
        answer = http.post("/v1/classify", json={"model": "acme/intent", "input": "refund"})
        assert answer.status_code == 200 and answer.json()["results"][0]["label"] in LABELS


def test_a_bad_directory_fails_at_load_with_path_and_reason(worker, dirs):
    bad = str(dirs["bad"])
    with worker.client(timeout=30.0) as http:
        health = http.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "degraded"
        state = health.json()["models"][bad]
        assert state["status"] == "failed" and state["attempts"] == 1  # not retried
        assert bad in state["message"] and "missing tokenizer.json" in state["message"]
        answer = http.post("/v1/classify", json={"model": bad, "input": "hello"})
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "not_ready"
        assert "missing tokenizer.json" in answer.json()["error"]["message"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli.srun", "run", *args, "--port", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_offline_start_names_the_bad_directory_and_the_missing_repository(dirs, tmp_path):
    done = run_cli(str(dirs["bad"]), f"acme/other@{COMMIT}", "--offline", "--cache-dir", str(tmp_path))
    assert done.returncode == 1
    assert f"{dirs['bad']}: missing tokenizer.json" in done.stderr
    assert f"acme/other@{COMMIT} is not in the hub cache {tmp_path}" in done.stderr
    refused = run_cli("acme/intent@main", "--offline")
    assert refused.returncode == 1 and "is not a 40-character commit" in refused.stderr


def test_token_classifier_and_sentence_encoder_directories(worker, dirs):
    text = "write to jane.doe@example.com or call bob"
    with worker.client(timeout=30.0) as http:
        cards = {c["name"]: c for c in http.get("/v1/models").json()["data"]}
        assert cards["pii-ner"]["labels"] == ["EMAIL", "PERSON"] and cards["pii-ner"]["task"] == "token_spans"
        assert cards["my-encoder"]["dimensions"] == [48] and cards["my-encoder"]["task"] == "embeddings"
        spans = http.post("/v1/classify", json={"model": "pii-ner", "input": text})
        assert spans.status_code == 200, spans.text
        for span in spans.json()["results"][0]["spans"]:
            assert span["label"] in ("EMAIL", "PERSON") and text[span["start"] : span["end"]] == span["text"]
        vectors = http.post("/v1/embeddings", json={"model": "my-encoder", "input": ["hello", "world"]})
        assert vectors.status_code == 200, vectors.text
        data = vectors.json()["data"]
        assert [len(d["embedding"]) for d in data] == [48, 48]
        assert abs(sum(x * x for x in data[0]["embedding"]) - 1.0) < 1e-4


def test_a_cross_encoder_directory_answers_rerank(worker):
    docs = ["the stock market fell", "knead the dough and bake the bread", "rain tomorrow"]
    with worker.client(timeout=30.0) as http:
        card = {c["name"]: c for c in http.get("/v1/models").json()["data"]}["my-reranker"]
        assert (card["task"], card["surfaces"], card["labels"]) == ("rerank", ["rerank"], [])
        body = {"model": "my-reranker", "query": "bake bread", "documents": docs, "top_n": 2}
        answer = http.post("/v1/rerank", json={**body, "return_documents": True})
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert len(results) == 2 and [r["document"] for r in results] == [docs[r["index"]] for r in results]
        assert results[0]["relevance_score"] >= results[1]["relevance_score"]
        for r in results:  # a one-label cross-encoder's score is the sigmoid of its logit
            assert abs(r["relevance_score"] - 1 / (1 + math.exp(-r["logit"]))) < 1e-5
        assert answer.json()["usage"]["tokens"] > 0
        wrong = http.post("/v1/classify", json={"model": "my-reranker", "input": "bake bread"})
        assert wrong.status_code == 422 and wrong.json()["error"]["code"] == "unsupported_surface"
