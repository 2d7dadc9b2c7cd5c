"""POST /api/v1/diagnostics/nli (spec 01 "Routing and diagnostics"): natural language
inference on one premise/hypothesis pair.

The pair is embedded by the graph's encoder (the backend's `embed`: the Embedding deployment
on Ray, the in-process encoder in the management app), and the NLI head
(app/pipeline/answers/nli.py, docs/model-cards/nli.md) reads both vectors plus lexical features in
this process, as the fact-check route reads its head. Without an encoder it is 503
MODEL_NOT_LOADED. The answer names the model that produced it: the head's artifact revision
and digest, and the encoder's binding identity (engine, pins, device, precision, limits).

Body errors are the management body: 400 INVALID_INPUT (malformed body, unknown field, blank
text), 400 TEXT_TOO_LONG (over 100,000 characters), 404 RECIPE_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, ConfigDict, Field

from app.api.classify_schemas import Text
from app.api.diagnostics_requests import ManagementError
from app.api.diagnostics_service import Diagnostics, _elapsed_ms
from app.api.model_bindings import DEFAULT_RECIPE, BindingLimits, binding_for, check_recipe
from app.config.recipes import recipe_names
from app.pipeline.answers.nli import MODEL_NAME, NLI_LABELS, NLIHead, shared_nli_head

BINDING = "nli_classifier"
CARD = "docs/model-cards/nli.md"


class NLIRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    premise: Text
    hypothesis: Text
    recipe: str | None = Field(default=None, description="`default` or a configured recipe")


class NLIScores(BaseModel):
    entailment: float
    neutral: float
    contradiction: float


class NLIModel(BaseModel):
    """Which model answered: the head (name, revision, digest) and the encoder it reads."""

    name: str
    binding: str
    recipe: str
    task: str  # nli
    provider: str  # svc-sr: the router's own graph
    deployment: str  # where the head runs (the Ingress); the encoder is `encoder_deployment`
    engine: str  # head+<encoder engine>
    revision: str  # the head artifact: nli_head.npz@<sha256 prefix>
    digest: str  # sha256 of the head artifact
    encoder: str
    encoder_deployment: str
    encoder_revision: str | None  # the encoder's pinned packages and files
    encoder_digest: str | None
    device: str
    precision: str  # the encoder's weights (int8 ONNX or fp32); the head is fp32
    labels: list[str]
    limits: BindingLimits  # the encoder's: longer texts are truncated for the vectors
    card: str


class NLIResponse(BaseModel):
    label: str = Field(description="entailment | neutral | contradiction")
    scores: NLIScores = Field(description="class probabilities, summing to 1")
    model: NLIModel
    processing_time_ms: float


def _head() -> NLIHead:
    try:
        return shared_nli_head()
    except (OSError, ValueError, KeyError) as exc:
        raise ManagementError(503, "MODEL_NOT_LOADED", f"the NLI head is not available: {exc}") from None


class NLIDiagnostics:
    def __init__(self, diagnostics: Diagnostics) -> None:
        self._diagnostics = diagnostics

    async def _model(self, recipe: str, head: NLIHead) -> NLIModel:
        encoder = await binding_for(
            recipe, "embedding", known=recipe_names(self._diagnostics.config.current())
        )
        return NLIModel(
            name=MODEL_NAME,
            binding=BINDING,
            recipe=recipe,
            task="nli",
            provider=encoder.provider,
            deployment="Ingress",
            engine=f"head+{encoder.engine}",
            revision=head.revision,
            digest=f"sha256:{head.digest}",
            encoder=encoder.model,
            encoder_deployment=encoder.deployment,
            encoder_revision=encoder.revision,
            encoder_digest=encoder.digest,
            device=encoder.device,
            precision=encoder.precision,
            labels=list(NLI_LABELS),
            limits=encoder.limits,
            card=CARD,
        )

    async def nli(self, request: NLIRequest) -> NLIResponse:
        started = time.perf_counter()
        recipe = request.recipe or DEFAULT_RECIPE
        check_recipe(recipe, recipe_names(self._diagnostics.config.current()))
        head = await asyncio.to_thread(_head)  # the first call reads the artifact
        vectors = await self._diagnostics.embed([request.premise, request.hypothesis])
        scores = head.scores(request.premise, request.hypothesis, vectors[0], vectors[1])
        label = max(NLI_LABELS, key=lambda name: scores[name])
        return NLIResponse(
            label=label,
            scores=NLIScores(**{name: round(p, 6) for name, p in scores.items()}),
            model=await self._model(recipe, head),
            processing_time_ms=_elapsed_ms(started),
        )
