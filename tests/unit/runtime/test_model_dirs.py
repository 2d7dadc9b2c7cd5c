"""A user's own model directory (app/runtime/model_dir.py, dir_models.py): inspected from its
small files, loaded through `load_model`, served with its own labels by the runtime's task
classes (windows, usage, item errors as for a built-in)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.runtime.dir_models import decode_spans
from app.runtime.dir_runners import RowOutput
from app.runtime.engine import Engine
from app.runtime.model_dir import inspect_model_dir
from app.runtime.registry import load_model
from app.runtime.schemas import InvalidRequest, ModelNotFound
from tests.fakes.tiny_models import (
    write_tiny_sentence_encoder,
    write_tiny_sequence_classifier,
    write_tiny_token_classifier,
)

LABELS = ["billing", "shipping", "returns"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("models")
    return {
        "seq": write_tiny_sequence_classifier(base / "support-intent", LABELS),
        "tok": write_tiny_token_classifier(base / "pii-ner", ["EMAIL", "PERSON"]),
        "plain": write_tiny_token_classifier(base / "plain-ner", ["EMAIL"], bio=False),
        "enc": write_tiny_sentence_encoder(base / "my-encoder", 48),
    }


def test_inspect_reads_task_labels_and_width(dirs):
    seq = inspect_model_dir(dirs["seq"])
    assert (seq.task, seq.labels, seq.format, seq.dimensions) == ("label_probabilities", LABELS, "hf", 32)
    assert seq.architecture == "BertForSequenceClassification" and seq.max_tokens == 128
    assert seq.digest.startswith("sha256:") and len(seq.digest) == 71 and seq.revision is None
    tok = inspect_model_dir(dirs["tok"])
    assert tok.task == "token_spans" and tok.bio and tok.labels[:3] == ["O", "B-EMAIL", "I-EMAIL"]
    assert not inspect_model_dir(dirs["plain"]).bio and tok.served_labels == ["EMAIL", "PERSON"]
    enc = inspect_model_dir(dirs["enc"])
    assert (enc.task, enc.dimensions, enc.pooling, enc.labels) == ("embeddings", 48, "mean", [])
    assert "1_Pooling/config.json" in [a.name for a in enc.artifacts]


def test_digest_changes_with_the_weights(dirs, tmp_path):
    other = write_tiny_sequence_classifier(tmp_path / "support-intent", LABELS, seed=1)
    assert inspect_model_dir(other).digest != inspect_model_dir(dirs["seq"]).digest
    same = write_tiny_sequence_classifier(tmp_path / "again", LABELS)
    assert inspect_model_dir(same).artifacts == inspect_model_dir(dirs["seq"]).artifacts


def test_sequence_classifier_answers_with_its_own_labels(dirs):
    model = load_model(str(dirs["seq"]))
    card = model.card
    assert card.name == "support-intent" and card.labels == LABELS and card.engine == "native"
    assert card.task == "label_probabilities" and card.surfaces == ["classify"] and card.status == "ready"
    result = model.classify(["I was charged twice", "where is my parcel?"], {"return_meta": True})
    for item in result.results:
        assert set(item.probabilities) == set(LABELS) and item.label in LABELS
        assert sum(item.probabilities.values()) == pytest.approx(1.0, abs=1e-5)
        assert item.confidence == pytest.approx(max(item.probabilities.values()))
        assert item.usage.tokens > 2
    assert result.meta.digest == card.digest and result.meta.engine == "native"


def test_directory_windows_and_item_errors_are_the_runtimes(dirs):
    model = load_model(str(dirs["seq"]))
    long_text = "please help me with my bank account " * 60  # ~360 tokens > the 128 the config allows
    rejected = model.classify([long_text, "hello"]).results
    assert rejected[0].error.code == "max_length_exceeded" and rejected[1].label in LABELS
    windowed = model.classify(long_text, {"overflow": "window"}).results[0]
    assert windowed.error is None and sum(windowed.probabilities.values()) == pytest.approx(1.0, abs=1e-5)


def test_token_classifier_spans_use_entity_types_and_input_offsets(dirs):
    model = load_model(str(dirs["tok"]))
    assert model.card.labels == ["EMAIL", "PERSON"] and model.card.task == "token_spans"
    text = "Grüße, write to jane.doe@example.com or call bob"
    [item] = model.classify(text).results
    for span in item.spans:
        assert span.label in ("EMAIL", "PERSON")
        assert text[span.start : span.end] == span.text and 0 <= span.probability <= 1


def test_sentence_encoder_embeds_unit_vectors_of_its_width(dirs):
    model = load_model(str(dirs["enc"]))
    assert model.card.dimensions == [48] and model.card.surfaces == ["embeddings"]
    result = model.embed(["hello world", "a different sentence"])
    assert result.vectors.shape == (2, 48)
    assert np.allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-4)
    assert not np.allclose(result.vectors[0], result.vectors[1])
    with pytest.raises(InvalidRequest, match="dimensions"):
        model.embed("x", dimensions=384)


def test_engine_serves_a_directory_beside_wire_requests(dirs):
    engine = Engine([load_model(str(dirs["seq"]))])
    wire = engine.classify({"model": "support-intent", "input": "refund please"}).to_wire()
    assert wire["model"] == "support-intent" and wire["results"][0]["label"] in LABELS


def test_unknown_bare_names_stay_model_not_found():
    with pytest.raises(ModelNotFound, match="model directory"):
        load_model("no-such-model")


def test_an_onnx_engine_for_a_torch_directory_is_invalid(dirs):
    with pytest.raises(InvalidRequest, match="engines: native"):
        load_model(str(dirs["seq"]), engine="onnxruntime")


# --------------------------------------------------------------------------- spans and pooling


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from tokenizers import Tokenizer

    from tests.fakes.tiny_models import write_tokenizer

    directory = tmp_path_factory.mktemp("tok")
    write_tokenizer(directory)
    return Tokenizer.from_file(str(directory / "tokenizer.json"))


def tagged_row(tokenizer, text: str, tags: list[str], per_word: list[str]) -> RowOutput:
    """A token classifier's output for `text` whose words carry `per_word` tags on their first
    sub-token; later sub-tokens say O (they must not count)."""
    enc = tokenizer.encode(text)
    logits = np.zeros((len(enc.ids), len(tags)), np.float32)
    seen: set[int] = set()
    for token, word in enumerate(enc.word_ids):
        if word is not None:
            logits[token, tags.index(per_word[word] if word not in seen else "O")] = 5.0
            seen.add(word)
    special = [bool(s) for s in enc.special_tokens_mask]
    return RowOutput(logits, list(enc.offsets), list(enc.word_ids), special)


def test_bio_tags_merge_into_one_span_per_entity(tokenizer):
    tags = ["O", "B-EMAIL", "I-EMAIL", "B-PERSON", "I-PERSON"]
    text = "mail jane.doe@example.com now, bob smith"
    # words: mail jane . doe @ example . com now , bob smith
    per_word = [
        "O",
        "B-EMAIL",
        "I-EMAIL",
        "I-EMAIL",
        "I-EMAIL",
        "I-EMAIL",
        "I-EMAIL",
        "I-EMAIL",
        "O",
        "O",
        "B-PERSON",
        "I-PERSON",
    ]
    spans = decode_spans(text, tagged_row(tokenizer, text, tags, per_word), tags)
    assert [(s.label, s.text) for s in spans] == [("EMAIL", "jane.doe@example.com"), ("PERSON", "bob smith")]
    for span in spans:
        assert text[span.start : span.end] == span.text and span.probability > 0.9


def test_a_b_tag_opens_a_new_span_and_plain_labels_merge_by_type(tokenizer):
    tags = ["O", "B-PERSON", "I-PERSON"]
    text = "ann bob"
    spans = decode_spans(text, tagged_row(tokenizer, text, tags, ["B-PERSON", "B-PERSON"]), tags)
    assert [s.text for s in spans] == ["ann", "bob"]
    plain = ["O", "PERSON", "CITY"]
    text = "ann bob paris"
    spans = decode_spans(text, tagged_row(tokenizer, text, plain, ["PERSON", "PERSON", "CITY"]), plain)
    assert [(s.label, s.text) for s in spans] == [("PERSON", "ann bob"), ("CITY", "paris")]


def test_a_word_keeps_its_first_tokens_tag_and_offsets_are_code_points(tokenizer):
    tags = ["O", "B-CITY", "I-CITY"]
    text = "Grüße aus zürichxyz"  # "zürichxyz" is several word pieces
    spans = decode_spans(text, tagged_row(tokenizer, text, tags, ["O", "O", "B-CITY"]), tags)
    assert [(s.text, s.start, s.end) for s in spans] == [("zürichxyz", 10, 19)]


@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
def test_sentence_embedding_is_the_pooled_transformer_output(dirs, tmp_path, mode):
    import shutil

    import torch
    from transformers import AutoModel, AutoTokenizer

    enc = Path(shutil.copytree(dirs["enc"], tmp_path / "enc"))
    pooling = enc / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(
        {f"pooling_mode_{m}_token{'s' if m != 'cls' else ''}": m == mode for m in ("mean", "cls", "max")}
    )
    pooling.write_text(json.dumps(config))
    texts = ["where is my parcel", "bake bread at home"]
    got = load_model(str(enc)).embed(texts).vectors
    tok = AutoTokenizer.from_pretrained(str(enc))
    with torch.inference_mode():
        states = AutoModel.from_pretrained(str(enc))(
            **tok(texts, return_tensors="pt", padding=True)
        ).last_hidden_state
    mask = tok(texts, return_tensors="pt", padding=True)["attention_mask"].unsqueeze(-1)
    if mode == "mean":
        want = (states * mask).sum(1) / mask.sum(1)
    elif mode == "cls":
        want = states[:, 0]
    else:
        want = states.masked_fill(mask == 0, -1e9).max(1).values
    want = torch.nn.functional.normalize(want, dim=1).numpy()
    assert np.allclose(got, want, atol=1e-5)
