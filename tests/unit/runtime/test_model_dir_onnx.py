"""The ONNX format of a model directory (app/runtime/onnx_export.py, the onnxruntime engine
of dir_models.py): each task exported to dynamic int8 loads on onnxruntime, keeps the
directory's labels and pooling, and answers close to the fp32 torch model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.runtime.model_dir import ModelDirError, inspect_model_dir
from app.runtime.onnx_export import export_onnx
from app.runtime.registry import load_model
from app.runtime.schemas import InvalidRequest
from tests.fakes.tiny_models import (
    write_tiny_sentence_encoder,
    write_tiny_sequence_classifier,
    write_tiny_token_classifier,
)

TEXTS = ["I was charged twice for my order", "where is my parcel", "write to bob at bob@example.com"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    base = tmp_path_factory.mktemp("onnx")
    sources = {
        "seq": write_tiny_sequence_classifier(base / "seq", ["billing", "shipping", "returns"]),
        "tok": write_tiny_token_classifier(base / "tok", ["EMAIL", "PERSON"]),
        "enc": write_tiny_sentence_encoder(base / "enc", 48),
    }
    return {k: (src, export_onnx(src, base / f"{k}-onnx")) for k, src in sources.items()}


def test_exported_directories_are_onnx_with_the_same_labels(pairs):
    for source, exported in pairs.values():
        a, b = inspect_model_dir(source), inspect_model_dir(exported)
        assert (b.format, b.task, b.labels, b.dimensions) == ("onnx", a.task, a.labels, a.dimensions)
        assert b.pooling == a.pooling and b.weights.name == "model.onnx"


def test_sequence_classifier_on_onnxruntime_matches_torch(pairs):
    source, exported = pairs["seq"]
    native, onnx = load_model(str(source)), load_model(str(exported))
    assert onnx.card.engine == "onnxruntime" and onnx.card.labels == native.card.labels
    for a, b in zip(native.classify(TEXTS).results, onnx.classify(TEXTS).results, strict=True):
        assert set(b.probabilities) == set(a.probabilities)
        assert np.allclose(list(a.probabilities.values()), list(b.probabilities.values()), atol=0.02)


def test_token_classifier_on_onnxruntime_answers_spans_of_its_types(pairs):
    source, exported = pairs["tok"]
    native, onnx = load_model(str(source)), load_model(str(exported))
    assert onnx.card.labels == ["EMAIL", "PERSON"] and onnx.card.task == "token_spans"
    a_rows = native.runner.run(TEXTS)
    b_rows = onnx.runner.run(TEXTS)
    for a, b in zip(a_rows, b_rows, strict=True):
        assert a.values.shape == b.values.shape and np.allclose(a.values, b.values, atol=0.1)
    for item in onnx.classify(TEXTS).results:
        assert all(s.label in ("EMAIL", "PERSON") for s in item.spans)


def test_sentence_encoder_on_onnxruntime_pools_like_torch(pairs):
    source, exported = pairs["enc"]
    a = load_model(str(source)).embed(TEXTS).vectors
    b = load_model(str(exported)).embed(TEXTS).vectors
    assert b.shape == (3, 48) and np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-4)
    assert float(np.min(np.sum(a * b, axis=1))) > 0.99  # cosine of int8 to fp32


def test_an_onnx_directory_runs_on_onnxruntime_and_cpu_only(pairs):
    _, exported = pairs["seq"]
    with pytest.raises(InvalidRequest, match="engines: onnxruntime"):
        load_model(str(exported), engine="native")
    with pytest.raises(InvalidRequest, match="cpu only"):
        load_model(str(exported), device="cuda:0")


def test_a_directory_with_its_export_serves_int8_on_cpu_and_torch_when_asked(pairs, tmp_path):
    import shutil

    source, exported = pairs["seq"]
    both = shutil.copytree(source, tmp_path / "intent")
    shutil.copytree(exported, both / "onnx")
    auto = load_model(str(both))
    assert (auto.card.engine, auto.card.engines, auto.card.name) == (
        "onnxruntime",
        ["onnxruntime", "native"],
        "intent",
    )
    assert auto.card.digest == inspect_model_dir(both / "onnx").digest  # the pin is what answers
    native = load_model(str(both), engine="native")
    assert native.card.engine == "native" and native.card.digest == inspect_model_dir(both).digest
    a, b = native.classify(TEXTS).results, auto.classify(TEXTS).results
    for x, y in zip(a, b, strict=True):
        assert np.allclose(list(x.probabilities.values()), list(y.probabilities.values()), atol=0.02)
    config = json.loads((both / "onnx" / "config.json").read_text())
    config["id2label"] = {"0": "x", "1": "y", "2": "z"}
    config["label2id"] = {"x": 0, "y": 1, "z": 2}
    (both / "onnx" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirError, match="the ONNX export's task or labels are not those of"):
        load_model(str(both))
