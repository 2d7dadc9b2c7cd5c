"""14-category domain classifier (MMLU-Pro categories) on the shared MiniLM features.

The head is a multinomial logistic regression on the pooled MiniLM vector, fused with a
tf-idf bag-of-words logistic regression by averaging log-probabilities: the embedding
generalises to paraphrases, the words catch domain vocabulary ("tort", "mitochondria",
"SQL") that a 6-layer encoder blurs. Weights are trained by scripts/train_domain.py and
shipped as .npz/.json, so run time needs numpy (plus the encoder) and nothing else.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

if TYPE_CHECKING:
    from app.runtime.encoder import MiniLMEncoder

DOMAIN_CATEGORIES: tuple[str, ...] = (
    "biology",
    "business",
    "chemistry",
    "computer science",
    "economics",
    "engineering",
    "health",
    "history",
    "law",
    "math",
    "other",
    "philosophy",
    "physics",
    "psychology",
)

ARTIFACT_DIR = Path(__file__).parent / "artifacts"
HEAD_FILE = "domain_head.npz"
META_FILE = "domain_meta.json"
METRICS_FILE = "domain_metrics.json"

_WORD = re.compile(r"[a-z][a-z0-9+#']*|\d+")


def tokenize(text: str) -> list[str]:
    """Lower-cased words plus adjacent-word bigrams (shared by training and run time)."""
    words = [w.strip("'") for w in _WORD.findall(text.lower())]
    words = [w for w in words if w]
    return words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]


def tfidf_rows(texts: list[str], vocab: dict[str, int], idf: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per text: (column indices, L2-normalised sublinear tf-idf values) over a fixed vocabulary.

    Sparse on purpose: a vocabulary of ~40k terms would make a dense row per text
    wasteful at run time and impossible for 25k training texts.
    """
    rows = []
    for text in texts:
        counts = Counter(term for term in tokenize(text) if term in vocab)
        cols = np.fromiter((vocab[t] for t in counts), dtype=np.int64, count=len(counts))
        tf = np.fromiter((1.0 + math.log(c) for c in counts.values()), dtype=np.float32, count=len(counts))
        vals = tf * idf[cols]
        norm = float(np.linalg.norm(vals))
        rows.append((cols, vals / norm if norm > 0 else vals))
    return rows


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


class DomainResult(BaseModel):
    category: str
    confidence: float
    probabilities: dict[str, float]


