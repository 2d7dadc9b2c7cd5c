"""The `embedding` binding to a sentence encoder of the user's own, on the real Ray graph
(docs/model-runtime.md "Bindings to your own models"): a tiny sentence-transformers directory
written by the test (tests/fakes/tiny_models.py) serves the embedding rules and the response
cache. MoM requests sent with the OpenAI SDK are routed by an embedding rule whose candidates
and query vectors that encoder computes, a repeated request is answered from the cache, a
PATCH with If-Match swaps the encoder for another of another width under load with no failed
request (the routes follow the new encoder, and the cache does not answer from the old
encoder's partition), a classifier directory bound as the encoder is refused at PATCH, and an
encoder that fails to load leaves the old one serving.

The tiny encoders are random, so the expected routes are each encoder's own similarities,
computed here in process with the loader the worker uses: the rule's threshold is chosen
between them so that the two encoders route some prompt differently.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import yaml

from tests.fakes.tiny_models import write_tiny_sentence_encoder, write_tiny_sequence_classifier
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import Stack
from tests.integration.test_own_models import Load, _mismatched, patch, served, version

pytestmark = pytest.mark.integration

APP = "embed-bind"
CANDIDATES = ["I was charged twice, please give me my money back"]
PROMPTS = [
    "I was charged twice this month, please refund me",
    "my laptop will not start after the update",
    "what time is it in the city today",
    "the water in the house is cold and the light is off",
    "refund the double payment on my card",
    "send me the invoice for last month",
]
CACHED = "please tell me about the weather and a good hotel for my trip"  # in no other request
MARGIN = 0.002  # between the rule's threshold and every similarity: far above float noise
SEMANTIC = "global.model_catalog.embeddings.semantic.deployment"


@dataclass
class Encoders:
    a: Path  # 32 dimensions
    b: Path  # 48 dimensions
    classifier: Path  # a sequence classifier: no sentence vectors
    broken: Path  # a's small files over a mismatched weight: passes validation, fails to load
    threshold: float  # the rule's, chosen so that a and b route some prompt differently
    routes_a: list[str]  # each prompt's decision with encoder a ("" for the default model)
    routes_b: list[str]


def similarities(directory: Path) -> np.ndarray:
    """Each prompt's best cosine to the candidates, as the embedding rule computes it."""
    from app.runtime.registry import load_model

    vectors = np.asarray(load_model(str(directory)).embed(PROMPTS + CANDIDATES).vectors, dtype=np.float64)
    return np.max(vectors[: len(PROMPTS)] @ vectors[len(PROMPTS) :].T, axis=1)


def split(sims_a: np.ndarray, sims_b: np.ndarray) -> float | None:
    """A threshold at which both encoders match some prompts but not all, differently."""
    everything = np.sort(np.concatenate([sims_a, sims_b]))
    for low, high in zip(everything[:-1], everything[1:], strict=True):
        t = float(low + high) / 2
        if high - low < 2 * MARGIN:
            continue
        a, b = sims_a >= t, sims_b >= t
        if a.any() and b.any() and not a.all() and not b.all() and (a != b).any():
            return t
    return None


def decisions(sims: np.ndarray, threshold: float) -> list[str]:
    return ["billing" if s >= threshold else "" for s in sims]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> Encoders:
    root = tmp_path_factory.mktemp("encoders")
    a = write_tiny_sentence_encoder(root / "encoder-a", dim=32, seed=0)
    sims_a = similarities(a)
    classifier = write_tiny_sequence_classifier(root / "intents", ["billing", "support"])
    broken = _mismatched(Path(shutil.copytree(a, root / "encoder-broken")))
    for seed in range(1, 12):
        b = write_tiny_sentence_encoder(root / f"encoder-b{seed}", dim=48, seed=seed)
        sims_b = similarities(b)
        threshold = split(sims_a, sims_b)
        if threshold is not None:
            routes_a, routes_b = decisions(sims_a, threshold), decisions(sims_b, threshold)
            return Encoders(a, b, classifier, broken, threshold, routes_a, routes_b)
    raise AssertionError("no pair of tiny encoders routes the prompts differently")


def embed_config(a: FakeUpstream, b: FakeUpstream, encoder: Path, threshold: float) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "general"},
            "models": [
                {"name": "billing-model", "backend_refs": [{"base_url": a.host_url}]},
                {"name": "general", "backend_refs": [{"base_url": b.host_url}]},
            ],
        },
        "routing": {
            "signals": {
                "embeddings": [{"name": "refunds", "candidates": CANDIDATES, "threshold": threshold}]
            },
            "decisions": [
                {
                    "name": "billing",
                    "priority": 10,
                    "rules": {"type": "embedding", "name": "refunds"},
                    "modelRefs": [{"model": "billing-model"}],
                }
            ],
        },
        "model_deployments": {"encoder": {"artifact": str(encoder)}},
        "global": {
            "model_catalog": {
                "signal_timeout_ms": 10000,
                "embeddings": {"semantic": {"deployment": "encoder"}},
            },
            # only the same text hits: the random encoders put every two prompts above 0.9
            "stores": {"response_cache": {"enabled": True, "similarity_threshold": 0.999}},
        },
    }


