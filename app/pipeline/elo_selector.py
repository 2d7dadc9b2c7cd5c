"""`algorithm.type: elo`: a decision's modelRefs ordered by Elo ratings learned online from
the outcomes feedback route, weighed against expected cost like knn/mlp.

Quality of a candidate = its rating's expected score against the anchor (`initial_rating`):
the chance of a good answer (app/models/elo.py). Value and order are knn/mlp's
(`by_value`: `(1 - t) * quality - t * cost / dearest_cost`, t = `cost_quality_tradeoff`), so
t = 0 is "best rating first". A model without a stored rating in the decision's scope starts
at its initial rating: `initial_ratings_path`'s table for the decision's name (else its
overall table), else `initial_rating`.

Where the ratings come from: `PipelineServices.ratings`, a `RatingsFeed` over the management
store's ratings (app/pipeline/learning/ratings.py), the same for every Router replica. A request
never waits for the store: the feed hands out the last document it read and, when that is
older than `refresh_s`, checks the store's revision in the background (a thread). A store
that is down or slow leaves the last ratings read (or, before any, the initial ones) and
is logged once until it answers again. Without a feed (`svc-sr benchmark`, tests) the
initial ratings serve.

`EloDecision` is what both sides agree on: the scope a decision reads, the scopes an
outcome of it writes (its own and `_global` when `category_weighted`, `_global` alone
otherwise, as the reference updates both) and every model's starting rating in each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.common.background import BackgroundTasks
from app.config.routing import Decision, ModelRef
from app.config.selection import EloSettings
from app.models.elo import (
    GLOBAL_SCOPE,
    InitialRatings,
    RatingsDocument,
    RatingSource,
    load_initial_ratings,
    quality,
)
from app.pipeline.selection import ModelIndex
from app.pipeline.selectors import (
    ModelOption,
    RefInputs,
    Selector,
    VectorFn,
    by_value,
    recorded_name,
    ref_inputs,
)

log = logging.getLogger("svc_sr.pipeline")

RATINGS_REFRESH_S = 1.0  # how stale a Router replica's ratings may get (one revision read)


class RatingsFeed:
    """The ratings a Router replica last read from its `RatingSource` (see the module doc)."""

    def __init__(
        self,
        source: RatingSource,
        refresh_s: float = RATINGS_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.refresh_s = refresh_s
        self._clock = clock
        self._document = RatingsDocument()
        self._checked_at: float | None = None
        self._tasks = BackgroundTasks()
        self._failing = False

    def current(self) -> RatingsDocument:
        """The last document read; starts a background refresh when it is older than
        `refresh_s` and none runs (call it on the event loop)."""
        now = self._clock()
        if not self._tasks and (self._checked_at is None or now - self._checked_at >= self.refresh_s):
            self._checked_at = now
            self._tasks.spawn(self.refresh())
        return self._document

    async def refresh(self) -> None:
        """Read the store's revision and, when it differs from the document's, the document;
        a store that fails leaves the last document."""
        self._checked_at = self._clock()
        try:
            if await asyncio.to_thread(self.source.revision) != self._document.revision:
                self._document = await asyncio.to_thread(self.source.load)
        except Exception as exc:  # the store down, slow or corrupt: keep routing on what we have
            if not self._failing:
                log.warning("elo ratings not refreshed (%s); selecting with the last ratings read", exc)
            self._failing = True
            return
        if self._failing:
            log.info("elo ratings readable again (revision %d)", self._document.revision)
        self._failing = False

    async def drain(self) -> None:
        """Wait for a refresh in flight (tests, shutdown)."""
        await self._tasks.drain()


@dataclass(frozen=True)
class EloDecision:
    """A decision's Elo settings resolved once per config version (see the module doc)."""

    name: str
    settings: EloSettings
    models: tuple[str, ...]  # the modelRefs' model names
    starts: dict[str, dict[str, float]]  # scope -> model -> starting rating
    initial: InitialRatings | None = None  # the `initial_ratings_path` artifact

    @property
    def anchor(self) -> float:
        return self.settings.initial_rating

    @property
    def read_scope(self) -> str:
        return self.name if self.settings.category_weighted else GLOBAL_SCOPE

    @property
    def write_scopes(self) -> tuple[str, ...]:
        return (self.name, GLOBAL_SCOPE) if self.settings.category_weighted else (GLOBAL_SCOPE,)

    def rating(self, document: RatingsDocument | None, model: str) -> float:
        """The model's rating in the read scope: stored, else its start."""
        stored = document.rating(self.read_scope, model) if document is not None else None
        return stored if stored is not None else self.starts[self.read_scope][model]


def elo_decision(decision: Decision, models: ModelIndex) -> EloDecision:
    """SelectionArtifactError: an `initial_ratings_path` that cannot be read."""
    settings = decision.algorithm.elo or EloSettings()
    initial = _initial(settings)
    names = tuple(dict.fromkeys(ref.model for ref in decision.modelRefs))
    known = tuple(initial.mean_completion_tokens) if initial is not None else ()
    aliases = {name: _recorded(name, models, known) for name in names}
    scopes = (decision.name, GLOBAL_SCOPE)
    starts = {
        scope: (
            initial.starting(None if scope == GLOBAL_SCOPE else scope, aliases, settings.initial_rating)
            if initial is not None
            else dict.fromkeys(names, settings.initial_rating)
        )
        for scope in scopes
    }
    return EloDecision(decision.name, settings, names, starts, initial)


def _initial(settings: EloSettings) -> InitialRatings | None:
    if not settings.initial_ratings_path:
        return None
    return load_initial_ratings(Path(settings.initial_ratings_path))


def _recorded(name: str, models: ModelIndex, known: Sequence[str]) -> str:
    model = models.get(name)
    return (recorded_name(model, known) if model is not None else None) or name


class EloSelector:
    """One `elo` decision's selection (Selector): by rating and expected cost."""

    kind = "elo"

    def __init__(self, decision: Decision, models: ModelIndex, feed: RatingsFeed | None) -> None:
        self.elo = elo_decision(decision, models)
        self.refs = list(decision.modelRefs)
        self.tradeoff = decision.algorithm.cost_quality_tradeoff
        self.feed = feed
        # Each model's mean recorded completion (the expected-cost input); none recorded: 256.
        tokens = self.elo.initial.mean_completion_tokens if self.elo.initial is not None else {}
        completion = np.array(list(tokens.values()), dtype=np.float64) if tokens else None
        self._inputs: list[RefInputs] = ref_inputs(self.refs, models, tuple(tokens), completion, {})

    async def order(self, vector: VectorFn, prompt_tokens: int) -> list[ModelRef]:
        """The modelRefs, best first (the request's vector is not needed)."""
        del vector
        document = self.feed.current() if self.feed is not None else None
        candidates = [
            ModelOption(
                ref,
                quality(self.elo.rating(document, ref.model), self.elo.anchor),
                inputs.expected_cost(prompt_tokens),
            )
            for ref, inputs in zip(self.refs, self._inputs, strict=True)
        ]
        return [c.ref for c in by_value(candidates, self.tradeoff)]


def compile_elo_selectors(
    decisions: Sequence[Decision], models: ModelIndex, feed: RatingsFeed | None
) -> dict[str, Selector]:
    """A selector per decision whose algorithm is elo."""
    return {d.name: EloSelector(d, models, feed) for d in decisions if d.algorithm.type == "elo"}
