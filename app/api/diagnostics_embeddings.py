"""POST /api/v1/diagnostics/embeddings, /similarity and /similarity/batch (spec 01 "Routing
and diagnostics"): the router's own MiniLM sentence vectors (the backend's `embed`, the
Embedding deployment in the graph), as the embedding signals and the semantic cache read them.

Shapes follow the reference router's embedding API: `/similarity` scores one text pair
(`text1`, `text2`); `/similarity/batch` scores one `query` against a list of `candidates`
and answers the matches best first (ties keep input order), `top_k` of them when given.
Similarity is the cosine of the unit vectors, in [-1, 1]. Text only: image embeddings need a
vision encoder, which the router does not load. A list over
`global.services.api.batch_classification.max_batch_size` (default 100) is 400 INVALID_INPUT;
without an encoder the routes answer 503 MODEL_NOT_LOADED.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from app.api.classify_schemas import Text, _Request
from app.api.diagnostics_requests import invalid, max_batch_size
from app.api.diagnostics_service import Diagnostics, _elapsed_ms
from app.api.model_bindings import DEFAULT_RECIPE, Binding, binding_for
from app.runtime.encoder import EMBEDDING_DIM


class EmbeddingsRequest(_Request):
    texts: list[Text] = Field(min_length=1, description="texts to embed (at most max_batch_size)")
    dimension: Literal[EMBEDDING_DIM] | None = Field(  # type: ignore[valid-type]  # mypy takes no constant in Literal; the value is 384
        default=None, description=f"the encoder's width ({EMBEDDING_DIM}); MiniLM has no other"
    )


class EmbeddingOut(BaseModel):
    index: int
    text: str
    embedding: list[float]
    dimension: int


class EmbeddingsResponse(BaseModel):
    embeddings: list[EmbeddingOut]
    total_count: int
    binding: Binding
    processing_time_ms: float


class SimilarityRequest(_Request):
    text1: Text
    text2: Text


class SimilarityResponse(BaseModel):
    similarity: float = Field(description="cosine of the two unit vectors, in [-1, 1]")
    binding: Binding
    processing_time_ms: float


class BatchSimilarityRequest(_Request):
    query: Text
    candidates: list[Text] = Field(min_length=1, description="at most max_batch_size")
    top_k: int | None = Field(default=None, ge=1, description="matches returned (all when unset)")


class SimilarityMatch(BaseModel):
    index: int = Field(description="the candidate's position in the request")
    text: str
    similarity: float


class BatchSimilarityResponse(BaseModel):
    matches: list[SimilarityMatch] = Field(description="best first; ties keep input order")
    total_candidates: int
    binding: Binding
    processing_time_ms: float


def cosines(query: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Cosine of each row with the query (unit vectors from the encoder, renormalised anyway)."""
    q = np.asarray(query, np.float64)
    m = np.asarray(rows, np.float64)
    norms = np.linalg.norm(m, axis=1) * max(float(np.linalg.norm(q)), 1e-12)
    return np.clip((m @ q) / np.maximum(norms, 1e-12), -1.0, 1.0)


class EmbeddingDiagnostics:
    def __init__(self, diagnostics: Diagnostics) -> None:
        self._diagnostics = diagnostics

    def _check_size(self, what: str, n: int) -> None:
        limit = max_batch_size(self._diagnostics.config.current())
        if n > limit:
            raise invalid(f"{what} has {n} items; the maximum is {limit}")

    @staticmethod
    async def _encoder() -> Binding:
        return await binding_for(DEFAULT_RECIPE, "embedding")

    async def embeddings(self, request: EmbeddingsRequest) -> EmbeddingsResponse:
        started = time.perf_counter()
        self._check_size("texts", len(request.texts))
        binding = await self._encoder()
        vectors = await self._diagnostics.embed(list(request.texts))
        width = int(vectors.shape[1])
        return EmbeddingsResponse(
            embeddings=[
                EmbeddingOut(index=i, text=text, embedding=vectors[i].tolist(), dimension=width)
                for i, text in enumerate(request.texts)
            ],
            total_count=len(request.texts),
            binding=binding,
            processing_time_ms=_elapsed_ms(started),
        )

    async def similarity(self, request: SimilarityRequest) -> SimilarityResponse:
        started = time.perf_counter()
        binding = await self._encoder()
        first, second = await self._diagnostics.embed([request.text1, request.text2])
        (score,) = cosines(first, second[None, :])
        return SimilarityResponse(
            similarity=round(float(score), 6), binding=binding, processing_time_ms=_elapsed_ms(started)
        )

    async def similarity_batch(self, request: BatchSimilarityRequest) -> BatchSimilarityResponse:
        started = time.perf_counter()
        self._check_size("candidates", len(request.candidates))
        binding = await self._encoder()
        vectors = await self._diagnostics.embed([request.query, *request.candidates])
        scores = cosines(vectors[0], vectors[1:])
        order = sorted(range(len(request.candidates)), key=lambda i: (-scores[i], i))
        if request.top_k is not None:
            order = order[: request.top_k]
        return BatchSimilarityResponse(
            matches=[
                SimilarityMatch(index=i, text=request.candidates[i], similarity=round(float(scores[i]), 6))
                for i in order
            ],
            total_candidates=len(request.candidates),
            binding=binding,
            processing_time_ms=_elapsed_ms(started),
        )
