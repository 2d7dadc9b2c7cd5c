"""The per-task runtime models: one `TaskModel` subclass per task, each wrapping a head of
app/models on the shared encoder. These are the engine objects every host serves: svc-srun
over its HTTP API (docs/model-runtime.md), and the graph's deployments (Embedding,
DomainClassifier, Guard) through app/runtime/hosted.py.

Beside the worker API's phases each model offers the entry its graph deployment needs, so the
deployments never reach around it to a model class:
- `EmbeddingModel.count_tokens`: tokens as the encoder reads them;
- `LabelProbabilityModel.classify_vectors`: the domain head on vectors the Router already
  has (one encoder pass per request);
- `LabelScoreModel.detect_vectors`: the jailbreak guard on given vectors, with its methods
  and pattern lists;
- `SpanModel.detect`: PII results with entity-type filters and `masked_text`.
`dim` is the vector width the model reads or writes, taken from its artifact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from app.models.encoding import Encoder
from app.runtime.engine import Prepared, TaskModel, item_usage
from app.runtime.limits import Segment, TextTokenizer, max_rows, mean_rows, mean_unit, merge_spans
from app.runtime.schemas import (
    ClassifyResult,
    EmbeddingItem,
    EmbeddingsResult,
    EmbeddingsUsage,
    ModelCard,
    Span,
    UnsupportedSurface,
)

if TYPE_CHECKING:
    from app.models.domain import DomainClassifier, DomainResult
    from app.models.jailbreak import JailbreakGuard, JailbreakResult, Method
    from app.models.pii import PIIDetector, PIIResult


class EmbeddingModel(TaskModel):
    """Sentence embeddings; windows -> token-weighted mean of unit vectors, re-normalised."""

    def __init__(self, card: ModelCard, tokenizer: TextTokenizer, encoder: Encoder) -> None:
        super().__init__(card, tokenizer)
        self.encoder = encoder

    @property
    def dim(self) -> int:
        return self.card.dimensions[0]

    def count_tokens(self, text: str) -> int:
        """Tokens including [CLS]/[SEP], as the encoder reads them (so capped at its max_tokens)."""
        return self.encoder.count_tokens(text)

    def _forward_rows(self, texts: list[str]) -> list[np.ndarray]:
        return list(self.encoder.encode(texts))

    def _answer(self, text: str, pieces: list[tuple[Segment, Any]]) -> dict[str, Any]:
        if len(pieces) == 1:
            return {"vector": np.asarray(pieces[0][1], np.float32)}
        return {"vector": mean_unit(np.stack([p[1] for p in pieces]), [p[0].tokens for p in pieces])}

    def _embeddings_result(
        self, prepared: Prepared, answers: list[dict[str, Any] | None]
    ) -> EmbeddingsResult:
        data = []
        total, partial = 0, False
        vectors = np.zeros((len(prepared.plans), self.dim), np.float32)
        for plan, answer in zip(prepared.plans, answers, strict=True):
            usage = item_usage(plan)
            total += usage.tokens
            partial |= plan.partial
            if plan.error is not None or answer is None:
                data.append(EmbeddingItem(index=plan.item, error=plan.error, usage=usage))
                continue
            vectors[plan.item] = answer["vector"]
            data.append(EmbeddingItem(index=plan.item, embedding=answer["vector"].tolist(), usage=usage))
        result = EmbeddingsResult(
            model=self.card.name,
            data=data,
            usage=EmbeddingsUsage(
                prompt_tokens=total, total_tokens=total, tokens_lower_bound=True if partial else None
            ),
        )
        result._vectors = vectors
        return result

    def _classify_result(self, prepared: Prepared, answers: list[dict[str, Any] | None]) -> ClassifyResult:
        raise UnsupportedSurface(f"model {self.card.name!r} does not serve classify")

    def self_check(self) -> None:
        vectors = self.encoder.encode(["self check", "a second, different sentence"])
        norms = np.linalg.norm(vectors, axis=1)
        if vectors.shape != (2, self.dim) or not np.allclose(norms, 1.0, atol=1e-3):
            raise RuntimeError(f"embedding self-check failed: shape {vectors.shape}, norms {norms}")


class LabelProbabilityModel(TaskModel):
    """A softmax head over the card's labels (the domain classifier)."""

    def __init__(
        self, card: ModelCard, tokenizer: TextTokenizer, encoder: Encoder, head: DomainClassifier
    ) -> None:
        super().__init__(card, tokenizer)
        self.encoder = encoder
        self.head = head

    @property
    def dim(self) -> int:
        return self.head.head.dim

    def classify_vectors(self, vectors: np.ndarray, texts: list[str]) -> list[DomainResult]:
        """The head on vectors the caller already has: one result per text (a blank text gets
        the uniform distribution and the fallback category `other`)."""
        return self.head.classify_vectors(vectors, texts)

    def info(self) -> dict[str, Any]:
        return self.head.info()

    def _forward_rows(self, texts: list[str]) -> list[tuple[np.ndarray, str]]:
        results = self.head.classify_vectors(self.encoder.encode(texts), texts)
        labels = self.card.labels
        return [(np.array([r.probabilities[label] for label in labels]), r.category) for r in results]

    def _answer(self, text: str, pieces: list[tuple[Segment, Any]]) -> dict[str, Any]:
        return probabilities_answer(self.card.labels, pieces)

    def self_check(self) -> None:
        probs, _ = self._forward_rows(["How do I compute the derivative of x squared?"])[0]
        check_distribution(probs, len(self.card.labels))

    def check_head(self) -> None:
        """The self-check on a vector instead of a text: no encoder pass."""
        [result] = self.classify_vectors(_unit_row(self.dim), ["How do I compute a derivative?"])
        check_distribution(
            np.array([result.probabilities[label] for label in self.card.labels]), len(self.card.labels)
        )


