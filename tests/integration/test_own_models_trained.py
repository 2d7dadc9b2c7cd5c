"""Train, run, bind, swap: models the user trains with `svc-srun train`, end to end on the real
Ray graph (docs/model-runtime.md, "Your own models" and "Bindings to your own models").

1. `svc-srun train sequence-classification` and `token-classification` (the packaged MiniLM,
   whole encoder, 2 epochs at 32 tokens: seconds on CPU) on labelled files the test writes
   (tests/fakes/labelled_data.py: 3 support intents; e-mail addresses and names);
2. `svc-srun run` (the CLI, a subprocess on 127.0.0.1) serves both directories on /v1/classify
   with the trained labels and answers the unseen prompts below as a trained model should;
3. a router configuration whose `domain` signal binds the intent directory routes MoM requests
   sent with the OpenAI SDK by it, and whose `pii_classifier` binds the tagger blocks a request
   holding an e-mail address through the `pii` plugin while a request without one passes;
4. a PATCH with If-Match swaps the intent model under load with no failed request. The new
   model is the trained one under other label names (`relabelled`), mapped round the domains
   the other way, so every route after the swap is one only the new model gives.

The models come from the seeded training run, so the routes asserted are the data's labels.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from tests.fakes.labelled_data import sequence_rows, token_rows, write_jsonl
from tests.fakes.tiny_models import bio_labels
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import Stack
from tests.integration.test_own_models import Load, guarded_types, own_config, patch, routes, served, version
from tests.srun.test_train_cli import train as train_cli  # 2 epochs at 32 tokens, 16 a batch
from tests.srun.workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # two training runs on CPU

APP = "own-trained"
# Unseen objects in the training templates' phrasing: each prompt and its intent.
PROMPTS = {
    "I was charged twice for my bicycle": "billing",
    "the bill for my umbrella shows a fee I did not expect": "billing",
    "when will the bicycle be delivered": "shipping",
    "my umbrella never arrived and the courier lost it": "shipping",
    "I want to return the bicycle I bought": "returns",
    "I need a return label for my sofa": "returns",
}
LABELS = ["billing", "returns", "shipping"]
RENAMED = {"billing": "payment", "returns": "refund", "shipping": "delivery"}  # the swapped model's
ROTATED = {"payment": "shipping", "refund": "billing", "delivery": "returns"}  # ... bound this way
PII_TYPES = {"EMAIL": "EMAIL_ADDRESS", "PERSON": "PERSON"}
WITH_EMAIL = "securechat please send the invoice to grace.5@mail.org"
WITHOUT_PII = "securechat what is the weather like today"


@dataclass
class Trained:
    intents: Path
    tagger: Path
    renamed: Path  # the intents model under RENAMED labels
    cards: dict[str, dict[str, Any]]  # training.json of each
    train_s: dict[str, float]  # wall time of each `svc-srun train`


def train(kind: str, data: Path, out: Path) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    return train_cli(kind, data, out), time.monotonic() - started


def relabelled(source: Path, target: Path, names: dict[str, str]) -> Path:
    """A copy of a trained directory (and its ONNX export) whose labels are renamed."""
    shutil.copytree(source, target)
    for config_path in (target / "config.json", target / "onnx" / "config.json"):
        config = json.loads(config_path.read_text())
        config["id2label"] = {k: names[v] for k, v in config["id2label"].items()}
        config["label2id"] = {names[k]: v for k, v in config["label2id"].items()}
        config_path.write_text(json.dumps(config, indent=2))
    return target


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    root = tmp_path_factory.mktemp("trained")
    intents = write_jsonl(root / "intents.jsonl", sequence_rows(300))
    pii = write_jsonl(root / "pii.jsonl", token_rows(300))
    card_i, took_i = train("sequence-classification", intents, root / "support-intent")
    card_t, took_t = train("token-classification", pii, root / "pii-ner")
    assert card_i["labels"] == LABELS and card_t["labels"] == bio_labels(["EMAIL", "PERSON"])
    renamed = relabelled(root / "support-intent", root / "support-intent-renamed", RENAMED)
    cards = {"intents": card_i, "tagger": card_t}
    return Trained(
        root / "support-intent", root / "pii-ner", renamed, cards, {"intents": took_i, "tagger": took_t}
    )


def trained_config(upstream: FakeUpstream, intents: Path, tagger: Path) -> dict[str, Any]:
    """test_own_models' configuration (the guarded `pii` decision, both bindings) with a
    domain rule and a model per trained label, and thresholds for a trained tagger."""
    config = own_config(upstream, upstream, intents, tagger)
    models = config["providers"]["models"]
    config["providers"]["models"] = [{**models[0], "name": f"{n}-model"} for n in LABELS] + models[2:]
    config["routing"]["signals"]["domains"] = [{"name": n} for n in LABELS]
    guarded = config["routing"]["decisions"][-1]
    guarded["plugins"][0]["configuration"]["threshold"] = 0.6  # "securechat" alone scores ~0.25
    config["routing"]["decisions"] = [
        {
            **config["routing"]["decisions"][0],
            "name": n,
            "rules": {"type": "domain", "name": n},
            "modelRefs": [{"model": f"{n}-model"}],
        }
        for n in LABELS
    ] + [guarded]
    config["global"]["model_catalog"]["modules"]["classifier"]["pii"].update(threshold=0.6, labels=PII_TYPES)
    return config


@pytest.fixture(scope="module")
def base(stack: Stack, trained: Trained, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("trained-config") / "trained.yaml"
    with FakeUpstream(name="llm") as upstream:
        path.write_text(yaml.safe_dump(trained_config(upstream, trained.intents, trained.tagger)))
        with served(stack, APP, path) as url:
            yield url


def test_the_trained_directories_are_served_by_svc_srun_run(trained: Trained, tmp_path: Path) -> None:
    for card in trained.cards.values():  # held-out rows, as served (fp32 and the int8 export)
        assert [ev["engine"] for ev in card["evaluations"]] == ["native", "onnxruntime"]
    intents_eval = trained.cards["intents"]["evaluations"]
    assert min(ev["accuracy"] for ev in intents_eval) >= 0.9  # chance is 1/3
    worker = WorkerProcess([str(trained.intents), str(trained.tagger)], tmp_path / "worker.log")
    try:
        worker.wait_ready(120)
        with worker.client(timeout=30.0) as http:
            cards = {c["served_name"]: c for c in http.get("/v1/models").json()["data"]}
            assert cards[str(trained.intents)]["labels"] == LABELS
            assert cards[str(trained.tagger)]["labels"] == ["EMAIL", "PERSON"]
            answer = http.post("/v1/classify", json={"model": str(trained.intents), "input": list(PROMPTS)})
            assert answer.status_code == 200, answer.text
            assert [r["label"] for r in answer.json()["results"]] == list(PROMPTS.values())
            answer = http.post("/v1/classify", json={"model": str(trained.tagger), "input": WITH_EMAIL})
            assert answer.status_code == 200, answer.text
            spans = answer.json()["results"][0]["spans"]
            assert ("EMAIL", "grace.5@mail.org") in {(s["label"], s["text"]) for s in spans}
    finally:
        worker.stop()
    print(
        f"\ntrain: intents {trained.train_s['intents']:.1f} s, tagger {trained.train_s['tagger']:.1f} s; "
        f"held-out accuracy {[(ev['accuracy'], ev['accuracy_interval']) for ev in intents_eval]}, "
        f"tagger micro F1 {[ev['micro_f1'] for ev in trained.cards['tagger']['evaluations']]}"
    )


def test_mom_requests_are_routed_by_the_trained_model(base: str) -> None:
    assert routes(base, list(PROMPTS)) == list(PROMPTS.values())
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    for prompt, label in PROMPTS.items():  # the domain signal matched is the trained label
        answer = client.chat.completions.with_raw_response.create(
            model="MoM", messages=[{"role": "user", "content": prompt}]
        )
        assert answer.headers["x-vsr-matched-domains"] == label


def test_the_trained_tagger_drives_the_pii_policy(base: str) -> None:
    assert "EMAIL_ADDRESS" in guarded_types(base, WITH_EMAIL)
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    answer = client.chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": WITHOUT_PII}]
    )
    assert answer.headers["x-vsr-selected-decision"] == "guarded"  # passed the same policy


def test_a_patch_swaps_the_trained_model_under_load(base: str, trained: Trained) -> None:
    before = version(base)
    body = {
        "model_deployments": {"intents": {"artifact": str(trained.renamed)}},
        "global": {"model_catalog": {"modules": {"classifier": {"domain": {"labels": ROTATED}}}}},
    }
    with Load(base, list(PROMPTS)) as load:
        started = time.monotonic()
        swapped = patch(base, body)
        ended = time.monotonic()
        count = len(load.answered)
        while len(load.answered) < count + 6 and time.monotonic() < ended + 60:
            time.sleep(0.02)
    assert swapped.status_code == 200, swapped.text
    assert swapped.json()["status"] == "active" and version(base) == before + 1
    assert load.failures == [], load.failures[:3]
    rotated = [ROTATED[RENAMED[label]] for label in PROMPTS.values()]
    after = [decision for at, decision in load.answered if at > ended]
    assert after and set(after) <= set(rotated)
    assert routes(base, list(PROMPTS)) == rotated
    during = sum(1 for at, _ in load.answered if started <= at <= ended)
    print(f"\ntrained swap {ended - started:.2f} s; {during} requests answered during it, 0 failed")
