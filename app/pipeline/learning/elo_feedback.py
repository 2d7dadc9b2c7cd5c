"""How an outcome (POST /api/v1/observability/outcomes) updates the Elo ratings of an
`algorithm.type: elo` decision.

The replay record named by `replay_id` says which decision routed the request and which
model answered (`served_model`, else `selected_model`). Only a decision of the active
configuration whose type is elo learns; any other outcome is stored as before and rates
nothing.

The result, for the outcome's subject:
- `score` in [0, 1] when given (1 win/good, 0 loss/bad, 0.5 a tie; fractions allowed);
- else the verdict word (case and `-`/space insensitive): good, correct, win, thumbs_up,
  accepted, ... count 1; bad, wrong, loss, thumbs_down, rejected, ... count 0; tie, draw,
  neutral, ... count 0.5 (`replays.VERDICTS`, with `outcome_score`);
- neither (another word, a score outside [0, 1]): no rating moves.

The game:
- `target` names another model of the decision: a pairwise comparison, the target against
  the model that answered, the result the target's ("preferred"/"win" = the target was
  better). Both ratings move, zero-sum.
- otherwise (`target` is the answering model, or the response, or anything else): the
  answering model plays the anchor (`initial_rating`, a fixed virtual opponent), so a
  verdict on one answer moves only the model that gave it.

Each game is played in every scope the decision writes (its own and `_global` when
`category_weighted`, else `_global`) with its `k_factor`, and stored in one atomic update
(app/pipeline/learning/ratings.py). An idempotent replay of an outcome rates nothing again. A store
that fails leaves the ratings as they were; the outcome itself is still answered as before.
"""

from __future__ import annotations

import logging
from typing import Any

from app.config.document import RouterConfig
from app.models.elo import Game
from app.pipeline.elo_selector import EloDecision, elo_decision
from app.pipeline.learning.ratings import RatingStore
from app.pipeline.selection import ModelIndex
from app.replays.replays import OutcomeIn, outcome_score

log = logging.getLogger("svc_sr.management")


def outcome_games(config: RouterConfig, record: dict[str, Any], outcome: OutcomeIn) -> list[Game]:
    """The games `outcome` on the request `record` plays (none: it rates nothing)."""
    decision = next((d for d in config.routing.decisions if d.name == record.get("decision")), None)
    if decision is None or decision.algorithm.type != "elo":
        return []
    result = outcome_score(outcome.verdict, outcome.score)
    elo = elo_decision(decision, ModelIndex(config))
    answered = _answering_model(elo, record)
    if result is None or answered is None:
        return []
    k = elo.settings.k_factor
    if outcome.target in elo.models and outcome.target != answered:
        return [
            Game(
                scope,
                outcome.target,
                result,
                k,
                elo.starts[scope][outcome.target],
                answered,
                elo.starts[scope][answered],
            )  # fmt: skip
            for scope in elo.write_scopes
        ]
    return [
        Game(scope, answered, result, k, elo.starts[scope][answered], None, elo.anchor)
        for scope in elo.write_scopes
    ]


def _answering_model(elo: EloDecision, record: dict[str, Any]) -> str | None:
    """The decision's model that answered (a fallback's model when one served)."""
    for key in ("served_model", "selected_model"):
        if record.get(key) in elo.models:
            return str(record[key])
    return None


def rate_outcome(store: RatingStore, config: RouterConfig, record: dict[str, Any], outcome: OutcomeIn) -> int:
    """Apply the outcome's games (blocking: call it in a thread); how many were played.
    Never raises: a store that fails is logged and the ratings stay as they were."""
    try:
        games = outcome_games(config, record, outcome)
        if games:
            store.apply(games)
        return len(games)
    except Exception as exc:  # the outcome is stored already; a rating must never fail it
        log.warning("outcome for replay %s: elo ratings not updated (%s)", outcome.replay_id, exc)
        return 0
