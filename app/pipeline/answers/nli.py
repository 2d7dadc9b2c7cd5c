"""The NLI head: does a premise entail, leave open (neutral) or contradict a hypothesis?

No NLI model or NLI dataset ships offline, so this is a small trained head over what the
router already runs (docs/model-cards/nli.md has its data, figures and limits):

- the router's MiniLM sentence vectors u (premise) and v (hypothesis), as [u, v, |u-v|, u*v];
- lexical features from the hallucination detector's helpers (app/pipeline/answers/
  hallucination.py): content-word overlap both ways, its support score, numbers the premise
  lacks, a negation mismatch, an antonym pair from a small list, length ratio;
- a multinomial logistic regression on the standardised features, trained by
  scripts/train_nli.py on pairs constructed from MMLU-Pro sentences (no labelled NLI data).

At run time it is numpy: one (3, 1546) matrix product after the encoder call.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from app.pipeline.answers.hallucination import _stem, content_words, numbers, score_sentence

# Committed beside the other trained heads; the module sits here, beside the hallucination
# detector whose helpers it reads (app.models may not import app.pipeline).
ARTIFACTS = Path(__file__).resolve().parents[2] / "models" / "artifacts"
ARTIFACT = ARTIFACTS / "nli_head.npz"
METRICS = ARTIFACTS / "nli_metrics.json"
NLI_LABELS: tuple[str, ...] = ("entailment", "neutral", "contradiction")
MODEL_NAME = "nli-head"

NEGATIONS = frozenset(
    ["not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "cannot", "without", "nowhere"]
)
# Symmetric pairs; a hypothesis word whose opposite the premise holds (and it does not). Pairs
# that occur in the hand-written evaluation set (tests/data/nli_handwritten.jsonl) are left out
# on purpose, so that set measures the head rather than this list.
ANTONYM_PAIRS: tuple[tuple[str, str], ...] = (
    ("increase", "decrease"),
    ("increases", "decreases"),
    ("increased", "decreased"),
    ("rise", "fall"),
    ("rises", "falls"),
    ("rose", "fell"),
    ("higher", "lower"),
    ("high", "low"),
    ("more", "less"),
    ("larger", "smaller"),
    ("large", "small"),
    ("greater", "smaller"),
    ("maximum", "minimum"),
    ("positive", "negative"),
    ("always", "never"),
    ("all", "none"),
    ("true", "false"),
    ("before", "after"),
    ("above", "below"),
    ("gain", "loss"),
    ("legal", "illegal"),
    ("valid", "invalid"),
    ("possible", "impossible"),
    ("accept", "reject"),
    ("accepted", "rejected"),
    ("win", "lose"),
    ("won", "lost"),
    ("inside", "outside"),
    ("first", "last"),
    ("early", "late"),
    ("earlier", "later"),
    ("strong", "weak"),
    ("stronger", "weaker"),
    ("fast", "slow"),
    ("faster", "slower"),
    ("hot", "cold"),
    ("heavy", "light"),
    ("long", "short"),
    ("longer", "shorter"),
    ("rich", "poor"),
    ("success", "failure"),
    ("guilty", "innocent"),
    ("liable", "exempt"),
    ("inherited", "acquired"),
    ("import", "export"),
    ("imports", "exports"),
    ("buy", "sell"),
    ("bought", "sold"),
    ("expand", "contract"),
    ("add", "remove"),
    ("added", "removed"),
    ("good", "bad"),
    ("best", "worst"),
    ("better", "worse"),
    ("majority", "minority"),
    ("include", "exclude"),
    ("includes", "excludes"),
    ("allowed", "forbidden"),
    ("permitted", "prohibited"),
    ("present", "absent"),
    ("same", "different"),
)
ANTONYMS: dict[str, frozenset[str]] = {}
for _a, _b in ANTONYM_PAIRS:
    ANTONYMS[_a] = ANTONYMS.get(_a, frozenset()) | {_b}
    ANTONYMS[_b] = ANTONYMS.get(_b, frozenset()) | {_a}

LEXICAL_FEATURES: tuple[str, ...] = (
    "cosine",
    "overlap_h_in_p",
    "overlap_p_in_h",
    "support",
    "number_missing",
    "negation_mismatch",
    "negation_h_only",
    "negation_p_only",
    "antonym",
    "new_words_log",
)
FEATURE_DIM = 4 * 384 + len(LEXICAL_FEATURES)


def _words(text: str) -> list[str]:
    return [w.lower() for w in text.replace("’", "'").split()]


def _negations(text: str) -> int:
    return sum(1 for w in _words(text) if w.strip(".,;:!?\"'()") in NEGATIONS or w.endswith("n't"))


def lexical_features(premise: str, hypothesis: str, cosine: float) -> np.ndarray:
    """The LEXICAL_FEATURES of one pair, in that order."""
    p_words, h_words = content_words(premise), content_words(hypothesis)
    p_stems, h_stems = {_stem(w) for w in p_words}, {_stem(w) for w in h_words}
    overlap_p = len(p_stems & h_stems) / len(p_stems) if p_stems else 1.0
    scored = score_sentence(hypothesis, cosine, p_stems, numbers(premise))
    neg_p, neg_h = _negations(premise) % 2, _negations(hypothesis) % 2
    p_plain = {w.strip(".,;:!?\"'()") for w in _words(premise)}
    h_plain = {w.strip(".,;:!?\"'()") for w in _words(hypothesis)}
    antonym = any((ANTONYMS.get(w, frozenset()) & p_plain) and w not in p_plain for w in h_plain)
    new_words = len(h_stems - p_stems)
    return np.asarray(
        [
            cosine,
            scored.overlap,
            overlap_p,
            scored.support,
            float(bool(scored.missing_numbers)),
            float(neg_p != neg_h),
            float(neg_h and not neg_p),
            float(neg_p and not neg_h),
            float(antonym),
            float(np.log1p(new_words)),
        ],
        dtype=np.float32,
    )


def pair_features(premise: str, hypothesis: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """[u, v, |u-v|, u*v, lexical] for unit vectors u (premise) and v (hypothesis)."""
    u = np.asarray(u, np.float32)
    v = np.asarray(v, np.float32)
    cosine = float(np.clip(u @ v, -1.0, 1.0))
    return np.concatenate([u, v, np.abs(u - v), u * v, lexical_features(premise, hypothesis, cosine)])


class NLIHead:
    def __init__(
        self, mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: np.ndarray, digest: str
    ) -> None:
        self.mean = mean.astype(np.float32)
        self.scale = scale.astype(np.float32)
        self.coef = coef.astype(np.float32)  # (3, FEATURE_DIM), rows in NLI_LABELS order
        self.intercept = intercept.astype(np.float32)
        self.digest = digest  # sha256 of the artifact file: the head's revision

    @classmethod
    def load(cls, path: Path = ARTIFACT) -> NLIHead:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        with np.load(path) as data:
            labels = tuple(str(x) for x in data["labels"])
            if labels != NLI_LABELS:
                raise ValueError(f"{path}: labels {labels}, expected {NLI_LABELS}")
            return cls(data["mean"], data["scale"], data["coef"], data["intercept"], digest)

    @property
    def revision(self) -> str:
        return f"{ARTIFACT.name}@{self.digest[:12]}"

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """(n, 3) class probabilities of (n, FEATURE_DIM) features (or one row)."""
        x = (np.atleast_2d(features) - self.mean) / self.scale
        logits = x @ self.coef.T + self.intercept
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return np.asarray(e / e.sum(axis=1, keepdims=True))

    def scores(self, premise: str, hypothesis: str, u: np.ndarray, v: np.ndarray) -> dict[str, float]:
        (row,) = self.probabilities(pair_features(premise, hypothesis, u, v))
        return {label: float(p) for label, p in zip(NLI_LABELS, row, strict=True)}


@lru_cache(maxsize=1)
def shared_nli_head() -> NLIHead:
    return NLIHead.load()
