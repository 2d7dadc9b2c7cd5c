"""Learned and cost-aware model selection: a decision's `algorithm` types `knn`, `mlp` and
`automix` (app/config/selection.py) ordering its modelRefs for one request.

Each candidate gets a predicted quality (its chance to answer right: the learned predictor
of app/models/selection.py over the request's MiniLM vector, or the model cards'
`quality_score`) and an expected cost (this request's prompt tokens and the model's mean
completion tokens at the config's pricing). Costs are compared as a share of the dearest
candidate's, so `cost_quality_tradeoff` means the same whatever the price level:
`value = (1 - t) * quality - t * cost / dearest_cost`.

- knn / mlp: candidates by value, best first.
- automix: the cheapest candidate whose quality reaches `verification_threshold` (the one
  that would pass verification, so no escalation is needed), then up to `max_escalations`
  dearer ones of higher quality, then the rest by value; with no candidate reaching the
  threshold, by value. `cost_aware_routing: false` orders by quality alone.

A candidate the predictor does not know gets the predictor's mean quality. Compiled once per
config version: a missing or foreign artifact fails the config's activation, not a request.
`elo` (quality from ratings learned online) is app/pipeline/elo_selector.py, on the same
`ModelOption`, `by_value` and `RefInputs`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from app.config.document import RouterConfig
from app.config.pricing import Pricing
from app.config.providers import ProviderModel
from app.config.routing import Decision, ModelRef
from app.config.selection import LEARNED_TYPES, Algorithm, AutomixSettings
from app.models.selection import (
    KNN_FILE,
    MLP_FILE,
    KnnQuality,
    QualityModel,
    load_quality_model,
    packaged_artifact,
)
from app.pipeline.selection import ModelIndex

DEFAULT_CARD_QUALITY = 0.8  # the reference's quality_score when a model card gives none
VectorFn = Callable[[], Awaitable[np.ndarray]]


@dataclass(frozen=True)
class ModelOption:
    ref: ModelRef
    quality: float
    cost: float  # expected, in the pricing's currency


@dataclass(frozen=True)
class RefInputs:
    """What a modelRef's value needs besides the request, resolved when the config compiles."""

    column: int | None  # the predictor's output for this model (None: it does not know it)
    card_quality: float
    completion_tokens: float
    pricing: Pricing | None

    def expected_cost(self, prompt_tokens: int) -> float:
        """This request's prompt and the model's mean completion at the model's pricing."""
        if self.pricing is None:
            return 0.0
        prompt, completion = self.pricing.prompt_per_1m, self.pricing.completion_per_1m
        return (prompt_tokens * prompt + self.completion_tokens * completion) / 1e6


class Selector(Protocol):
    """A decision's compiled selection: its modelRefs, best first, for one request."""

    @property
    def kind(self) -> str: ...  # the algorithm type, for logs

    async def order(self, vector: VectorFn, prompt_tokens: int) -> list[ModelRef]: ...


def ref_inputs(
    refs: Sequence[ModelRef],
    models: ModelIndex,
    known: Sequence[str],
    completion: np.ndarray | None,
    card_quality: dict[str, float],
) -> list[RefInputs]:
    """Each ref's inputs; `known`/`completion`: the models recorded answers know and their
    mean completion tokens (None: no recorded answers)."""
    out = []
    for ref in refs:
        model = models.get(ref.model)
        name = recorded_name(model, known) if model is not None else None
        column = list(known).index(name) if name is not None else None
        out.append(
            RefInputs(
                column=column,
                card_quality=card_quality.get(model.name if model else ref.model, DEFAULT_CARD_QUALITY),
                completion_tokens=_completion_tokens(completion, column),
                pricing=model.pricing if model is not None else None,
            )
        )
    return out