@pytest.fixture(scope="module")
def base(stack: Stack, encoders: Encoders, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("embed-config") / "embed.yaml"
    with FakeUpstream(name="billing") as a, FakeUpstream(name="general") as b:
        path.write_text(yaml.safe_dump(embed_config(a, b, encoders.a, encoders.threshold)))
        with served(stack, APP, path) as url:
            yield url


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)


def ask(base: str, prompt: str, cache: str | None = None) -> Any:
    """The raw answer; `cache`: the request's x-vsr-cache-control directive."""
    headers = {"x-vsr-cache-control": cache} if cache else None
    return sdk(base).chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": prompt}], extra_headers=headers
    )


def routes(base: str) -> list[str]:
    """The decision of each prompt ("" when the default model answered)."""
    out = []
    for prompt in PROMPTS:
        answer = ask(base, prompt, cache="bypass")
        decision = answer.headers.get("x-vsr-selected-decision", "")
        assert answer.headers["x-selected-model"] == ("billing-model" if decision else "general")
        out.append(decision)
    return out


def cache_statuses(base: str, prompt: str) -> list[str]:
    """x-cache-status of `prompt` asked until it is a hit (the write lands after the answer)."""
    statuses: list[str] = []
    deadline = time.monotonic() + 30
    while "hit" not in statuses and time.monotonic() < deadline:
        answer = ask(base, prompt)
        statuses.append(answer.headers["x-cache-status"])
        if statuses[-1] == "hit":
            assert answer.headers["x-vsr-cache-hit"] == "true"
    return statuses


def to_encoder(artifact: Path) -> dict[str, Any]:
    return {"model_deployments": {"encoder": {"artifact": str(artifact)}}}


def test_mom_requests_are_routed_by_the_bound_encoder(base: str, encoders: Encoders) -> None:
    assert routes(base) == encoders.routes_a


def test_a_repeated_request_is_answered_from_the_cache(base: str) -> None:
    statuses = cache_statuses(base, CACHED)
    assert statuses[0] == "miss" and statuses[-1] == "hit", statuses


def test_a_classifier_bound_as_the_encoder_is_refused_at_patch(base: str, encoders: Encoders) -> None:
    before = version(base)
    refused = patch(base, to_encoder(encoders.classifier))
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "INVALID_CONFIG", error
    reasons = {r["path"]: r["message"] for r in error["details"]["reasons"]}
    assert f"the model at {encoders.classifier} answers label_probabilities" in reasons[SEMANTIC]
    assert version(base) == before  # nothing persisted
    assert routes(base) == encoders.routes_a


def test_a_patch_swaps_the_encoder_under_load_and_the_cache_starts_afresh(
    base: str, encoders: Encoders
) -> None:
    before = version(base)
    with Load(base, PROMPTS) as load:
        started = time.monotonic()
        swapped = patch(base, to_encoder(encoders.b))
        ended = time.monotonic()
        count = len(load.answered)
        while len(load.answered) < count + 8 and time.monotonic() < ended + 60:
            time.sleep(0.02)
    assert swapped.status_code == 200, swapped.text
    assert swapped.json()["status"] == "active" and version(base) == before + 1
    assert load.failures == [], load.failures[:3]
    during = [decision for at, decision in load.answered if started <= at <= ended]
    assert routes(base) == encoders.routes_b
    # the entry encoder a wrote for CACHED is in its partition: encoder b's lookup misses it
    statuses = cache_statuses(base, CACHED)
    assert statuses[0] == "miss" and statuses[-1] == "hit", statuses
    load_average = os.getloadavg()[0]
    print(
        f"\nencoder swap {ended - started:.2f} s; {len(during)} requests answered during it, 0 failed;"
        f" load average {load_average:.1f}"
    )


def test_an_encoder_that_fails_to_load_leaves_the_old_one_serving(base: str, encoders: Encoders) -> None:
    serving = routes(base)
    with Load(base, PROMPTS) as load:
        started = time.monotonic()
        failed = patch(base, to_encoder(encoders.broken))
        took = time.monotonic() - started
    assert failed.status_code == 503, failed.text
    assert failed.json()["status"] == "activation_failed"
    assert load.failures == [], load.failures[:3]
    record = httpx.get(f"{base}/api/v1/config/hash", timeout=30).json()["activation"]
    assert record["state"] == "failed"
    why = " ".join(r["message"] for r in record["reasons"])
    assert "model deployment encoder did not load" in why and str(encoders.broken) in why
    assert routes(base) == serving  # the previous encoder answers
    print(f"\nfailed encoder swap answered in {took:.2f} s; {len(load.answered)} requests answered, 0 failed")
