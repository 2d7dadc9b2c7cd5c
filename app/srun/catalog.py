"""Every model the worker can serve: the engine's built-ins (`app.runtime.registry`) plus
the worker's own `decision-model` and `minilm-reranker`, both on the shared MiniLM encoder.

`load(name, engine, device)` returns a loaded model: a `RuntimeModel` (classify,
embeddings), a `DecisionModel`, a `Reranker` or, for a cross-encoder directory, a
`CrossEncoderReranker` (app/srun/cross_encoder.py). `card_of(model)` gives its `WorkerCard`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import numpy as np

from app.runtime import registry
from app.runtime.dir_models import DirCrossEncoder
from app.runtime.engine import RuntimeModel
from app.runtime.limits import TextTokenizer, plan_input, resolve_budget
from app.runtime.schemas import (
    ClassifyOptions,
    ModelCard,
    ModelNotFound,
    NotReady,
    Surface,
    Task,
    Timings,
    parse_request,
)
from app.srun.calibration import ARTIFACT, Calibration
from app.srun.cross_encoder import CrossEncoderReranker
from app.srun.decisions import DecisionModel, EncodedRow
from app.srun.rerank import rank
from app.srun.schemas import RerankItem, RerankRequest, RerankResponse, RerankUsage, WorkerCard

DECISION_MODEL = "decision-model"
RERANKER = "minilm-reranker"


def _decision_artifacts(engine: str) -> list[tuple[str, str | None, list[Any]]]:
    return [("svc-sr-decision-calibration", None, [ARTIFACT]), *registry.encoder_artifacts(engine)]


# registry.Builtin types the engine's own tasks and surfaces; the worker's decision model adds
# `decisions` (WorkerSurface), hence the casts.
SPECS: dict[str, registry.Builtin] = {
    DECISION_MODEL: registry.Builtin(
        name=DECISION_MODEL,
        description="zero-shot decisions (choice, noul, score, set, span) on MiniLM similarities, calibrated",
        task=cast(Task, "decisions"),
        surfaces=cast(tuple[Surface, ...], ("decisions",)),
        engines=("onnxruntime", "native"),
        limits=registry.MINILM_LIMITS,
        labels=list,
        artifacts=_decision_artifacts,
    ),
    RERANKER: registry.Builtin(
        name=RERANKER,
        description="rerank: MiniLM cosine similarity fused with BM25",
        task="rerank",
        surfaces=("rerank",),
        engines=("onnxruntime", "native"),
        limits=registry.MINILM_LIMITS,
        labels=list,
        artifacts=registry.encoder_artifacts,
    ),
}
ALIASES = {"decisions": DECISION_MODEL, "systemone": DECISION_MODEL, "reranker": RERANKER, "rerank": RERANKER}


def builtin_names() -> list[str]:
    return [*registry.BUILTINS, *SPECS]


def is_builtin(name: str) -> bool:
    return name in SPECS or name in ALIASES or registry.is_builtin(name)


def canonical(name: str) -> str:
    if name in SPECS or name in registry.BUILTINS:
        return name
    if name in ALIASES:
        return ALIASES[name]
    if name in registry.ALIASES:
        return registry.ALIASES[name]
    raise ModelNotFound(f"no built-in model {name!r}; built-in: {', '.join(builtin_names())}")


def to_worker_card(card: ModelCard) -> WorkerCard:
    return WorkerCard.model_validate(card.model_dump())


def _spec_card(spec: registry.Builtin, engine: str | None = None, device: str = "cpu") -> WorkerCard:
    return WorkerCard(
        name=spec.name,
        description=spec.description,
        task=str(spec.task),
        surfaces=list(spec.surfaces),
        engines=list(spec.engines),
        engine=engine,
        limits=spec.limits,
        device=device,
    )


def catalogue() -> list[WorkerCard]:
    """Cards of every built-in, without loading anything (`unavailable` with the reason)."""
    cards = [to_worker_card(c) for c in registry.list_builtin_models()]
    for spec in SPECS.values():
        card = _spec_card(spec)
        missing = registry.missing_artifacts(spec, spec.engines[0])
        if missing:
            card.status, card.status_message = "unavailable", missing
        cards.append(card)
    for card in cards:
        card.licence = (registry.BUILTINS.get(card.name) or SPECS[card.name]).licence
    return cards


class Reranker:
    """/v1/rerank: one encoder pass over the query and the documents (truncated to the card's
    max_input_tokens), fused with BM25 over the full documents."""

    def __init__(self, card: WorkerCard, tokenizer: TextTokenizer, encoder: Any) -> None:
        self.card = card
        self.tokenizer = tokenizer
        self.encoder = encoder

    def forward(self, texts: list[str]) -> list[EncodedRow]:
        return [EncodedRow(v) for v in self.encoder.encode(texts)] if texts else []

    async def rerank(
        self,
        body: RerankRequest | dict[str, Any],
        encode: Callable[[list[str]], Awaitable[list[EncodedRow]]] | None = None,
        timings: Timings | None = None,
    ) -> RerankResponse:
        timings = timings if timings is not None else Timings()
        request = body if isinstance(body, RerankRequest) else parse_request(RerankRequest, body)
        docs = [d if isinstance(d, str) else d.text for d in request.documents]
        started = time.perf_counter()
        budget = resolve_budget(
            ClassifyOptions(overflow="truncate"), self.card.limits, self.tokenizer.special_tokens
        )
        plans = [plan_input(i, t, budget, self.tokenizer) for i, t in enumerate([request.query, *docs])]
        reads = [p.segments[0].text if p.segments else "" for p in plans]
        timings.tokenize_ms += (time.perf_counter() - started) * 1000.0
        rows = await (encode(reads) if encode is not None else asyncio.to_thread(self.forward, reads))
        post = time.perf_counter()
        vectors = np.stack([r.vector for r in rows])
        ranked = rank(vectors[0], vectors[1:], request.query, docs, request.top_n)
        results = [
            RerankItem(
                index=i,
                relevance_score=round(score, 6),
                similarity=round(cos, 6),
                bm25=round(bm, 6),
                document=docs[i] if request.return_documents else None,
            )
            for i, score, cos, bm in ranked
        ]
        partial = any(p.partial for p in plans)
        timings.post_ms += (time.perf_counter() - post) * 1000.0
        return RerankResponse(
            model=self.card.served_name or self.card.name,
            results=results,
            usage=RerankUsage(
                tokens=sum(p.tokens for p in plans), tokens_lower_bound=True if partial else None
            ),
        )


Loaded = RuntimeModel | DecisionModel | Reranker | CrossEncoderReranker


def card_of(model: Loaded) -> WorkerCard:
    card = model.card
    return card if isinstance(card, WorkerCard) else to_worker_card(card)


def load(name: str, engine: str = "auto", device: str = "cpu", *, warm: bool = True) -> Loaded:
    """Load a built-in by name or alias, or a model directory (`registry.load_model`).
    ModelNotFound, InvalidRequest (engine/device) or NotReady (missing files, failed
    self-check, a directory that cannot serve), as `registry.load_model`."""
    if not is_builtin(name):  # a directory
        loaded = registry.load_model(name, engine=engine, device=device, warm=warm)
        if isinstance(loaded, DirCrossEncoder):
            return CrossEncoderReranker(to_worker_card(loaded.card), loaded)
        return loaded
    key = canonical(name)
    if key in registry.BUILTINS:
        return registry.load_model(key, engine=engine, device=device, warm=warm)
    spec = SPECS[key]
    device = (device or "cpu").strip().lower()
    chosen = registry.pick_engine(spec, engine, device)
    missing = registry.missing_artifacts(spec, chosen)
    if missing:
        raise NotReady(f"{spec.name} cannot load: {missing}")
    card = _spec_card(spec, chosen, device)
    card.revision, card.digest, card.artifacts = registry.pin(spec, chosen)
    encoder = registry.encoder_for(chosen, device)
    tokenizer = registry.shared_tokenizer()
    try:
        model: DecisionModel | Reranker
        if key == DECISION_MODEL:
            model = DecisionModel(card, tokenizer, encoder, Calibration.load())
        else:
            model = Reranker(card, tokenizer, encoder)
        if warm:
            encoder.warm_up()
        _self_check(model)
    except Exception as exc:  # a damaged artifact or a model answering nonsense: failed, not retried
        raise NotReady(f"{spec.name} failed to load: {type(exc).__name__}: {exc}") from exc
    card.status = "ready"
    return model


def _run(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, also when this thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _self_check(model: DecisionModel | Reranker) -> None:
    if isinstance(model, DecisionModel):
        answer = _run(
            model.decide(
                {
                    "state": "I was charged twice on my credit card this month, please refund one payment.",
                    "questions": {
                        "q": {
                            "type": "choice",
                            "criteria": {
                                "billing": "charges, payments and refunds",
                                "weather": "rain, sun and temperature forecasts",
                            },
                        }
                    },
                }
            )
        )
        got = answer.answers["q"]
        if getattr(got, "choice", None) != "billing":
            raise RuntimeError(f"decision self-check answered {got}")
        return
    result = _run(
        model.rerank(
            {
                "query": "how to bake bread",
                "documents": [
                    "The stock market fell sharply today.",
                    "Knead the dough and bake the loaf for 40 minutes.",
                ],
            }
        )
    )
    if result.results[0].index != 1:
        raise RuntimeError(f"rerank self-check ranked {result.results}")
