"""Elo ratings of the models a decision chooses from (`algorithm.type: elo`): the rating
math, the stored ratings document and the starting ratings derived from recorded answers.

The model is Bradley-Terry on the Elo scale: a model rated `a` beats one rated `b` with
probability `expected(a, b) = 1 / (1 + 10 ** ((b - a) / 400))`, and a game moves a rating
by `k * (score - expected)` (score 1 win, 0 loss, 0.5 tie; fractions are allowed).

The anchor: a verdict on one answer ("good", "wrong") says nothing about the models that
did not answer, so it is a game against a fixed virtual opponent rated `initial_rating`
(the anchor), which never moves. A rating then reads as the chance of a good answer:
`quality(r) = expected(r, anchor)`, 0.5 at the anchor; a model judged good 70 % of the time
settles where quality is 0.7 (about anchor + 147). Pairwise games (one model preferred to
another) move both on the same scale. That quality is what the selector weighs against
cost, like knn/mlp's predicted chance of a right answer.

Ratings live per scope: a decision's name (`category_weighted`) and `_global` (shared by
every elo decision that is not category weighted). `RatingsDocument` is the one document a
store keeps (app/pipeline/learning/ratings.py); `apply_games` is the only code that changes it.

`InitialRatings`: per-model starting ratings, overall and per category (a decision whose name
is a category starts from that category's table), with each model's mean completion tokens
(the expected-cost input); scripts/train_selectors.py writes them from recorded answers as
the ratings the online update settles at on those outcomes: anchor + 400 log10(p / (1 - p)),
p each model's (smoothed) share of right answers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field, ValidationError

from app.common.persist import atomic_write_bytes
from app.models.selection import ARTIFACT_DIR, SelectionArtifactError

GLOBAL_SCOPE = "_global"
ELO_FILE = "elo_ratings.json"
SCALE = 400.0  # Elo's: 400 points = 10:1 odds
EXPONENT_LIMIT = 300.0  # 10 ** 300: a certain result already, and no float overflow
QUALITY_CLIP = 0.01  # a starting quality of 0 or 1 would be an infinite rating


class Rating(BaseModel):
    rating: float
    games: int = 0
    wins: int = 0
    losses: int = 0
    ties: int = 0


class RatingsDocument(BaseModel):
    """Every stored rating: scope -> model -> rating; `revision` counts the updates."""

    revision: int = 0
    ratings: dict[str, dict[str, Rating]] = Field(default_factory=dict)

    def rating(self, scope: str, model: str) -> float | None:
        found = self.ratings.get(scope, {}).get(model)
        return found.rating if found is not None else None


class RatingSource(Protocol):
    """What a selector reads: the store's revision (cheap: a stat or one GET) and the
    document. Both may block and may raise when the store is down (the caller degrades)."""

    def revision(self) -> int: ...

    def load(self) -> RatingsDocument: ...


@dataclass(frozen=True)
class Game:
    """One rated game in `scope`: `player` scored `score` against `opponent` (None: the
    anchor, a virtual player fixed at `opponent_rating`). A model the scope has no rating
    for yet starts at `start` (the player) or `opponent_rating` (the opponent)."""

    scope: str
    player: str
    score: float
    k: float
    start: float
    opponent: str | None
    opponent_rating: float


def expected(rating: float, opponent: float) -> float:
    """The chance that a model rated `rating` beats one rated `opponent`."""
    exponent = min(max((opponent - rating) / SCALE, -EXPONENT_LIMIT), EXPONENT_LIMIT)
    return 1.0 / (1.0 + 10.0**exponent)


def quality(rating: float, anchor: float) -> float:
    """A rating as the chance of a good answer (its expected score against the anchor)."""
    return expected(rating, anchor)


def rating_for(share: float, anchor: float) -> float:
    """The rating whose quality is `share` (clipped to [0.01, 0.99])."""
    p = min(max(share, QUALITY_CLIP), 1.0 - QUALITY_CLIP)
    return anchor + SCALE * math.log10(p / (1.0 - p))


def apply_games(document: RatingsDocument, games: Iterable[Game]) -> RatingsDocument:
    """`document` after `games`, in order, as the next revision (the input is not changed)."""
    out = document.model_copy(deep=True)
    for game in games:
        table = out.ratings.setdefault(game.scope, {})
        player = table.setdefault(game.player, Rating(rating=game.start))
        rival = (
            table.setdefault(game.opponent, Rating(rating=game.opponent_rating)) if game.opponent else None
        )
        delta = game.k * (
            game.score - expected(player.rating, rival.rating if rival else game.opponent_rating)
        )
        player.rating += delta
        _count(player, game.score)
        if rival is not None:
            rival.rating -= delta  # zero-sum: what one gains the other loses
            _count(rival, 1.0 - game.score)
    out.revision = document.revision + 1
    return out


def _count(rating: Rating, score: float) -> None:
    rating.games += 1
    if score > 0.5:
        rating.wins += 1
    elif score < 0.5:
        rating.losses += 1
    else:
        rating.ties += 1


# ------------------------------------------------------------------ starting ratings


class InitialRatings(BaseModel):
    """The artifact: ratings relative to `anchor`; a config's `initial_rating` shifts them."""

    format: int = 1
    kind: str = "elo"
    anchor: float = 1500.0
    overall: dict[str, float] = Field(default_factory=dict)
    categories: dict[str, dict[str, float]] = Field(default_factory=dict)
    mean_completion_tokens: dict[str, float] = Field(default_factory=dict)
    meta: dict[str, object] = Field(default_factory=dict)

    def starting(self, category: str | None, models: Mapping[str, str], anchor: float) -> dict[str, float]:
        """Each model's starting rating: `category`'s table when the artifact has one, else
        the overall one, moved to `anchor`; `models`: a configured name -> the name the
        artifact knows it by; a model it does not know starts at the anchor."""
        table = self.categories.get(category, self.overall) if category else self.overall
        shift = anchor - self.anchor
        return {name: table[known] + shift if known in table else anchor for name, known in models.items()}


