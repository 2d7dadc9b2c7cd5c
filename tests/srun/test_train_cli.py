"""`svc-srun train` end to end on this machine: a labelled file the test writes, a real
training run (the packaged MiniLM, whole encoder), the model directory and its card, and a
real `svc-srun run` worker serving the directory and its ONNX int8 export with their labels
(docs/model-runtime.md, "Train one"). Slow: each run fine-tunes MiniLM on CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.runtime.model_dir import inspect_model_dir
from tests.fakes.labelled_data import sequence_rows, token_rows, write_csv, write_jsonl
from tests.srun.workers import ROOT

pytestmark = pytest.mark.slow
# Small on purpose (2 cores shared with other work): 1 epoch of ~200 rows at 32 tokens.
FAST = ["--epochs", "2", "--max-length", "32", "--batch-size", "16"]


def train(kind: str, data, out) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.srun", "train", kind, "--data", str(data), "--out", str(out), *FAST],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    card = json.loads(done.stdout)
    assert card == json.loads((out / "training.json").read_text())
    return card


def check_card(card: dict, out, data, rows: int) -> None:
    assert card["data"]["rows"] == rows and card["data"]["digest"].startswith("sha256:")
    assert card["split"]["held_out"] + card["split"]["train"] == rows and card["split"]["seed"] == 0
    native, onnx = card["evaluations"]
    assert (native["engine"], native["directory"], onnx["engine"], onnx["directory"]) == (
        "native",
        ".",
        "onnxruntime",
        "onnx",
    )
    for ev in (native, onnx):
        assert 0 < ev["p50_ms"] <= ev["p99_ms"] and ev["latency_samples"] == 64
    assert 0 <= onnx["agreement_with_fp32"] <= 1
    readme = (out / "README.md").read_text()
    assert card["data"]["digest"] in readme and "p50" in readme and "agreement with the fp32" in readme


def test_train_sequence_classifier_and_serve_it(tmp_path, worker_factory):
    data = write_jsonl(tmp_path / "intents.jsonl", sequence_rows(240))
    out = tmp_path / "intent-model"
    card = train("sequence-classification", data, out)
    check_card(card, out, data, 240)
    labels = ["billing", "returns", "shipping"]
    assert card["labels"] == labels and card["training"]["heads_only"] is False
    native = card["evaluations"][0]
    assert [s["label"] for s in native["per_label"]] == labels and sum(
        s["support"] for s in native["per_label"]
    ) == 48
    # learned, not guessed: chance is 1/3 on this balanced held-out split
    assert native["accuracy"] >= 0.8 and native["accuracy_interval"][0] <= native["accuracy"]
    assert card["evaluations"][1]["accuracy"] >= 0.8
    assert inspect_model_dir(out).labels == labels and inspect_model_dir(out / "onnx").format == "onnx"
    worker = worker_factory([str(out), str(out / "onnx")])
    with worker.client(timeout=30.0) as http:
        for model in (str(out), str(out / "onnx")):
            answer = http.post(
                "/v1/classify", json={"model": model, "input": ["I was charged twice for my lamp"]}
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["results"][0]["label"] == "billing"
        cards = {c["served_name"]: c for c in http.get("/v1/models").json()["data"]}
        # on CPU a directory with its export serves the int8 export, as the built-ins do
        assert cards[str(out)]["engine"] == "onnxruntime"
        assert cards[str(out)]["engines"] == ["onnxruntime", "native"]
        assert cards[str(out / "onnx")]["engine"] == "onnxruntime"


def test_train_token_classifier_from_csv_and_serve_it(tmp_path, worker_factory):
    data = write_csv(tmp_path / "pii.csv", token_rows(200))
    out = tmp_path / "pii-model"
    card = train("token-classification", data, out)
    check_card(card, out, data, 200)
    assert card["labels"] == ["O", "B-EMAIL", "I-EMAIL", "B-PERSON", "I-PERSON"]
    native = card["evaluations"][0]
    assert {s["label"] for s in native["per_label"]} == {"EMAIL", "PERSON"} and native["micro_f1"] >= 0.5
    worker = worker_factory([str(out)])
    text = "please contact emma novak at emma.7@corp.net about the invoice"
    with worker.client(timeout=30.0) as http:
        answer = http.post("/v1/classify", json={"input": text})
        assert answer.status_code == 200, answer.text
        spans = answer.json()["results"][0]["spans"]
        assert {s["label"] for s in spans} <= {"EMAIL", "PERSON"}
        assert ("EMAIL", "emma.7@corp.net") in {(s["label"], s["text"]) for s in spans}
