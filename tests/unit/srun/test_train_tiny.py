"""`svc-srun train`'s recipe in process on a tiny local encoder (`--base DIR`): the directory,
its export and card, `--heads-only` leaving the encoder as it was, and a refused run leaving
nothing behind. The packaged MiniLM end to end: tests/srun/test_train_cli.py (slow)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from app.runtime.model_dir import ModelDirError, inspect_model_dir
from app.runtime.registry import load_model
from app.srun.train import TrainOptions, train
from app.srun.train_data import TrainDataError
from tests.fakes.labelled_data import sequence_rows, token_rows, write_jsonl
from tests.fakes.tiny_models import write_tiny_sentence_encoder

LABELS = ["billing", "returns", "shipping"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return write_tiny_sentence_encoder(tmp_path_factory.mktemp("base") / "tiny", 32)


def options(tmp_path, base, kind="sequence-classification", rows=None, **kw) -> TrainOptions:
    rows = rows if rows is not None else sequence_rows(60)
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    return TrainOptions(kind=kind, data=data, out=tmp_path / "out", base=base, epochs=1, max_length=24, **kw)


def encoder_weights(directory) -> dict[str, np.ndarray]:
    return {k: v for k, v in load_file(str(directory / "model.safetensors")).items() if "encoder.layer" in k}


def test_a_trained_directory_serves_its_labels_with_card_and_export(tmp_path, base):
    out = train(options(tmp_path, base))
    info = inspect_model_dir(out)
    assert (info.task, info.labels, info.format) == ("label_probabilities", LABELS, "hf")
    assert inspect_model_dir(out / "onnx").format == "onnx" and not list(tmp_path.glob(".out-*"))
    card = json.loads((out / "training.json").read_text())
    assert card["base"]["model"] == str(base) and card["base"]["package"] is None
    assert card["split"] == {"seed": 0, "eval_fraction": 0.2, "train": 48, "held_out": 12}
    assert [e["directory"] for e in card["evaluations"]] == [".", "onnx"]
    assert sum(s["support"] for s in card["evaluations"][0]["per_label"]) == 12
    model = load_model(str(out), engine="native")
    assert model.card.labels == LABELS and model.classify("refund my lamp").results[0].label in LABELS
    assert (out / "README.md").read_text().startswith("# out\n")


@pytest.mark.slow  # two training runs
def test_heads_only_leaves_the_encoder_as_it_was(tmp_path, base):
    whole = train(options(tmp_path / "a", base))
    heads = train(options(tmp_path / "b", base, heads_only=True))
    before = {k.removeprefix("bert."): v for k, v in encoder_weights(base).items()}
    after_heads = {k.removeprefix("bert."): v for k, v in encoder_weights(heads).items()}
    after_whole = {k.removeprefix("bert."): v for k, v in encoder_weights(whole).items()}
    assert before.keys() == after_heads.keys() == after_whole.keys() and before
    assert all(np.array_equal(before[k], after_heads[k]) for k in before)
    assert not all(np.array_equal(before[k], after_whole[k]) for k in before)
    assert json.loads((heads / "training.json").read_text())["training"]["heads_only"] is True


def test_token_classification_writes_bio_tags(tmp_path, base):
    out = train(options(tmp_path, base, kind="token-classification", rows=token_rows(40), onnx=False))
    assert inspect_model_dir(out).labels == ["O", "B-EMAIL", "I-EMAIL", "B-PERSON", "I-PERSON"]
    assert not (out / "onnx").exists()
    assert [e["engine"] for e in json.loads((out / "training.json").read_text())["evaluations"]] == ["native"]


def test_refused_runs_write_nothing(tmp_path, base):
    with pytest.raises(TrainDataError, match="data.jsonl:1: label"):
        train(options(tmp_path, base, rows=[{"text": "no label"}]))
    with pytest.raises(ValueError, match="one label"):
        train(options(tmp_path, base, rows=[{"text": f"t{i}", "label": "a"} for i in range(5)]))
    with pytest.raises(ModelDirError, match="cannot be fine-tuned"):
        onnx_dir = tmp_path / "o"
        onnx_dir.mkdir()
        for f in ("config.json", "tokenizer.json"):
            (onnx_dir / f).write_bytes((base / f).read_bytes())
        (onnx_dir / "model.onnx").write_bytes(b"x")
        train(options(tmp_path, onnx_dir))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl", "o"]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        train(options(tmp_path, base))
