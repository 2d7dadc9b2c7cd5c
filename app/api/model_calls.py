"""Typed model calls of the diagnostics (spec 01 "Routing and diagnostics"):

    POST /api/v1/diagnostics/models/embeddings    embeddings binding: the vector
    POST /api/v1/diagnostics/models/labels        label_probabilities binding: the distribution
    POST /api/v1/diagnostics/models/label-scores  label_scores binding: scores + operating point
    POST /api/v1/diagnostics/models/tokens        token_spans binding (PII spans) or an
                                                  embeddings/rerank binding (its tokenizer's pieces)
    POST /api/v1/diagnostics/models/rerank        rerank binding: relevance in input order

Every body names `recipe` and `binding` (both required); the answer carries the binding as
GET /api/v1/diagnostics/models lists it (identity, revision, provider, device, precision,
limits). An unknown recipe or binding is 404 RECIPE_NOT_FOUND / BINDING_NOT_FOUND, a binding
of another task 400 INVALID_INPUT; no fallback model is ever used. The models are the graph's,
through the diagnostics backend (`Diagnostics`): the Embedding deployment's `embed`, the
DomainClassifier's `classify_domain`, the Guard's `detect_jailbreak` / `detect_pii`; the
tokenizer is the encoder's own tokenizer file, read in this process.

Offsets of /models/tokens are UTF-8 byte offsets into the text as sent (end exclusive).
Rerank is app/srun/rerank.py's fusion of MiniLM cosine and BM25 (no cross-encoder is
installed); `method` says so.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, Field

from app.api.classify_schemas import Text, Threshold, _Request
from app.api.diagnostics_requests import invalid, max_batch_size
from app.api.diagnostics_service import Diagnostics, _elapsed_ms
from app.api.model_bindings import Binding, binding_for
from app.config.recipes import recipe_names
from app.models.domain import DomainResult
from app.models.jailbreak import DEFAULT_THRESHOLD, JailbreakResult
from app.models.pii import PIIResult
from app.pipeline.signals.domain import unit_float
from app.pipeline.signals.jailbreak import prompt_guard_settings
from app.pipeline.signals.pii import pii_default_threshold
from app.runtime.registry import shared_tokenizer
from app.srun.rerank import ALPHA, rank

RERANK_METHOD = f"minilm-cosine+bm25 (relevance = {ALPHA} * (cosine + 1) / 2 + {1 - ALPHA:.1f} * bm25n)"


class ModelRequest(_Request):
    recipe: str = Field(min_length=1, description="recipe name (required; `default`)")
    binding: str = Field(min_length=1, description="a binding GET /api/v1/diagnostics/models lists")


class ModelTextRequest(ModelRequest):
    text: Text


class LabelScoresRequest(ModelTextRequest):
    threshold: Threshold | None = Field(
        default=None, description="operating point (default: the configured one, else the model's)"
    )


class RerankRequest(ModelRequest):
    query: Text
    documents: list[Text] = Field(min_length=1, description="at most max_batch_size")


class _ModelResponse(BaseModel):
    binding: Binding
    processing_time_ms: float


class ModelEmbeddingResponse(_ModelResponse):
    embedding: list[float]
    dimension: int


class LabelsResponse(_ModelResponse):
    label: str = Field(description="the most probable label")
    confidence: float
    probabilities: dict[str, float] = Field(description="every label of the binding; sums to 1")


class OperatingPoint(BaseModel):
    threshold: float
    source: str = Field(description="request | config | model (the model's default)")


class LabelScoresResponse(_ModelResponse):
    scores: dict[str, float] = Field(description="independent scores in [0, 1], one per label")
    operating_point: OperatingPoint
    flagged: list[str] = Field(description="labels scored at or above the threshold")


class TokenSpan(BaseModel):
    label: str = Field(description="entity type (token_spans) or the tokenizer's piece")
    text: str = Field(description="the original text of the span")
    start: int = Field(ge=0, description="UTF-8 byte offset, inclusive")
    end: int = Field(ge=0, description="UTF-8 byte offset, exclusive")
    probability: float | None = None


class TokensResponse(_ModelResponse):
    offset_unit: str = "utf8_byte"
    source: str = Field(description="model (the binding's spans) or tokenizer (its pieces)")
    tokens: list[TokenSpan]
    operating_point: OperatingPoint | None = None


class RerankResult(BaseModel):
    index: int
    relevance: float = Field(description="fused score in [0, 1]")
    cosine: float
    bm25: float
    rank: int = Field(description="1 = most relevant; ties keep input order")


class RerankResponse(_ModelResponse):
    method: str
    results: list[RerankResult] = Field(description="in the input order of `documents`")


def byte_offsets(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Code point offsets -> UTF-8 byte offsets into `text`."""
    starts = [0]
    for ch in text:
        starts.append(starts[-1] + len(ch.encode("utf-8")))
    return [(starts[a], starts[b]) for a, b in spans]