class DomainHead:
    """The numeric part: features -> probabilities. Separate from the encoder so the
    training script can evaluate exactly the function that ships."""

    def __init__(
        self,
        emb_w: np.ndarray,
        emb_b: np.ndarray,
        bow_w: np.ndarray | None = None,
        bow_b: np.ndarray | None = None,
        vocab: list[str] | None = None,
        idf: np.ndarray | None = None,
        bow_weight: float = 0.0,
        temperature: float = 1.0,
    ) -> None:
        self.emb_w = emb_w.astype(np.float32)
        self.emb_b = emb_b.astype(np.float32)
        self.bow_w = None if bow_w is None else bow_w.astype(np.float32)
        self.bow_b = None if bow_b is None else bow_b.astype(np.float32)
        self.vocab = {term: i for i, term in enumerate(vocab or [])}
        self.idf = None if idf is None else idf.astype(np.float32)
        self.bow_weight = bow_weight if self.bow_w is not None else 0.0
        self.temperature = temperature

    def log_probs(self, vectors: np.ndarray, texts: list[str]) -> np.ndarray:
        fused = log_softmax(vectors @ self.emb_w + self.emb_b)
        if self.bow_weight > 0 and self.bow_w is not None and self.idf is not None:
            bow_logits = np.stack(
                [vals @ self.bow_w[cols] for cols, vals in tfidf_rows(texts, self.vocab, self.idf)]
            )
            bow = log_softmax(bow_logits + self.bow_b)
            fused = (1.0 - self.bow_weight) * fused + self.bow_weight * bow
        return fused / self.temperature

    def probabilities(self, vectors: np.ndarray, texts: list[str]) -> np.ndarray:
        return softmax(self.log_probs(vectors, texts))

    def save(self, out_dir: Path, meta: dict) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {"emb_w": self.emb_w, "emb_b": self.emb_b}
        if self.bow_w is not None and self.bow_b is not None and self.idf is not None:
            # float16 halves the artifact; the fused accuracy is unchanged to 4 decimals.
            arrays |= {"bow_w": self.bow_w.astype(np.float16), "bow_b": self.bow_b, "idf": self.idf}
            arrays["vocab"] = np.array(sorted(self.vocab, key=self.vocab.__getitem__))
        np.savez_compressed(out_dir / HEAD_FILE, **arrays)
        meta = meta | {"bow_weight": self.bow_weight, "temperature": self.temperature}
        (out_dir / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")

    @classmethod
    def load(cls, artifact_dir: Path) -> tuple[DomainHead, dict]:
        meta = json.loads((artifact_dir / META_FILE).read_text())
        with np.load(artifact_dir / HEAD_FILE, allow_pickle=False) as data:
            has_bow = "bow_w" in data.files
            head = cls(
                emb_w=data["emb_w"],
                emb_b=data["emb_b"],
                bow_w=data["bow_w"] if has_bow else None,
                bow_b=data["bow_b"] if has_bow else None,
                vocab=data["vocab"].tolist() if has_bow else None,
                idf=data["idf"] if has_bow else None,
                bow_weight=float(meta.get("bow_weight", 0.0)),
                temperature=float(meta.get("temperature", 1.0)),
            )
        if tuple(meta["categories"]) != DOMAIN_CATEGORIES:
            raise ValueError(f"artifact categories {meta['categories']} != {DOMAIN_CATEGORIES}")
        if head.emb_w.shape[1] != len(DOMAIN_CATEGORIES):
            raise ValueError(f"artifact head has {head.emb_w.shape[1]} outputs, expected 14")
        return head, meta


class DomainClassifier:
    """Classifies prompts into the 14 MMLU-Pro categories.

    `classify_vectors` lets the router reuse the one encoder pass it already made for
    the cache and jailbreak signals; `classify` encodes by itself.
    """

    def __init__(self, encoder: MiniLMEncoder | None = None, artifact_dir: Path | None = None) -> None:
        self.artifact_dir = Path(artifact_dir) if artifact_dir is not None else ARTIFACT_DIR
        self.head, self.meta = DomainHead.load(self.artifact_dir)
        self._encoder = encoder
        metrics_path = self.artifact_dir / METRICS_FILE
        self.metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}

    @property
    def encoder(self) -> MiniLMEncoder:
        if self._encoder is None:
            from app.runtime.encoder import shared_encoder

            self._encoder = shared_encoder()
        return self._encoder

    def classify(
        self, texts: list[str], threshold: float | None = None, fallback_category: str = "other"
    ) -> list[DomainResult]:
        _check_texts(texts)
        if not texts:
            return []
        return self.classify_vectors(self.encoder.encode(texts), texts, threshold, fallback_category)

    def classify_vectors(
        self,
        vectors: np.ndarray,
        texts: list[str],
        threshold: float | None = None,
        fallback_category: str = "other",
    ) -> list[DomainResult]:
        _check_texts(texts)
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be within [0, 1], got {threshold}")
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts) or vectors.shape[1] != self.head.emb_w.shape[0]:
            raise ValueError(
                f"vectors must have shape ({len(texts)}, {self.head.emb_w.shape[0]}), got {vectors.shape}"
            )
        if not texts:
            return []
        probs = self.head.probabilities(vectors, texts)
        results = []
        for text, row in zip(texts, probs, strict=True):
            if not text.strip():
                # Nothing to classify: a blank prompt has no domain, whatever the bias terms say.
                row = np.full(len(DOMAIN_CATEGORIES), 1.0 / len(DOMAIN_CATEGORIES))
            best = int(row.argmax())
            confidence = float(row[best])
            category = DOMAIN_CATEGORIES[best]
            if not text.strip() or (threshold is not None and confidence < threshold):
                category = fallback_category
            probabilities = {c: float(p) for c, p in zip(DOMAIN_CATEGORIES, row, strict=True)}
            results.append(DomainResult(category=category, confidence=confidence, probabilities=probabilities))
        return results

    def info(self) -> dict:
        return {
            "name": self.meta.get("name", "svc-sr-domain"),
            "type": "domain_classifier",
            "version": self.meta.get("version"),
            "trained_on": self.meta.get("date"),
            "method": self.meta.get("method"),
            "encoder": self.meta.get("encoder"),
            "categories": list(DOMAIN_CATEGORIES),
            "model_path": str(self.artifact_dir),
            "metrics": self.meta.get("metrics", {}),
        }


def _check_texts(texts: list[str]) -> None:
    if not isinstance(texts, list | tuple):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be a list of strings, found {type(text).__name__}")


def map_to_configured(category: str, configured: list[tuple[str, list[str]]]) -> str:
    """Translate an MMLU-Pro category to the configured generic category name.

    Spec rule: a configured category maps to the MMLU categories in its mmlu_categories
    list; with no list, a case-insensitive name match maps identically; with no mapping
    the original name is kept. As in the reference router, a later configured entry
    overrides an earlier one claiming the same MMLU category.
    """
    if not category:
        return category
    known = {c.lower() for c in DOMAIN_CATEGORIES}
    table: dict[str, str] = {}
    for name, mmlu_categories in configured:
        if mmlu_categories:
            for mmlu in mmlu_categories:
                table[mmlu.strip().lower()] = name
        elif name.strip().lower() in known:
            table[name.strip().lower()] = name
    return table.get(category.strip().lower(), category)
