"""The model diagnostics routes on the Ray graph: the Ingress reaches the Embedding,
DomainClassifier and Guard deployments through its handles (deployments/diagnostics_source.py),
the same models the Router's requests use."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

MODELS = "/api/v1/diagnostics/models"


def post(stack: Stack, path: str, body: dict) -> dict:
    response = httpx.post(f"{stack.base_url}{path}", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result: dict = response.json()
    return result


def test_the_graphs_models_answer_the_typed_calls(stack: Stack) -> None:
    listed = httpx.get(f"{stack.base_url}{MODELS}", timeout=120).json()
    assert {b["binding"] for b in listed["bindings"]} >= {"embedding", "domain_classifier", "pii_classifier"}

    labels = post(
        stack,
        f"{MODELS}/labels",
        {"recipe": "default", "binding": "domain_classifier", "text": "Find the derivative of x^3 + 2x"},
    )
    assert labels["label"] == "math" and abs(sum(labels["probabilities"].values()) - 1.0) < 1e-3

    text = "Écris à jane.doe@example.com demain"
    tokens = post(stack, f"{MODELS}/tokens", {"recipe": "default", "binding": "pii_classifier", "text": text})
    encoded = text.encode("utf-8")
    spans = [encoded[t["start"] : t["end"]].decode("utf-8") for t in tokens["tokens"]]
    assert "jane.doe@example.com" in spans

    embedded = post(stack, "/api/v1/diagnostics/embeddings", {"texts": ["a cat sat on the mat", "hi"]})
    vectors = np.array([e["embedding"] for e in embedded["embeddings"]])
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    close = post(
        stack, "/api/v1/diagnostics/similarity", {"text1": "a cat on a mat", "text2": "a kitten on a rug"}
    )
    far = post(
        stack, "/api/v1/diagnostics/similarity", {"text1": "a cat on a mat", "text2": "quarterly tax filing"}
    )
    assert close["similarity"] > far["similarity"]