class LearnedSelector:
    """One decision's compiled `algorithm` (knn, mlp or automix) over its modelRefs."""

    def __init__(self, decision: Decision, models: ModelIndex, predictor: QualityModel | None,
                 card_quality: dict[str, float]) -> None:  # fmt: skip
        self.algorithm = decision.algorithm
        self.kind = decision.algorithm.type
        self.refs = list(decision.modelRefs)
        self.predictor = predictor
        known = predictor.models if predictor is not None else ()
        completion = predictor.mean_completion_tokens if predictor is not None else None
        self._inputs = ref_inputs(self.refs, models, known, completion, card_quality)

    async def order(self, vector: VectorFn, prompt_tokens: int) -> list[ModelRef]:
        """The decision's modelRefs, best first, for a request with this vector and prompt size."""
        qualities = await self._qualities(vector)
        candidates = [
            ModelOption(ref, quality, inputs.expected_cost(prompt_tokens))
            for ref, inputs, quality in zip(self.refs, self._inputs, qualities, strict=True)
        ]
        if self.kind == "automix":
            return [c.ref for c in automix_order(candidates, self.algorithm)]
        return [c.ref for c in by_value(candidates, self.algorithm.cost_quality_tradeoff)]

    async def _qualities(self, vector: VectorFn) -> list[float]:
        if self.predictor is None:  # automix without `ml`: the model cards
            return [inputs.card_quality for inputs in self._inputs]
        predicted = self.predictor.predict(await vector())
        mean = float(np.mean(predicted))
        return [mean if i.column is None else float(predicted[i.column]) for i in self._inputs]


def recorded_name(model: ProviderModel, known: Sequence[str]) -> str | None:
    """The name recorded answers know a configured model by: its name, else its provider_model_id."""
    for candidate in (model.name, model.provider_model_id):
        if candidate and candidate in known:
            return candidate
    return None


def _completion_tokens(completion: np.ndarray | None, column: int | None) -> float:
    if completion is None:
        return 256.0  # no recorded answers: a typical chat answer
    return float(completion[column]) if column is not None else float(np.mean(completion))


def values(candidates: Sequence[ModelOption], tradeoff: float) -> list[float]:
    dearest = max((c.cost for c in candidates), default=0.0)
    scale = dearest if dearest > 0 else 1.0
    return [(1.0 - tradeoff) * c.quality - tradeoff * c.cost / scale for c in candidates]


def by_value(candidates: Sequence[ModelOption], tradeoff: float) -> list[ModelOption]:
    scored = values(candidates, tradeoff)
    order = sorted(range(len(candidates)), key=lambda i: (-scored[i], i))  # ties: config order
    return [candidates[i] for i in order]


def automix_order(candidates: Sequence[ModelOption], algorithm: Algorithm) -> list[ModelOption]:
    settings = algorithm.automix or AutomixSettings()
    if not settings.cost_aware_routing:
        return sorted(candidates, key=lambda c: -c.quality)
    ranked = by_value(candidates, settings.cost_quality_tradeoff)
    passing = sorted(
        (c for c in candidates if c.quality >= settings.verification_threshold), key=lambda c: c.cost
    )
    if not passing:
        return ranked
    first = passing[0]
    escalations = sorted(
        (c for c in candidates if c.cost > first.cost and c.quality > first.quality), key=lambda c: c.cost
    )[: settings.max_escalations]
    head = [first, *escalations]
    return head + [c for c in ranked if c not in head]


def compile_selectors(
    decisions: Sequence[Decision], config: RouterConfig, models: ModelIndex
) -> dict[str, Selector]:
    """A selector per decision whose algorithm is knn, mlp or automix (SelectionArtifactError:
    an artifact that cannot be used). A relative artifact path is read from the working
    directory, like the config's other paths."""
    cards = card_qualities(config)
    out: dict[str, Selector] = {}
    for decision in decisions:
        algorithm = decision.algorithm
        if algorithm.type not in LEARNED_TYPES and algorithm.type != "automix":
            continue
        kind = algorithm.type if algorithm.type in LEARNED_TYPES else _automix_family(algorithm)
        predictor = _predictor(algorithm, kind) if kind is not None else None
        out[decision.name] = LearnedSelector(decision, models, predictor, cards)
    return out


def _automix_family(algorithm: Algorithm) -> str | None:
    ml = algorithm.ml
    if ml is None:
        return None
    return "mlp" if ml.mlp is not None else "knn"


def _predictor(algorithm: Algorithm, kind: str) -> QualityModel:
    ml = algorithm.ml
    family = getattr(ml, kind, None) if ml is not None else None
    path = packaged_artifact(kind)
    if family is not None and family.pretrained_path:
        path = Path(family.pretrained_path)
    elif ml is not None and ml.models_path:
        path = Path(ml.models_path) / (KNN_FILE if kind == "knn" else MLP_FILE)
    model = load_quality_model(path, kind)
    if isinstance(model, KnnQuality) and family is not None:
        model = model.with_k(getattr(family, "k", None))
    return model


def card_qualities(config: RouterConfig) -> dict[str, float]:
    out: dict[str, float] = {}
    for card in config.routing.modelCards:
        name, score = card.get("name"), card.get("quality_score")
        if isinstance(name, str) and isinstance(score, int | float):
            out[name] = float(score)
    return out
