"""/v1/rerank by a cross-encoder directory of the user's own (docs/model-runtime.md, "Your own
models"): a Hugging Face `*ForSequenceClassification` with one label (the sentence-transformers
CrossEncoder layout, or its ONNX export) reads the query and each document as one pair and
answers one logit; `relevance_score` is its sigmoid, the activation sentence-transformers
applies to a one-label cross-encoder, and `logit` the raw value. The pair is cut longest-first
to the model's `max_input_tokens` (usage counts the tokens read, a lower bound when a pair was
cut). The built-in `minilm-reranker` (app/srun/catalog.py) fuses similarity and BM25 instead.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from app.runtime.dir_models import DirCrossEncoder
from app.runtime.schemas import Timings, parse_request
from app.srun.schemas import RerankItem, RerankRequest, RerankResponse, RerankUsage, WorkerCard

Pair = tuple[str, str]
Scored = tuple[float, int, bool]  # (logit, tokens read, cut to the budget)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class CrossEncoderReranker:
    """A cross-encoder directory on the worker's rerank surface; `forward` is what the
    worker's micro-batcher runs (one row per pair)."""

    def __init__(self, card: WorkerCard, model: DirCrossEncoder) -> None:
        self.card = card
        self.model = model

    def forward(self, pairs: list[Pair]) -> list[Scored]:
        return self.model.score(pairs) if pairs else []

    def warm_up(self) -> None:
        self.model.warm_up()

    async def rerank(
        self,
        body: RerankRequest | dict[str, Any],
        score: Callable[[list[Pair]], Awaitable[list[Scored]]] | None = None,
        timings: Timings | None = None,
    ) -> RerankResponse:
        timings = timings if timings is not None else Timings()
        request = body if isinstance(body, RerankRequest) else parse_request(RerankRequest, body)
        docs = [d if isinstance(d, str) else d.text for d in request.documents]
        pairs = [(request.query, doc) for doc in docs]
        scored = await (score(pairs) if score is not None else asyncio.to_thread(self.forward, pairs))
        post = time.perf_counter()
        order = sorted(range(len(docs)), key=lambda i: -scored[i][0])[: request.top_n]
        results = [
            RerankItem(
                index=i,
                relevance_score=round(sigmoid(scored[i][0]), 6),
                logit=round(scored[i][0], 6),
                document=docs[i] if request.return_documents else None,
            )
            for i in order
        ]
        cut = any(truncated for _, _, truncated in scored)
        timings.post_ms += (time.perf_counter() - post) * 1000.0
        return RerankResponse(
            model=self.card.served_name or self.card.name,
            results=results,
            usage=RerankUsage(tokens=sum(t for _, t, _ in scored), tokens_lower_bound=True if cut else None),
        )
