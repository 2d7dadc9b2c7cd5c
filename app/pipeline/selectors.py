"""Learned and cost-aware model selection: a decision's `algorithm` types `knn`, `mlp`, `mf`
and `automix` (app/config/selection.py) ordering its modelRefs for one request.

Each candidate gets a predicted quality (its chance to answer right: the learned predictor
of app/models/selection.py over the request's MiniLM vector, or the model cards'
`quality_score`) and an expected cost (this request's prompt tokens and the model's expected
completion tokens at the config's pricing: `mf` predicts them for the request, the others
use the model's mean). Costs are compared as a share of the dearest candidate's, so
`cost_quality_tradeoff` means the same whatever the price level:
`value = (1 - t) * quality - t * cost / dearest_cost`.

- knn / mlp / mf: candidates by value, best first.
- mf with `budget_per_1k`: `value = quality - price * cost`, the price of quality (accuracy
  per unit of money) found when the config compiles so that the decision's choices on the
  predictor's reference questions cost `budget_per_1k / 1000` a request on average
  (`budget_price`): the knob is money, for this decision's candidates at its pricing.
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
from app.models.quality_mf import FactorQuality
from app.models.selection import (
    ARTIFACT_FILES,
    KnnQuality,
    QualityModel,
    SelectionArtifactError,
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

    def expected_cost(self, prompt_tokens: float, completion_tokens: float | None = None) -> float:
        """This request's prompt and the model's expected completion (given, else its mean) at
        the model's pricing."""
        if self.pricing is None:
            return 0.0
        tokens = self.completion_tokens if completion_tokens is None else completion_tokens
        prompt, completion = self.pricing.prompt_per_1m, self.pricing.completion_per_1m
        return (prompt_tokens * prompt + tokens * completion) / 1e6


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
    """One decision's compiled `algorithm` (knn, mlp, mf or automix) over its modelRefs."""

    def __init__(self, decision: Decision, models: ModelIndex, predictor: QualityModel | None,
                 card_quality: dict[str, float]) -> None:  # fmt: skip
        self.algorithm = decision.algorithm
        self.kind = decision.algorithm.type
        self.refs = list(decision.modelRefs)
        self.predictor = predictor
        known = predictor.models if predictor is not None else ()
        completion = predictor.mean_completion_tokens if predictor is not None else None
        self._inputs = ref_inputs(self.refs, models, known, completion, card_quality)
        budget = self.algorithm.budget_per_1k
        self.price = None if budget is None else budget_price(predictor, self._inputs, budget / 1000)

    async def order(self, vector: VectorFn, prompt_tokens: int) -> list[ModelRef]:
        """The decision's modelRefs, best first, for a request with this vector and prompt size."""
        qualities, tokens = await self._estimates(vector)
        candidates = [
            ModelOption(ref, quality, inputs.expected_cost(prompt_tokens, completion))
            for ref, inputs, quality, completion in zip(
                self.refs, self._inputs, qualities, tokens, strict=True
            )
        ]
        if self.kind == "automix":
            return [c.ref for c in automix_order(candidates, self.algorithm)]
        if self.price is not None:
            return [c.ref for c in by_price(candidates, self.price)]
        return [c.ref for c in by_value(candidates, self.algorithm.cost_quality_tradeoff)]

    async def _estimates(self, vector: VectorFn) -> tuple[list[float], list[float | None]]:
        """Each ref's predicted quality and expected completion tokens (None: the ref's mean)."""
        if self.predictor is None:  # automix without `ml`: the model cards
            return [inputs.card_quality for inputs in self._inputs], [None] * len(self._inputs)
        predicted, tokens = self.predictor.estimate(await vector())
        return columns(self._inputs, predicted, tokens)


def columns(
    inputs: Sequence[RefInputs], predicted: np.ndarray, tokens: np.ndarray
) -> tuple[list[float], list[float | None]]:
    """Each ref's column of a prediction; a model the predictor does not know gets the mean
    quality and its own mean completion tokens."""
    mean = float(np.mean(predicted))
    qualities = [mean if i.column is None else float(predicted[i.column]) for i in inputs]
    return qualities, [None if i.column is None else float(tokens[i.column]) for i in inputs]


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
    return _ranked(candidates, values(candidates, tradeoff))


def by_price(candidates: Sequence[ModelOption], price: float) -> list[ModelOption]:
    """By quality minus `price` times cost (price inf: the cheapest first, by quality on ties)."""
    if np.isinf(price):
        return sorted(candidates, key=lambda c: (c.cost, -c.quality))
    return _ranked(candidates, [c.quality - price * c.cost for c in candidates])


def _reference_cost(inputs: RefInputs, prompt: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """A ref's expected cost on each reference question (vectorised `expected_cost`)."""
    if inputs.pricing is None:
        return np.zeros(len(prompt))
    completion = tokens[:, inputs.column] if inputs.column is not None else inputs.completion_tokens
    out: np.ndarray = (
        prompt * inputs.pricing.prompt_per_1m + completion * inputs.pricing.completion_per_1m
    ) / 1e6
    return out


def _ranked(candidates: Sequence[ModelOption], scored: Sequence[float]) -> list[ModelOption]:
    order = sorted(range(len(candidates)), key=lambda i: (-scored[i], i))  # ties: config order
    return [candidates[i] for i in order]


def budget_price(predictor: QualityModel | None, inputs: Sequence[RefInputs], budget: float) -> float:
    """The least price of quality at which choosing `argmax quality - price * cost` on the
    predictor's reference questions costs at most `budget` a request on average (0: the best
    quality is within budget; inf: even the cheapest choices are not, so the cheapest it is).
    Spend falls as the price rises, so a bisection on a log scale finds it."""
    reference = predictor.reference if isinstance(predictor, FactorQuality) else None
    if reference is None:
        raise SelectionArtifactError("budget_per_1k needs an mf artifact with a reference set")
    mean = reference.quality.mean(axis=1)
    q = np.column_stack([mean if i.column is None else reference.quality[:, i.column] for i in inputs])
    c = np.column_stack(
        [_reference_cost(i, reference.prompt_tokens, reference.completion_tokens) for i in inputs]
    )
    rows = np.arange(len(q))

    def spend(price: float) -> float:
        return float(c[rows, np.argmax(q - price * c, axis=1)].mean())

    if spend(0.0) <= budget:
        return 0.0
    low, high = 1e-3, 1e9
    if spend(high) > budget:
        return float("inf")
    for _ in range(60):
        middle = float(np.sqrt(low * high))
        low, high = (low, middle) if spend(middle) <= budget else (middle, high)
    return high


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
    return "mlp" if ml.mlp is not None else "mf" if ml.mf is not None else "knn"


def _predictor(algorithm: Algorithm, kind: str) -> QualityModel:
    ml = algorithm.ml
    family = getattr(ml, kind, None) if ml is not None else None
    path = packaged_artifact(kind)
    if family is not None and family.pretrained_path:
        path = Path(family.pretrained_path)
    elif ml is not None and ml.models_path:
        path = Path(ml.models_path) / ARTIFACT_FILES[kind]
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
