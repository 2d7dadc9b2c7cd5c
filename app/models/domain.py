"""14-category domain classifier (MMLU-Pro categories) on the shared MiniLM features.

The head fuses four small experts by averaging log-probabilities (see DomainHead): an
MLP and a chat-only logistic regression on the pooled MiniLM vector, which generalise to
paraphrases, and a tf-idf logistic regression on words, which catches domain vocabulary
("tort", "mitochondria", "SQL") that a 6-layer encoder blurs, plus a kNN vote over the
training prompts' vectors. Weights are trained by scripts/train_domain.py and
shipped as .npz/.json, so run time needs numpy (plus the encoder) and nothing else.

Every expert reads English (MiniLM's vocabulary, English words): a prompt the language model is
sure is in another language (app/models/language.py `read_by_english_heads`) is classified by
the multilingual head instead (app/models/multilingual.py `MultilingualDomain`,
scripts/train_multilingual_domain.py), when it is shipped and its engine runs here.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel

from app.models.language import read_by_english_heads

if TYPE_CHECKING:
    from app.models.encoding import Encoder

log = logging.getLogger(__name__)

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


def tfidf_rows(
    texts: list[str], vocab: dict[str, int], idf: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
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


def gelu(x: np.ndarray) -> np.ndarray:
    # tanh approximation, identical to torch.nn.GELU(approximate="tanh") used in training
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


class DomainHead:
    """The numeric part: features -> probabilities, a product of experts.

    * `mlp`: one-hidden-layer MLP on the MiniLM vector, trained on exam questions and chat;
    * `bow`: tf-idf logistic regression on words and bigrams, same data;
    * `chat`: logistic regression on the MiniLM vector trained on the chat prompts only,
      which keeps the exam-heavy experts from dragging everyday phrasing to the wrong field;
    * `knn`: votes of the nearest training prompts (cosine in a 128-d PCA of the MiniLM
      space), which follows local structure the linear and MLP experts smooth over.
    Their log-probabilities are averaged with fixed weights and divided by a temperature
    fitted on validation data. Kept apart from the encoder so the training script
    evaluates exactly the function that ships.
    """

    def __init__(
        self, arrays: dict[str, np.ndarray], weights: dict[str, float], temperature: float = 1.0
    ) -> None:
        self.a = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in arrays.items()}
        self.weights = {k: float(v) for k, v in weights.items() if v > 0}
        self.temperature = float(temperature)
        self.vocab: dict[str, int] = {}
        if "bow" in self.weights:
            terms = bytes(self.a["bow_vocab"]).decode("utf-8").split("\n")
            self.vocab = {term: i for i, term in enumerate(terms)}
        self.dim = int(self.a["mlp_w1"].shape[0])
        if "knn" in self.weights:
            # int8 on disk (artifact size), float32 in memory (one matmul per request)
            self.knn_vecs = self.a["knn_vecs"].astype(np.float32) * float(self.a["knn_scale"])

    def expert_log_probs(self, vectors: np.ndarray, texts: list[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        a = self.a
        if "mlp" in self.weights:
            hidden = gelu(vectors @ a["mlp_w1"] + a["mlp_b1"])
            out["mlp"] = log_softmax(hidden @ a["mlp_w2"] + a["mlp_b2"])
        if "chat" in self.weights:
            out["chat"] = log_softmax(vectors @ a["chat_w"] + a["chat_b"])
        if "knn" in self.weights:
            out["knn"] = self.knn_log_probs(vectors)
        if "bow" in self.weights:
            rows = tfidf_rows(texts, self.vocab, a["bow_idf"])
            logits = np.stack([vals @ a["bow_w"][cols] for cols, vals in rows]) + a["bow_b"]
            out["bow"] = log_softmax(logits)
        return out

    def knn_log_probs(self, vectors: np.ndarray) -> np.ndarray:
        """Similarity-weighted votes of the nearest training prompts, in a 128-d PCA space.

        Each neighbour votes exp((cos - best cos) / tau) times its training sample weight; the
        votes are smoothed so that one expert's zero cannot veto the fusion.
        """
        a = self.a
        k, tau = int(a["knn_params"][0]), float(a["knn_params"][1])
        unit = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
        z = (unit - a["knn_mean"]) @ a["knn_proj"]
        z /= np.clip(np.linalg.norm(z, axis=1, keepdims=True), 1e-12, None)
        sims = z @ self.knn_vecs.T
        k = min(k, sims.shape[1])
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        top_sims = np.take_along_axis(sims, top, 1)
        score = np.exp((top_sims - top_sims.max(1, keepdims=True)) / tau) * a["knn_weight"][top]
        n = len(DOMAIN_CATEGORIES)
        # one bincount over (row, label) cells: np.add.at costs more than the matmul here
        cells = (np.arange(len(vectors))[:, None] * n + a["knn_labels"][top].astype(np.intp)).ravel()
        votes = np.bincount(cells, weights=score.ravel(), minlength=len(vectors) * n).reshape(-1, n)
        votes = votes / votes.sum(1, keepdims=True)
        return np.log(0.98 * votes + 0.02 / n).astype(np.float32)

    def log_probs(self, vectors: np.ndarray, texts: list[str]) -> np.ndarray:
        experts = self.expert_log_probs(vectors, texts)
        total = sum(self.weights.values())
        fused = np.sum([self.weights[k] * experts[k] for k in self.weights], axis=0) / total
        return log_softmax(fused / self.temperature)

    def probabilities(self, vectors: np.ndarray, texts: list[str]) -> np.ndarray:
        return np.exp(self.log_probs(vectors, texts))

    def save(self, out_dir: Path, meta: dict) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        # float16 halves the artifact; the trainer reports its metrics on this float16 copy.
        arrays = {
            k: (v.astype(np.float16) if v.dtype.kind == "f" and v.ndim == 2 else v) for k, v in self.a.items()
        }
        np.savez_compressed(out_dir / HEAD_FILE, allow_pickle=False, **arrays)
        meta = meta | {"expert_weights": self.weights, "temperature": self.temperature}
        (out_dir / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")

    @classmethod
    def load(cls, artifact_dir: Path) -> tuple[DomainHead, dict]:
        meta = json.loads((artifact_dir / META_FILE).read_text())
        if tuple(meta.get("categories", ())) != DOMAIN_CATEGORIES:
            raise ValueError(f"artifact categories {meta.get('categories')} != {list(DOMAIN_CATEGORIES)}")
        with np.load(artifact_dir / HEAD_FILE, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        head = cls(arrays, meta["expert_weights"], meta.get("temperature", 1.0))
        return head, meta


class DomainClassifier:
    """Classifies prompts into the 14 MMLU-Pro categories.

    `classify_vectors` lets the router reuse the one encoder pass it already made for
    the cache and jailbreak signals; `classify` encodes by itself.
    """

    def __init__(
        self, encoder: Encoder | None = None, artifact_dir: Path | None = None, multilingual: Any = True
    ) -> None:
        self.artifact_dir = Path(artifact_dir) if artifact_dir is not None else ARTIFACT_DIR
        self.head, self.meta = DomainHead.load(self.artifact_dir)
        self._encoder = encoder
        # other languages: True the shipped multilingual head (when it loads here), False none,
        # or a head of its own (a candidate: scripts/eval_domain_chat.py --multilingual DIR)
        self.multilingual = multilingual
        metrics_path = self.artifact_dir / METRICS_FILE
        self.metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}

    @property
    def encoder(self) -> Encoder:
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
        if vectors.ndim != 2 or vectors.shape[0] != len(texts) or vectors.shape[1] != self.head.dim:
            raise ValueError(f"vectors must have shape ({len(texts)}, {self.head.dim}), got {vectors.shape}")
        if not texts:
            return []
        probs = self.head.probabilities(vectors, texts)
        unread = [
            i for i, t in enumerate(texts) if self.multilingual and t.strip() and not read_by_english_heads(t)
        ]
        other = (
            (multilingual_domain() if self.multilingual is True else self.multilingual) if unread else None
        )
        if other is not None:
            try:
                probs[unread] = other.probabilities([texts[i] for i in unread])
            except Exception as exc:  # the English head's answer stands
                log.warning("multilingual domain head failed: %s", exc)
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
            results.append(
                DomainResult(category=category, confidence=confidence, probabilities=probabilities)
            )
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


@cache
def multilingual_domain() -> Any:
    """The process's multilingual domain head (None where it is not shipped or its engine
    cannot run: the English head then classifies every prompt)."""
    from app.models.multilingual import DOMAIN_ARTIFACT, HEAD_FILE, shared_domain

    if not (DOMAIN_ARTIFACT / HEAD_FILE).is_file():
        return None
    try:
        return shared_domain(DOMAIN_CATEGORIES)
    except Exception as exc:
        log.warning("multilingual domain head not loaded, the English head reads every prompt: %s", exc)
        return None


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
