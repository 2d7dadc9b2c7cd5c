"""Jailbreak / prompt-injection guard on the shared MiniLM features.

Three detectors, picked per call (the `method` of a jailbreak signal rule):

- ``classifier``: a stacked ensemble of two logistic-regression heads, one on the pooled MiniLM
  vector (generalises to paraphrased attacks) and one on hashed char 3-5-gram + word 1-2-gram
  tf-idf features (catches attack vocabulary, leetspeak and template fragments that a 6-layer
  encoder truncated at 256 tokens blurs), plus a few regexes for well-known attack phrasings
  that nudge the logit and explain the verdict (``patterns_detected``). Trained by
  scripts/train_jailbreak.py; the threshold is calibrated so that 0.5 is the operating point.
- ``contrastive``: ``diff`` = max cosine similarity to ``jailbreak_patterns`` minus max similarity
  to ``benign_patterns`` (shipped defaults for a list not given), mapped to 0-1 with
  ``sigmoid((diff - margin) / CONTRASTIVE_TEMPERATURE)``. ``margin`` (in the artifact, calibrated
  on validation data for the default lists) is how much closer to an attack than to benign text a
  prompt must be to reach 0.5. A text containing a jailbreak pattern verbatim (case- and
  space-insensitive) scores 1.0.
- ``hybrid``: ``max(classifier, contrastive)``: flag when either detector flags. The classifier
  carries the learned decision; the pattern lists let an operator add attacks it misses.
  ``benign_patterns`` therefore only lower the contrastive half, never the classifier's verdict.

Run time needs numpy and the encoder only: weights are .npz/.json, no pickle, no sklearn.
The text features (hashed n-grams, regexes) are in app/models/jailbreak_features.py.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from app.models.jailbreak_features import JAILBREAK_REGEXES, match_patterns, ngram_tf

if TYPE_CHECKING:
    from app.models.encoding import Encoder

ARTIFACT_DIR = Path(__file__).parent / "artifacts"
WEIGHTS_FILE = "jailbreak_guard.npz"
META_FILE = "jailbreak_guard.json"
METRICS_FILE = "jailbreak_metrics.json"

Method = Literal["classifier", "contrastive", "hybrid"]
METHODS: tuple[str, ...] = ("classifier", "contrastive", "hybrid")
CONTRASTIVE_TEMPERATURE = 0.05  # a 0.05 cosine margin -> score 0.73, 0.1 -> 0.88
DEFAULT_THRESHOLD = 0.5

# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


class JailbreakResult(BaseModel):
    is_jailbreak: bool
    score: float = Field(ge=0.0, le=1.0, description="risk score; the default threshold is 0.5")
    confidence: float = Field(ge=0.0, le=1.0, description="confidence in the verdict given")
    method: str
    patterns_detected: list[str] = Field(default_factory=list)
    detection_types: list[str] = Field(default_factory=list)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -40.0, 40.0)))


class JailbreakGuard:
    """Loads the trained artifact once; thread-safe for concurrent ``detect`` calls."""

    def __init__(self, encoder: Encoder | None = None, artifact_dir: Path | None = None) -> None:
        self._encoder = encoder
        self.artifact_dir = Path(artifact_dir) if artifact_dir is not None else ARTIFACT_DIR
        meta_path = self.artifact_dir / META_FILE
        weights_path = self.artifact_dir / WEIGHTS_FILE
        if not meta_path.is_file() or not weights_path.is_file():
            raise FileNotFoundError(
                f"jailbreak artifact missing in {self.artifact_dir}; run scripts/train_jailbreak.py"
            )
        self.meta: dict[str, Any] = json.loads(meta_path.read_text())
        with np.load(weights_path, allow_pickle=False) as npz:
            arrays = {k: npz[k].astype(np.float32) for k in npz.files}
        self._emb_layers = self._load_emb_head(arrays)
        self.dim = int(self._emb_layers[0][0].shape[0])  # the sentence-vector width the head reads
        self._ng_w = arrays["ngram_w"]
        self._ng_idf = arrays["ngram_idf"]
        self._ng_b = float(arrays["ngram_b"].reshape(-1)[0])
        self.ngram_bits = int(self.meta["ngram_bits"])
        if self._ng_w.shape[0] != 1 << self.ngram_bits:
            raise ValueError("jailbreak artifact: ngram weight size does not match ngram_bits")
        stack = self.meta["stack"]
        self._stack = (float(stack["w_emb"]), float(stack["w_ngram"]), float(stack["bias"]))
        # Shifting by the calibrated threshold's logit makes 0.5 the operating point.
        self._offset = float(self.meta["logit_offset"])
        self.default_jailbreak_patterns: list[str] = list(self.meta["contrastive"]["jailbreak_patterns"])
        self.default_benign_patterns: list[str] = list(self.meta["contrastive"]["benign_patterns"])
        self.contrastive_margin = float(self.meta["contrastive"].get("margin", 0.0))
        self._pattern_cache: OrderedDict[tuple[str, ...], np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()

    @staticmethod
    def _load_emb_head(arrays: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        layers = []
        i = 0
        while f"emb_w{i}" in arrays:
            layers.append((arrays[f"emb_w{i}"], arrays[f"emb_b{i}"].reshape(-1)))
            i += 1
        if not layers:
            raise ValueError("jailbreak artifact: no embedding head")
        return layers

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from app.runtime.encoder import shared_encoder

            self._encoder = shared_encoder()
        return self._encoder

    # -- component logits ------------------------------------------------------------------

    def embedding_logits(self, vectors: np.ndarray) -> np.ndarray:
        h = np.asarray(vectors, np.float32)
        for i, (w, b) in enumerate(self._emb_layers):
            h = h @ w + b
            if i < len(self._emb_layers) - 1:
                h = np.maximum(h, 0.0)
        return h.reshape(-1)

    def ngram_logits(self, texts: list[str]) -> np.ndarray:
        out = np.empty(len(texts), np.float32)
        for row, text in enumerate(texts):
            idx, tf = ngram_tf(text, self.ngram_bits)
            if idx.size == 0:
                out[row] = self._ng_b
                continue
            values = tf * self._ng_idf[idx]
            norm = float(np.linalg.norm(values)) or 1.0
            out[row] = float(values @ self._ng_w[idx]) / norm + self._ng_b
        return out

    def classifier_logits(self, vectors: np.ndarray, texts: list[str]) -> tuple[np.ndarray, list[list]]:
        """Stacked logit (operating point at 0) and the regex hits of every text."""
        w_emb, w_ng, bias = self._stack
        z = w_emb * self.embedding_logits(vectors) + w_ng * self.ngram_logits(texts) + bias - self._offset
        hits = [match_patterns(t) for t in texts]
        bonus = np.array([sum(h[2] for h in hs) for hs in hits], np.float32)
        return z + bonus, hits

    # -- contrastive ------------------------------------------------------------------------

    def _pattern_vectors(self, patterns: tuple[str, ...]) -> np.ndarray:
        with self._cache_lock:
            cached = self._pattern_cache.get(patterns)
            if cached is not None:
                self._pattern_cache.move_to_end(patterns)
                return cached
        vectors = self.encoder.encode(list(patterns)) if patterns else np.zeros((0, self.dim), np.float32)
        with self._cache_lock:
            self._pattern_cache[patterns] = vectors
            while len(self._pattern_cache) > 64:  # rules are few; bound memory anyway
                self._pattern_cache.popitem(last=False)
        return vectors

    def contrastive_scores(
        self,
        vectors: np.ndarray,
        texts: list[str],
        jailbreak_patterns: list[str] | None,
        benign_patterns: list[str] | None,
    ) -> tuple[np.ndarray, list[str | None]]:
        """Scores in 0-1 and, per text, the jailbreak pattern it is closest to."""
        jb = tuple(p for p in (jailbreak_patterns or self.default_jailbreak_patterns) if p.strip())
        bn = tuple(p for p in (benign_patterns or self.default_benign_patterns) if p.strip())
        if not jb:
            return np.zeros(len(texts), np.float32), [None] * len(texts)
        jb_vec = self._pattern_vectors(jb)
        jb_sim = vectors @ jb_vec.T
        best = jb_sim.argmax(axis=1)
        diff = jb_sim.max(axis=1)
        if bn:
            diff = diff - (vectors @ self._pattern_vectors(bn).T).max(axis=1)
        scores = _sigmoid((diff - self.contrastive_margin) / CONTRASTIVE_TEMPERATURE).astype(np.float32)
        exact = [_squash(p) for p in jb]
        for row, text in enumerate(texts):
            squashed = _squash(text)
            for i, p in enumerate(exact):
                if p and p in squashed:
                    scores[row] = 1.0
                    best[row] = i
                    break
        return scores, [jb[i] for i in best]

    # -- entry points -----------------------------------------------------------------------

    def detect(
        self,
        texts: list[str],
        method: Method = "classifier",
        threshold: float | None = None,
        jailbreak_patterns: list[str] | None = None,
        benign_patterns: list[str] | None = None,
    ) -> list[JailbreakResult]:
        """One result per text. Raises ValueError on an unknown method, a threshold outside
        [0, 1], or a non-string text. Blank texts are benign without an encoder pass."""
        texts = _check_texts(texts)
        live = [i for i, t in enumerate(texts) if t.strip()]
        vectors = np.zeros((len(texts), self.dim), np.float32)
        if live:
            vectors[live] = self.encoder.encode([texts[i] for i in live])
        return self.detect_vectors(vectors, texts, method, threshold, jailbreak_patterns, benign_patterns)

    def detect_vectors(
        self,
        vectors: np.ndarray,
        texts: list[str],
        method: Method = "classifier",
        threshold: float | None = None,
        jailbreak_patterns: list[str] | None = None,
        benign_patterns: list[str] | None = None,
    ) -> list[JailbreakResult]:
        """``detect`` reusing MiniLM vectors from an encoder pass the caller already made."""
        texts = _check_texts(texts)
        if method not in METHODS:
            raise ValueError(f"unknown jailbreak method {method!r}; expected one of {METHODS}")
        thr = DEFAULT_THRESHOLD if threshold is None else float(threshold)
        if not 0.0 <= thr <= 1.0 or math.isnan(thr):
            raise ValueError(f"threshold must be within [0, 1], got {threshold!r}")
        vectors = np.asarray(vectors, np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts) or (texts and vectors.shape[1] != self.dim):
            raise ValueError(f"vectors must have shape ({len(texts)}, {self.dim}), got {vectors.shape}")
        if not any(t.strip() for t in texts):  # nothing to score: skip the pattern encoder pass too
            return [
                JailbreakResult(is_jailbreak=False, score=0.0, confidence=1.0, method=method) for _ in texts
            ]

        logits, hits = self.classifier_logits(vectors, texts)
        clf = _sigmoid(logits)
        nearest: list[str | None] = [None] * len(texts)
        scores = clf
        if method != "classifier":
            con, nearest = self.contrastive_scores(vectors, texts, jailbreak_patterns, benign_patterns)
            scores = con if method == "contrastive" else np.maximum(clf, con)

        results = []
        for i, text in enumerate(texts):
            if not text.strip():
                results.append(JailbreakResult(is_jailbreak=False, score=0.0, confidence=1.0, method=method))
                continue
            score = float(scores[i])
            flagged = score >= thr
            patterns = [name for name, _, _ in hits[i]]
            types = list(dict.fromkeys(kind for _, kind, _ in hits[i]))
            if method != "classifier" and (closest := nearest[i]) is not None and flagged:
                con_score = float(scores[i]) if method == "contrastive" else float(con[i])
                if con_score >= thr:
                    patterns.append(f"similar_to: {closest[:80]}")
                    types.append("contrastive_match")
            if flagged and not types:
                types.append("jailbreak")
            results.append(
                JailbreakResult(
                    is_jailbreak=flagged,
                    score=round(score, 6),
                    confidence=round(score if flagged else 1.0 - score, 6),
                    method=method,
                    patterns_detected=patterns,
                    detection_types=types if flagged else [],
                )
            )
        return results

    def info(self) -> dict[str, Any]:
        return {
            "name": self.meta.get("name", "jailbreak-guard"),
            "version": self.meta.get("version"),
            "trained": self.meta.get("trained"),
            "encoder": self.meta.get("encoder"),
            "methods": list(METHODS),
            "default_threshold": DEFAULT_THRESHOLD,
            "calibrated_probability_threshold": self.meta.get("calibrated_threshold"),
            "embedding_head": self.meta.get("embedding_head"),
            "ngram_bits": self.ngram_bits,
            "regexes": [name for name, _, _, _ in JAILBREAK_REGEXES],
            "default_patterns": {
                "jailbreak": len(self.default_jailbreak_patterns),
                "benign": len(self.default_benign_patterns),
            },
            "metrics": self.meta.get("metrics", {}),
            "artifact_dir": str(self.artifact_dir),
        }


def _squash(text: str) -> str:
    return " ".join(text.lower().split())


def _check_texts(texts: list[str]) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise ValueError("texts must be a list of strings")
    for t in texts:
        if not isinstance(t, str):
            raise ValueError(f"texts must be strings, got {type(t).__name__}")
    return list(texts)