class LabelScoreModel(TaskModel):
    """Independent per-label scores (the jailbreak guard: one label, `jailbreak`).
    Windows aggregate by max: an attack anywhere in the text flags it."""

    def __init__(
        self, card: ModelCard, tokenizer: TextTokenizer, encoder: Encoder, guard: JailbreakGuard
    ) -> None:
        super().__init__(card, tokenizer)
        self.encoder = encoder
        self.guard = guard

    @property
    def dim(self) -> int:
        return self.guard.dim

    def detect_vectors(
        self,
        vectors: np.ndarray,
        texts: list[str],
        method: Method = "classifier",
        threshold: float | None = None,
        jailbreak_patterns: list[str] | None = None,
        benign_patterns: list[str] | None = None,
    ) -> list[JailbreakResult]:
        """The guard's full verdicts (method, threshold, pattern lists) on given vectors."""
        return self.guard.detect_vectors(
            vectors, texts, method, threshold, jailbreak_patterns, benign_patterns
        )

    def info(self) -> dict[str, Any]:
        return self.guard.info()

    def _forward_rows(self, texts: list[str]) -> list[np.ndarray]:
        return [np.array([r.score]) for r in self.guard.detect(texts)]

    def _answer(self, text: str, pieces: list[tuple[Segment, Any]]) -> dict[str, Any]:
        scores = max_rows(np.stack([p[1] for p in pieces]))
        return {"scores": {name: float(s) for name, s in zip(self.card.labels, scores, strict=True)}}

    def self_check(self) -> None:
        (score,) = self._forward_rows(["What is the capital of France?"])[0]
        _check_score(float(score))

    def check_head(self) -> None:
        """The self-check on a vector instead of a text: no encoder pass."""
        [result] = self.detect_vectors(_unit_row(self.dim), ["What is the capital of France?"])
        _check_score(result.score)


class SpanModel(TaskModel):
    """Token spans from the PII detector, in code point offsets of the input."""

    def __init__(self, card: ModelCard, tokenizer: TextTokenizer, detector: PIIDetector) -> None:
        super().__init__(card, tokenizer)
        self.detector = detector

    def detect(
        self, texts: list[str], entity_types: list[str] | None = None, threshold: float | None = None
    ) -> list[PIIResult]:
        """The detector's results (entities of `entity_types`, all when None, at or above
        `threshold`, the detector's own when None; `masked_text`), one per text."""
        return self.detector.detect_many(texts, entity_types, threshold)

    def info(self) -> dict[str, Any]:
        return self.detector.info()

    def _forward_rows(self, texts: list[str]) -> list[list[Span]]:
        return [
            [
                Span(label=e.type, start=e.start, end=e.end, text=e.value, probability=e.confidence)
                for e in result.entities
            ]
            for result in self.detector.detect_many(texts)
        ]

    def _answer(self, text: str, pieces: list[tuple[Segment, Any]]) -> dict[str, Any]:
        return spans_answer(text, pieces)

    def self_check(self) -> None:
        spans = self._forward_rows(["write to jane.doe@example.com"])[0]
        if not any(s.label == "EMAIL_ADDRESS" and s.text == "jane.doe@example.com" for s in spans):
            raise RuntimeError(f"span self-check failed: {spans}")


def probabilities_answer(labels: list[str], pieces: list[tuple[Segment, Any]]) -> dict[str, Any]:
    """A label_probabilities answer from window rows of (probabilities, label): one window's
    own, or the token-weighted mean's argmax."""
    if len(pieces) == 1:
        probs, label = pieces[0][1]
    else:
        probs = mean_rows(np.stack([p[1][0] for p in pieces]), [p[0].tokens for p in pieces])
        label = labels[int(np.argmax(probs))]
    by_label = {name: float(p) for name, p in zip(labels, probs, strict=True)}
    return {"label": label, "confidence": float(np.max(probs)), "probabilities": by_label}


def spans_answer(text: str, pieces: list[tuple[Segment, Any]]) -> dict[str, Any]:
    """A token_spans answer from window rows of spans: merged in input offsets."""
    if len(pieces) == 1 and pieces[0][0].start == 0:
        return {"spans": list(pieces[0][1])}
    return {"spans": merge_spans(text, [(seg, spans) for seg, spans in pieces])}


def check_distribution(probs: np.ndarray, labels: int) -> None:
    if probs.shape != (labels,) or abs(float(probs.sum()) - 1.0) > 1e-3:
        raise RuntimeError(f"label-probability self-check failed: {probs}")


def _unit_row(dim: int) -> np.ndarray:
    """One unit-length row: a stand-in query vector for checks that must not encode."""
    return np.full((1, dim), 1.0 / np.sqrt(dim), np.float32)


def _check_score(score: float) -> None:
    if not 0.0 <= score <= 1.0:
        raise RuntimeError(f"label-score self-check failed: {score}")
