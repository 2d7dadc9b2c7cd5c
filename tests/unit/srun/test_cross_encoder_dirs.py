"""Cross-encoder directories (a sequence classifier with one label, as sentence-transformers
saves a CrossEncoder) on the worker's rerank surface (app/srun/cross_encoder.py,
docs/model-runtime.md "Your own models"): scored as sentence-transformers scores them, in
fp32 torch and as an int8 ONNX export; refused with the path and reason when the head does
not fit, and never bound where a classifier is read."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from app.runtime.dir_models import ONNX_EXPORT
from app.runtime.model_dir import ModelDirError, inspect_model_dir
from app.runtime.onnx_export import export_onnx
from app.runtime.registry import load_model
from app.runtime.schemas import UnsupportedSurface
from app.srun import catalog
from app.srun.cross_encoder import CrossEncoderReranker, sigmoid
from tests.fakes.tiny_models import write_tiny_cross_encoder, write_tiny_sequence_classifier

QUERY = "how do I bake bread"
DOCS = [
    "the stock market fell sharply today",
    "knead the dough and bake the loaf for forty minutes",
    "rain is expected in the city tomorrow",
    "bread needs flour water salt and yeast",
]


@pytest.fixture(scope="module")
def ce(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "my-reranker", seed=1)


def rerank(model: CrossEncoderReranker, **body: object) -> dict:
    return asyncio.run(model.rerank({"query": QUERY, "documents": DOCS, **body})).to_wire()


def test_one_label_is_a_cross_encoder_served_on_rerank_only(ce):
    info = inspect_model_dir(ce)
    assert (info.task, info.labels, info.served_labels) == ("rerank", ["LABEL_0"], [])
    model = catalog.load(str(ce))
    assert isinstance(model, CrossEncoderReranker)
    assert (model.card.task, model.card.surfaces, model.card.engine) == ("rerank", ["rerank"], "native")
    with pytest.raises(UnsupportedSurface, match="serves rerank, not classify"):
        load_model(str(ce)).classify(["bake bread"])


def test_scores_are_sentence_transformers_cross_encoder_scores(ce):
    from sentence_transformers import CrossEncoder

    expected = CrossEncoder(str(ce), device="cpu").predict([(QUERY, d) for d in DOCS])
    answer = rerank(catalog.load(str(ce)), return_documents=True)
    got = {r["index"]: r for r in answer["results"]}
    assert sorted(got) == [0, 1, 2, 3]
    for i, score in enumerate(expected):
        assert got[i]["relevance_score"] == pytest.approx(float(score), abs=1e-5)
        assert got[i]["relevance_score"] == pytest.approx(sigmoid(got[i]["logit"]), abs=1e-6)
        assert got[i]["document"] == DOCS[i] and "similarity" not in got[i] and "bm25" not in got[i]
    ranked = [r["index"] for r in answer["results"]]
    assert ranked == sorted(range(4), key=lambda i: -float(expected[i]))


def test_top_n_usage_and_long_pairs_cut_to_the_budget(ce):
    model = catalog.load(str(ce))
    full = rerank(model)
    top = rerank(model, top_n=2)
    assert top["results"] == full["results"][:2]
    tok = model.model.tokenizer
    pairs = [tok.count(QUERY) + tok.count(d) - 1 for d in DOCS]  # one [CLS], two [SEP]
    assert full["usage"] == {"tokens": sum(pairs)}
    long = asyncio.run(model.rerank({"query": QUERY, "documents": ["bread " * 400]})).to_wire()
    assert long["usage"] == {"tokens": model.card.limits.max_input_tokens, "tokens_lower_bound": True}


def test_int8_onnx_export_ranks_close_to_fp32(ce, tmp_path):
    fp32 = rerank(catalog.load(str(ce)))
    exported = export_onnx(ce, tmp_path / "ce-onnx")
    assert inspect_model_dir(exported).task == "rerank"
    onnx = catalog.load(str(exported))
    assert onnx.card.engine == "onnxruntime"
    scores = {r["index"]: r["relevance_score"] for r in rerank(onnx)["results"]}
    for r in fp32["results"]:
        assert scores[r["index"]] == pytest.approx(r["relevance_score"], abs=0.02)
    # a directory holding its export in onnx/ serves the int8 export on the CPU, as trained ones do
    both = Path(shutil.copytree(ce, tmp_path / "with-export"))
    shutil.copytree(exported, both / ONNX_EXPORT)
    auto = catalog.load(str(both))
    assert (auto.card.engine, auto.card.engines) == ("onnxruntime", ["onnxruntime", "native"])


def test_a_head_that_does_not_fit_one_label_is_refused_with_the_path(ce, tmp_path):
    bad = Path(shutil.copytree(ce, tmp_path / "two-outputs"))
    two = write_tiny_sequence_classifier(tmp_path / "two", ["a", "b"])
    shutil.copy(two / "model.safetensors", bad / "model.safetensors")
    with pytest.raises(ModelDirError) as caught:
        catalog.load(str(bad))
    assert caught.value.path == str(bad / "model.safetensors")
    assert "the classification head has 2 outputs but id2label has 1 labels" in caught.value.reason
    config = json.loads((ce / "config.json").read_text())
    (bad / "model.safetensors").unlink()
    shutil.copy(ce / "model.safetensors", bad / "model.safetensors")
    (bad / "config.json").write_text(json.dumps({**config, "num_labels": 2}))
    with pytest.raises(ModelDirError, match="num_labels is 2 but id2label has 1 labels"):
        inspect_model_dir(bad)