class ModelCalls:
    def __init__(self, diagnostics: Diagnostics) -> None:
        self._diagnostics = diagnostics

    def _recipes(self) -> list[str]:
        return recipe_names(self._diagnostics.config.current())

    async def embeddings(self, request: ModelTextRequest) -> ModelEmbeddingResponse:
        started = time.perf_counter()
        binding = await binding_for(request.recipe, request.binding, ("embeddings",), self._recipes())
        (vector,) = await self._diagnostics.embed([request.text])
        return ModelEmbeddingResponse(
            binding=binding,
            embedding=vector.tolist(),
            dimension=int(vector.shape[0]),
            processing_time_ms=_elapsed_ms(started),
        )

    async def labels(self, request: ModelTextRequest) -> LabelsResponse:
        started = time.perf_counter()
        binding = await binding_for(
            request.recipe, request.binding, ("label_probabilities",), self._recipes()
        )
        texts = [request.text]
        (raw,) = await self._diagnostics._call(lambda b: b.classify_domain(texts, None, "other"), 1)
        result = DomainResult.model_validate(raw)
        probabilities = {
            label: round(float(result.probabilities.get(label, 0.0)), 6) for label in binding.labels
        }
        best = max(binding.labels, key=lambda label: (probabilities[label], -binding.labels.index(label)))
        return LabelsResponse(
            binding=binding,
            label=best,
            confidence=probabilities[best],
            probabilities=probabilities,
            processing_time_ms=_elapsed_ms(started),
        )

    async def label_scores(self, request: LabelScoresRequest) -> LabelScoresResponse:
        started = time.perf_counter()
        binding = await binding_for(request.recipe, request.binding, ("label_scores",), self._recipes())
        point = self._guard_point(request.threshold)
        texts = [request.text]
        (raw,) = await self._diagnostics._call(
            lambda b: b.detect_jailbreak(texts, "classifier", point.threshold, [], []), 1
        )
        result = JailbreakResult.model_validate(raw)
        scores = {label: round(result.score, 6) for label in binding.labels}
        return LabelScoresResponse(
            binding=binding,
            scores=scores,
            operating_point=point,
            flagged=[label for label, score in scores.items() if score >= point.threshold],
            processing_time_ms=_elapsed_ms(started),
        )

    def _guard_point(self, given: float | None) -> OperatingPoint:
        if given is not None:
            return OperatingPoint(threshold=given, source="request")
        configured = unit_float(prompt_guard_settings(self._diagnostics.config.current()).get("threshold"))
        if configured is not None:
            return OperatingPoint(threshold=configured, source="config")
        return OperatingPoint(threshold=DEFAULT_THRESHOLD, source="model")

    async def tokens(self, request: ModelTextRequest) -> TokensResponse:
        started = time.perf_counter()
        binding = await binding_for(
            request.recipe, request.binding, ("token_spans", "embeddings", "rerank"), self._recipes()
        )
        text = request.text
        if binding.task != "token_spans":
            pieces = await asyncio.to_thread(shared_tokenizer().pieces, text)
            offsets = byte_offsets(text, [(a, b) for _, a, b in pieces])
            return TokensResponse(
                binding=binding,
                source="tokenizer",
                tokens=[
                    TokenSpan(label=piece, text=text[a:b], start=start, end=end)
                    for (piece, a, b), (start, end) in zip(pieces, offsets, strict=True)
                ],
                processing_time_ms=_elapsed_ms(started),
            )
        threshold = pii_default_threshold(self._diagnostics.config.current())
        (raw,) = await self._diagnostics._call(lambda b: b.detect_pii([text], None, threshold), 1)
        entities = PIIResult.model_validate(raw).entities
        offsets = byte_offsets(text, [(e.start, e.end) for e in entities])
        return TokensResponse(
            binding=binding,
            source="model",
            tokens=[
                TokenSpan(label=e.type, text=e.value, start=start, end=end, probability=e.confidence)
                for e, (start, end) in zip(entities, offsets, strict=True)
            ],
            operating_point=OperatingPoint(threshold=threshold, source="config")
            if threshold is not None
            else None,
            processing_time_ms=_elapsed_ms(started),
        )

    async def rerank(self, request: RerankRequest) -> RerankResponse:
        started = time.perf_counter()
        binding = await binding_for(request.recipe, request.binding, ("rerank",), self._recipes())
        limit = max_batch_size(self._diagnostics.config.current())
        if len(request.documents) > limit:
            raise invalid(f"documents has {len(request.documents)} items; the maximum is {limit}")
        vectors = await self._diagnostics.embed([request.query, *request.documents])
        ranked = rank(vectors[0], vectors[1:], request.query, request.documents)
        by_index = {
            index: RerankResult(
                index=index, relevance=round(rel, 6), cosine=round(cos, 6), bm25=round(bm, 6), rank=position
            )
            for position, (index, rel, cos, bm) in enumerate(ranked, start=1)
        }
        return RerankResponse(
            binding=binding,
            method=RERANK_METHOD,
            results=[by_index[i] for i in range(len(request.documents))],
            processing_time_ms=_elapsed_ms(started),
        )
