"""Bad model directories and references are refused before any request, with the path and the
reason (issue 36 item 4): missing files, a tokenizer that is not the model's, weights of the
wrong architecture, labels that disagree with the config, revisions that are not commits, and
repositories missing from the hub cache (nothing is downloaded)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.runtime.model_dir import ModelDirError, inspect_model_dir, resolve_model_ref
from app.runtime.registry import load_model
from app.runtime.schemas import NotReady
from tests.fakes.tiny_models import (
    vocabulary,
    write_tiny_sentence_encoder,
    write_tiny_sequence_classifier,
    write_tokenizer,
)

LABELS = ["billing", "shipping", "returns"]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("good")
    return {
        "seq": write_tiny_sequence_classifier(root / "seq", LABELS),
        "enc": write_tiny_sentence_encoder(root / "enc", 32),
    }


@pytest.fixture()
def seq(base, tmp_path) -> Path:
    return Path(shutil.copytree(base["seq"], tmp_path / "intent"))


def edit_config(directory: Path, **changes: object) -> None:
    config = json.loads((directory / "config.json").read_text())
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))


def refused(directory: Path | str, reason: str, path: Path | str | None = None) -> ModelDirError:
    with pytest.raises(ModelDirError) as caught:
        inspect_model_dir(directory)
    err = caught.value
    assert reason in err.reason and str(path or directory) in err.path
    assert err.path in str(err) and err.reason in str(err)
    return err


@pytest.mark.parametrize(
    ("missing", "reason"),
    [
        ("config.json", "missing config.json"),
        ("model.safetensors", "missing weights"),
        ("tokenizer.json", "missing tokenizer.json (only vocab.txt"),
    ],
)
def test_missing_files(seq, missing, reason):
    (seq / missing).unlink()
    refused(seq, reason)


def test_not_a_directory(tmp_path):
    refused(tmp_path / "nope", "no such directory")


def test_damaged_config_and_tokenizer(seq):
    (seq / "tokenizer.json").write_text("{not json")
    refused(seq, "not a tokenizer", seq / "tokenizer.json")
    (seq / "config.json").write_text("[1, 2]")
    refused(seq, "expected a JSON object", seq / "config.json")


def test_tokenizer_larger_than_the_embeddings(seq, tmp_path):
    write_tokenizer(seq, [*vocabulary(), *(f"extra{i}" for i in range(50))])
    err = refused(seq, "this tokenizer is not the model's", seq / "tokenizer.json")
    assert f"{len(vocabulary()) + 50} tokens" in err.reason


def test_config_vocab_that_is_not_the_weights(seq):
    edit_config(seq, vocab_size=len(vocabulary()) + 10)
    refused(seq, f"word embeddings have {len(vocabulary())} rows", seq / "model.safetensors")


def test_encoder_weights_under_a_classifier_config(seq, base):
    shutil.copy(base["enc"] / "model.safetensors", seq / "model.safetensors")
    refused(seq, "no classification head", seq / "model.safetensors")


def test_label_set_that_does_not_match_the_weights(seq):
    four = [*LABELS, "other"]
    edit_config(seq, id2label=dict(enumerate(four)), label2id={x: i for i, x in enumerate(four)})
    refused(seq, "the classification head has 3 outputs but id2label has 4 labels")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"id2label": {"0": "a", "2": "b"}}, "id2label ids must be 0..1"),
        ({"id2label": {"0": "a", "1": "a"}}, "id2label repeats a label"),
        ({"num_labels": 5}, "num_labels is 5 but id2label has 3 labels"),
        ({"label2id": {"billing": 1, "shipping": 0, "returns": 2}}, "label2id does not mirror id2label"),
        ({"id2label": {}}, "no id2label"),
        ({"architectures": ["BertForMaskedLM"]}, "BertForMaskedLM is not served"),
        ({"architectures": []}, "no `architectures` entry"),
    ],
)
def test_config_contradictions(seq, changes, reason):
    edit_config(seq, **changes)
    refused(seq, reason, seq / "config.json")


def drop_labels(directory: Path) -> None:
    config = json.loads((directory / "config.json").read_text())
    for key in ("id2label", "label2id", "num_labels"):
        config.pop(key, None)
    (directory / "config.json").write_text(json.dumps(config))


def test_a_two_label_model_saved_with_transformers_default_labels_loads(tmp_path):
    # transformers leaves its default (2 labels, LABEL_0/LABEL_1) out of config.json
    two = write_tiny_sequence_classifier(tmp_path / "two", ["no", "yes"])
    drop_labels(two)
    assert inspect_model_dir(two).labels == ["LABEL_0", "LABEL_1"]


def test_a_wider_head_without_labels_is_refused_by_its_width(seq):
    drop_labels(seq)  # three outputs, and the default is two labels
    refused(seq, "the classification head has 3 outputs but id2label has 2 labels")


def test_weights_cut_short_fail_at_load_with_the_path(seq):
    weights = seq / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 64])  # the header still reads; the tensors do not
    with pytest.raises(ModelDirError) as caught:
        load_model(str(seq), engine="native")
    assert str(weights) in caught.value.path and "the weights do not load" in caught.value.reason


def test_one_label_is_a_cross_encoder_not_a_classifier(base, tmp_path):
    one = write_tiny_sequence_classifier(tmp_path / "one", ["score"])
    assert (
        inspect_model_dir(one).task == "rerank"
    )  # served on /v1/rerank (tests/unit/srun/test_cross_encoder_dirs.py)


def test_pooling_width_must_be_the_encoders(base, tmp_path):
    enc = Path(shutil.copytree(base["enc"], tmp_path / "enc"))
    pooling = enc / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "word_embedding_dimension": 64}))
    refused(enc, "word_embedding_dimension 64", pooling)
    pooling.write_text(json.dumps({**config, "pooling_mode_cls_token": True}))
    refused(enc, "one pooling mode", pooling)


def test_load_model_refuses_before_loading_weights(seq):
    (seq / "tokenizer.json").unlink()
    with pytest.raises(NotReady) as caught:  # the worker marks it failed at once, not retried
        load_model(str(seq))
    assert isinstance(caught.value, ModelDirError) and str(seq) in caught.value.message


# --------------------------------------------------------------------------- hub cache


def hub_snapshot(cache: Path, repo: str, source: Path, commit: str = COMMIT, main: bool = True) -> Path:
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = Path(shutil.copytree(source, root / "snapshots" / commit))
    if main:
        (root / "refs").mkdir(parents=True)
        (root / "refs" / "main").write_text(commit)
    return snapshot


def test_repo_at_commit_resolves_from_the_hub_cache(base, tmp_path):
    snapshot = hub_snapshot(tmp_path / "hub", "acme/intent", base["seq"])
    assert resolve_model_ref(f"acme/intent@{COMMIT}", tmp_path / "hub") == snapshot
    assert resolve_model_ref("acme/intent", tmp_path / "hub") == snapshot  # refs/main
    model = load_model(f"acme/intent@{COMMIT}", cache_dir=tmp_path / "hub")
    assert model.card.name == "acme/intent" and model.card.revision == COMMIT
    assert model.card.labels == LABELS


def test_hub_cache_env_is_the_default(base, tmp_path, monkeypatch):
    hub_snapshot(tmp_path / "hub", "acme/intent", base["seq"])
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert inspect_model_dir(resolve_model_ref(f"acme/intent@{COMMIT}")).revision == COMMIT


@pytest.mark.parametrize("revision", ["main", "abc1234", COMMIT.upper(), COMMIT + "0"])
def test_a_revision_that_is_not_a_full_commit_is_refused(revision, tmp_path):
    with pytest.raises(ModelDirError, match="is not a 40-character commit") as caught:
        resolve_model_ref(f"acme/intent@{revision}", tmp_path)
    assert caught.value.path == f"acme/intent@{revision}"


def test_offline_missing_names_the_cache_path(base, tmp_path):
    cache = tmp_path / "hub"
    with pytest.raises(ModelDirError, match="not in the hub cache") as caught:
        resolve_model_ref(f"acme/intent@{COMMIT}", cache)
    assert str(cache) in caught.value.reason and str(cache / "models--acme--intent") in caught.value.path
    hub_snapshot(cache, "acme/intent", base["seq"], main=False)
    with pytest.raises(ModelDirError, match=f"acme/intent is not in the hub cache {cache}"):
        resolve_model_ref("acme/intent", cache)  # no refs/main and no pin
    other = "fedcba9876543210fedcba9876543210fedcba98"
    with pytest.raises(ModelDirError, match=f"acme/intent@{other} is not in the hub cache"):
        resolve_model_ref(f"acme/intent@{other}", cache)


@pytest.mark.parametrize("ref", ["./missing-dir", "/no/such/place", "acme/a/b"])
def test_paths_that_do_not_exist(ref):
    with pytest.raises(ModelDirError, match="no such directory"):
        resolve_model_ref(ref, Path("/nonexistent-cache"))


def test_the_error_survives_pickling_with_path_and_reason():
    import pickle

    err = pickle.loads(pickle.dumps(ModelDirError("/m/intent", "missing tokenizer.json")))
    assert (err.path, err.reason, str(err)) == (
        "/m/intent",
        "missing tokenizer.json",
        "/m/intent: missing tokenizer.json",
    )
    assert isinstance(err, NotReady) and isinstance(err, ValueError) and err.status == 503