def initial_ratings_from(
    outcomes: Mapping[str, Sequence[bool]],
    categories: Sequence[str],
    completion_tokens: Mapping[str, float],
    anchor: float = 1500.0,
    meta: Mapping[str, object] | None = None,
) -> InitialRatings:
    """Starting ratings from recorded answers: `outcomes[model][i]` is whether the model
    answered question i right, `categories[i]` that question's category. Each rating is
    where the online update settles on those outcomes, with one pseudo-right and one
    pseudo-wrong answer so a small category never says 0 or 1."""

    def table(rows: Sequence[int]) -> dict[str, float]:
        return {
            model: round(rating_for((sum(right[i] for i in rows) + 1) / (len(rows) + 2), anchor), 2)
            for model, right in outcomes.items()
        }

    every = range(len(categories))
    by_category: dict[str, list[int]] = {}
    for i, category in enumerate(categories):
        by_category.setdefault(category, []).append(i)
    return InitialRatings(
        anchor=anchor,
        overall=table(every),
        categories={name: table(rows) for name, rows in sorted(by_category.items())},
        mean_completion_tokens={m: round(float(v), 1) for m, v in completion_tokens.items()},
        meta=dict(meta or {}),
    )


def save_initial_ratings(path: Path, ratings: InitialRatings) -> None:
    atomic_write_bytes(path, ratings.model_dump_json(indent=1).encode("utf-8"))


def load_initial_ratings(path: Path) -> InitialRatings:
    """The artifact at `path` (cached by path and modification time; SelectionArtifactError
    when missing or not one)."""
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as exc:
        raise SelectionArtifactError(f"elo initial ratings {path} not found") from exc
    return _load(str(path), stamp)


@lru_cache(maxsize=16)
def _load(path: str, stamp: int) -> InitialRatings:
    del stamp  # part of the cache key: a rewritten file is read again
    try:
        ratings = InitialRatings.model_validate_json(Path(path).read_bytes())
    except (OSError, ValidationError) as exc:
        raise SelectionArtifactError(f"{path} is not an elo ratings artifact: {exc}") from exc
    if ratings.kind != "elo":
        raise SelectionArtifactError(f"{path} holds a {ratings.kind!r} artifact, not 'elo'")
    return ratings


def packaged_initial_ratings() -> Path:
    """The starting ratings svc-sr ships (MMLU-Pro's recorded answers of ten models)."""
    return ARTIFACT_DIR / ELO_FILE
