"""The dynamic 8-bit encoder build (app/runtime/quantize.py): uint8 x uint8 kernels (exact on
every CPU), deterministic, built once even when several processes start together, close to
the packaged model and to its fp32 fold."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from app.common.digest import file_sha256
from app.runtime import encoder as encoder_module
from app.runtime.encoder import MiniLMEncoder, onnx_model_path, packaged_model_path
from app.runtime.quantize import MODEL_STEM, dynamic_int8_model, fold_constants, model_cache_dir

ROOT = Path(__file__).resolve().parents[3]
# Paraphrase pairs: text 2k and 2k+1 say the same thing.
TEXTS = [
    "What is the capital of France?",
    "Which city is France's capital?",
    "Explain how a transistor works in simple terms.",
    "How does a transistor work? Keep it simple.",
    "Write a python function that reverses a linked list.",
    "Give me Python code to reverse a singly linked list.",
    "Under contract law, is a promise without consideration enforceable?",
    "Can a promise be legally binding if nothing was given in exchange for it?",
]


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SVC_SR_MODEL_CACHE", str(tmp_path))
    dynamic_int8_model.cache_clear()
    yield tmp_path
    dynamic_int8_model.cache_clear()


@pytest.mark.slow
def test_the_build_computes_in_int8_and_is_byte_identical_on_rebuild(fresh_cache: Path) -> None:
    import onnx

    built = dynamic_int8_model(packaged_model_path())
    assert built.parent == fresh_cache == model_cache_dir()
    ops = Counter(node.op_type for node in onnx.load(str(built)).graph.node)
    # Every weight MatMul runs on 8-bit integers; only attention's activation x activation
    # stays fp32.
    assert ops["MatMulInteger"] == 36 and ops["DynamicQuantizeLinear"] > 0
    assert ops["MatMul"] <= 12
    assert sorted(p.name for p in fresh_cache.iterdir()) == [built.name, f"{MODEL_STEM}.lock"]

    first = file_sha256(built)
    built.unlink()
    dynamic_int8_model.cache_clear()
    assert file_sha256(dynamic_int8_model(packaged_model_path())) == first


@pytest.mark.slow
def test_the_weight_matmuls_are_uint8_by_uint8_and_the_vectors_stay_close_to_fp32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uint8 x uint8 is what makes the build exact on every CPU: onnxruntime's uint8 x int8
    # kernel saturates 16-bit pair sums on AVX2 without VNNI, so vectors (and verdicts at a
    # head's cut) would depend on the CPU.
    import onnx

    model = onnx.load(str(onnx_model_path()))
    weights = {init.name: init.data_type for init in model.graph.initializer}
    produced_by = {out: node.op_type for node in model.graph.node for out in node.output}
    matmuls = [node for node in model.graph.node if node.op_type == "MatMulInteger"]
    assert len(matmuls) == 36
    for node in matmuls:
        activations, weight = node.input[0], node.input[1]
        assert produced_by[activations] == "DynamicQuantizeLinear"  # always uint8
        assert weights[weight] == onnx.TensorProto.UINT8, node.name
        assert weights[node.input[3]] == onnx.TensorProto.UINT8  # per-channel zero points

    folded = tmp_path / "folded.onnx"
    fold_constants(packaged_model_path(), folded)
    built = MiniLMEncoder().encode(TEXTS)
    monkeypatch.setattr(encoder_module, "onnx_model_path", lambda: folded)
    reference = MiniLMEncoder().encode(TEXTS)
    cosine = (built * reference).sum(axis=1)
    assert cosine.min() >= 0.99, cosine
    assert not np.allclose(built, reference, atol=1e-4)  # really quantized


@pytest.mark.slow
def test_an_unusable_cache_dir_falls_back_to_a_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SVC_SR_MODEL_CACHE", str(blocker / "models"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    dynamic_int8_model.cache_clear()
    try:
        built = dynamic_int8_model(packaged_model_path())
    finally:
        dynamic_int8_model.cache_clear()
    assert built.is_file() and built.parent.parent == tmp_path / "tmp"
    assert blocker.read_text() == "not a directory"


@pytest.mark.slow
def test_processes_starting_together_build_one_model_and_leave_no_partial_files(fresh_cache: Path) -> None:
    code = "from app.runtime.encoder import onnx_model_path; print(onnx_model_path())"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    paths = {proc.communicate(timeout=120)[0].strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs)
    assert len(paths) == 1
    leftovers = [p.name for p in fresh_cache.iterdir() if p.suffix != ".lock"]
    assert leftovers == [Path(paths.pop()).name]


@pytest.mark.slow
def test_the_encoder_runs_the_build_and_its_vectors_stay_close_to_the_packaged_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert onnx_model_path() != packaged_model_path()
    assert onnx_model_path().name.startswith(MODEL_STEM)
    built = MiniLMEncoder().encode(TEXTS)
    monkeypatch.setattr(encoder_module, "onnx_model_path", packaged_model_path)
    packaged = MiniLMEncoder().encode(TEXTS)
    cosine = (built * packaged).sum(axis=1)
    assert cosine.min() > 0.97, cosine
    assert not np.allclose(built, packaged, atol=1e-4)  # really a different model
    # What the cache and the embedding signals rely on survives: each text's nearest other
    # text is its paraphrase.
    sims = built @ built.T
    np.fill_diagonal(sims, -1)
    assert list(sims.argmax(axis=1)) == [i ^ 1 for i in range(len(TEXTS))]


def test_a_text_encodes_the_same_alone_and_beside_any_batch_mates() -> None:
    # One activation scale per run would make a row depend on its batch-mates (and routing
    # on load); rows run alone, so the vector and token states are the text's own.
    encoder = MiniLMEncoder()
    alone = encoder.encode_full([TEXTS[0]])
    beside = encoder.encode_full([TEXTS[6], "word " * 300, TEXTS[0], ""])
    np.testing.assert_array_equal(beside.vectors[2], alone.vectors[0])
    np.testing.assert_array_equal(beside.token_states[2], alone.token_states[0])
    assert beside.token_counts[1] == encoder.max_tokens and beside.token_counts[3] == 2
    np.testing.assert_allclose(np.linalg.norm(beside.vectors, axis=1), 1.0, atol=1e-5)


def test_a_long_text_is_tokenized_by_its_prefix_with_the_same_window() -> None:
    # The encoder tokenizes only a prefix of a long text; its window (ids, offsets) must be
    # exactly the whole text's, whatever the layout: words, newlines, tabs, one huge word.
    encoder = MiniLMEncoder()
    whole = encoder_module.load_tokenizer(encoder.max_tokens)
    paragraph = " ".join(TEXTS) + "\n"
    texts = [
        paragraph * 200,  # ~60,000 characters of ordinary text
        "\t".join(TEXTS) * 150,
        "x" * 9_000 + " tail words",  # no whitespace in the prefix: tokenized whole
        "supercalifragilistic" * 300 + " " + paragraph * 5,  # a prefix too short for the window
        paragraph,
    ]
    for text, window in zip(texts, encoder._window_encodings(texts), strict=True):
        expected = whole.encode(text)
        assert window.ids == expected.ids
        assert window.offsets == expected.offsets
    assert encoder_module.window_prefix(paragraph * 200, 4096) != paragraph * 200
    assert encoder_module.window_prefix(paragraph, 4096) is paragraph


def test_cached_training_vectors_are_named_by_the_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The trainers cache vectors on disk; a cache filled by one build must never be read for
    # another's (a retrain would otherwise fit the new head on the old build's vectors). The name
    # follows the model file the process runs, whatever that file is called.
    before = encoder_module.vector_cache_name(256)
    assert before.startswith(encoder_module.ENCODER_ID) and before.endswith("-256")
    assert encoder_module.vector_cache_name(128) != before
    other = tmp_path / encoder_module.onnx_model_path().name  # same name, other bytes
    other.write_bytes(encoder_module.onnx_model_path().read_bytes() + b"\x00")
    monkeypatch.setattr(encoder_module, "onnx_model_path", lambda: other)
    assert encoder_module.vector_cache_name(256) != before
