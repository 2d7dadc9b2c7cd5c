"""Harmful-content classifier on the shared MiniLM features.

A request is sorted into ``benign`` or one harm category (violence_weapons, sexual, minors,
self_harm, hate, crime_hacking; the artifact lists them). Two multinomial logistic-regression
heads are stacked: one on the pooled MiniLM vector the router already computed for the
request (paraphrases, intent) and one on hashed char/word n-gram tf-idf features shared with
the jailbreak guard (app/models/jailbreak_features.py: explicit vocabulary the 6-layer encoder
blurs). A calibrated offset on the benign logit makes 0.5 the operating point of the harm
score ``1 - p(benign)``. Trained by scripts/train_harmful.py.

A rule may restrict the categories it cares about: its score is then the summed probability
of those categories, so ``categories: [self_harm]`` ignores a hacking request.

Run time needs numpy and the encoder only: weights are .npz/.json, no pickle, no sklearn.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from app.models.jailbreak_features import ngram_tf

if TYPE_CHECKING:
    from app.models.encoding import Encoder

ARTIFACT_DIR = Path(__file__).parent / "artifacts"
WEIGHTS_FILE = "harmful_guard.npz"
META_FILE = "harmful_guard.json"
METRICS_FILE = "harmful_metrics.json"
BENIGN = "benign"
DEFAULT_THRESHOLD = 0.5


class HarmfulResult(BaseModel):
    is_harmful: bool
    score: float = Field(ge=0.0, le=1.0, description="probability of the rule's harm categories")
    confidence: float = Field(ge=0.0, le=1.0, description="confidence in the verdict given")
    category: str | None = Field(default=None, description="the most probable harm category considered")
    categories: dict[str, float] = Field(default_factory=dict, description="probability per harm category")
    detection_types: list[str] = Field(default_factory=list, description="flagged categories")


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def check_categories(categories: Sequence[str] | None, known: Sequence[str]) -> tuple[str, ...]:
    """The harm categories a call restricts itself to (all when none); ValueError for unknown ones."""
    harm = tuple(c for c in known if c != BENIGN)
    if not categories:
        return harm
    if isinstance(categories, str):
        raise ValueError("categories must be a list of category names")
    unknown = sorted(set(categories) - set(harm))
    if unknown:
        raise ValueError(f"unknown harmful categories: {', '.join(unknown)}; expected some of {list(harm)}")
    return tuple(c for c in harm if c in set(categories))


class HarmfulClassifier:
    """Loads the trained artifact once; stateless and thread-safe afterwards."""

    def __init__(self, encoder: Encoder | None = None, artifact_dir: Path | None = None) -> None:
        self._encoder = encoder
        self.artifact_dir = Path(artifact_dir) if artifact_dir is not None else ARTIFACT_DIR
        meta_path = self.artifact_dir / META_FILE
        weights_path = self.artifact_dir / WEIGHTS_FILE
        if not meta_path.is_file() or not weights_path.is_file():
            raise FileNotFoundError(
                f"harmful-content artifact missing in {self.artifact_dir}; run scripts/train_harmful.py"
            )
        self.meta: dict[str, Any] = json.loads(meta_path.read_text())
        with np.load(weights_path, allow_pickle=False) as npz:
            arrays = {k: npz[k].astype(np.float32) for k in npz.files}
        self.labels: list[str] = list(self.meta["labels"])
        if self.labels[0] != BENIGN:
            raise ValueError("harmful artifact: label 0 must be benign")
        self.categories: tuple[str, ...] = tuple(self.labels[1:])
        self._emb_w, self._emb_b = arrays["emb_w"], arrays["emb_b"].reshape(-1)
        self._ng_w, self._ng_b, self._ng_idf = (
            arrays["ngram_w"],
            arrays["ngram_b"].reshape(-1),
            arrays["ngram_idf"],
        )
        self.dim = int(self._emb_w.shape[0])
        self.ngram_bits = int(self.meta["ngram_bits"])
        k = len(self.labels)
        if self._emb_w.shape[1] != k or self._ng_w.shape != (1 << self.ngram_bits, k):
            raise ValueError("harmful artifact: weight shapes do not match labels / ngram_bits")
        stack = self.meta["stack"]
        self._stack = (float(stack["w_emb"]), float(stack["w_ngram"]))
        # Added to the benign logit: shifts the harm/benign cut to the calibrated operating point.
        self._benign_offset = float(self.meta["benign_offset"])

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from app.runtime.encoder import shared_encoder

            self._encoder = shared_encoder()
        return self._encoder

    def embedding_logits(self, vectors: np.ndarray) -> np.ndarray:
        return np.asarray(vectors, np.float32) @ self._emb_w + self._emb_b

    def ngram_logits(self, texts: list[str]) -> np.ndarray:
        out = np.tile(self._ng_b, (len(texts), 1))
        for row, text in enumerate(texts):
            idx, tf = ngram_tf(text, self.ngram_bits)
            if idx.size == 0:
                continue
            values = tf * self._ng_idf[idx]
            norm = float(np.linalg.norm(values)) or 1.0
            out[row] += (values / norm) @ self._ng_w[idx]
        return out

    def probabilities(self, vectors: np.ndarray, texts: list[str]) -> np.ndarray:
        """(n, labels) probabilities at the calibrated operating point."""
        w_emb, w_ng = self._stack
        z = w_emb * self.embedding_logits(vectors) + w_ng * self.ngram_logits(texts)
        z[:, 0] += self._benign_offset
        return _softmax(z)

    def detect(
        self, texts: list[str], threshold: float | None = None, categories: Sequence[str] | None = None
    ) -> list[HarmfulResult]:
        """One result per text, encoding the texts itself. Blank texts are benign without a pass."""
        texts = _check_texts(texts)
        live = [i for i, t in enumerate(texts) if t.strip()]
        vectors = np.zeros((len(texts), self.dim), np.float32)
        if live:
            vectors[live] = self.encoder.encode([texts[i] for i in live])
        return self.detect_vectors(vectors, texts, threshold, categories)

    def detect_vectors(
        self,
        vectors: np.ndarray,
        texts: list[str],
        threshold: float | None = None,
        categories: Sequence[str] | None = None,
    ) -> list[HarmfulResult]:
        """``detect`` reusing MiniLM vectors from an encoder pass the caller already made.
        ValueError on a threshold outside [0, 1], an unknown category or mismatched vectors."""
        texts = _check_texts(texts)
        thr = DEFAULT_THRESHOLD if threshold is None else float(threshold)
        if math.isnan(thr) or not 0.0 <= thr <= 1.0:
            raise ValueError(f"threshold must be within [0, 1], got {threshold!r}")
        wanted = check_categories(categories, self.labels)
        vectors = np.asarray(vectors, np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts) or (texts and vectors.shape[1] != self.dim):
            raise ValueError(f"vectors must have shape ({len(texts)}, {self.dim}), got {vectors.shape}")
        live = [i for i, t in enumerate(texts) if t.strip()]
        probs = np.zeros((len(texts), len(self.labels)), np.float32)
        if live:
            probs[live] = self.probabilities(vectors[live], [texts[i] for i in live])
        columns = [self.labels.index(c) for c in wanted]
        results = []
        for i, text in enumerate(texts):
            if not text.strip():
                results.append(HarmfulResult(is_harmful=False, score=0.0, confidence=1.0))
                continue
            per = {c: round(float(probs[i, j]), 6) for j, c in enumerate(self.labels) if c != BENIGN}
            score = min(1.0, float(probs[i, columns].sum()))
            top = max(wanted, key=lambda c: per[c])
            flagged = score >= thr
            results.append(
                HarmfulResult(
                    is_harmful=flagged,
                    score=round(score, 6),
                    confidence=round(score if flagged else 1.0 - score, 6),
                    category=top,
                    categories=per,
                    detection_types=[top] if flagged else [],
                )
            )
        return results

    def info(self) -> dict[str, Any]:
        return {
            "name": self.meta.get("name", "harmful-guard"),
            "version": self.meta.get("version"),
            "trained": self.meta.get("trained"),
            "encoder": self.meta.get("encoder"),
            "categories": list(self.categories),
            "default_threshold": DEFAULT_THRESHOLD,
            "ngram_bits": self.ngram_bits,
            "metrics": self.meta.get("metrics", {}),
            "artifact_dir": str(self.artifact_dir),
        }


def _check_texts(texts: list[str]) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise ValueError("texts must be a list of strings")
    for t in texts:
        if not isinstance(t, str):
            raise ValueError(f"texts must be strings, got {type(t).__name__}")
    return list(texts)
