"""A decision's `algorithm` block: how the model that answers is chosen among its modelRefs.

Field names follow the reference router's where it has the feature (its `algorithm.ml`
block with one family per type, `automix`, `elo`); what svc-sr adds is marked.

- `static` (default): the first modelRef; `weighted`: drawn by `modelRefs[].weight`.
- `knn` / `mlp`: a learned predictor of each model's chance to answer the request right
  (app/models/selection.py) against its expected cost, `cost_quality_tradeoff` weighing the
  two (svc-sr's addition: the reference's learned types ignore cost).
- `mf` (svc-sr): matrix factorisation of recorded outcomes over the request's vector, with a
  neighbour vote, calibrated, predicting each model's completion tokens too
  (app/models/quality_mf.py); `budget_per_1k` sets what 1,000 requests may cost on average,
  else `cost_quality_tradeoff` as for knn/mlp.
- `automix`: the cheapest model expected to pass verification (`verification_threshold`),
  else the best quality-minus-cost value; quality from the learned predictor when `ml` is
  set, else the model cards' `quality_score`.
- `elo`: Elo ratings learned online from the outcomes feedback route (app/models/elo.py,
  app/pipeline/learning/elo_feedback.py), quality = the rating's expected score against
  `initial_rating`, weighed against expected cost like knn/mlp.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from app.config.model_base import Open, Strict

AlgorithmType = Literal["static", "weighted", "knn", "mlp", "mf", "automix", "elo"]
LEARNED_TYPES = frozenset({"knn", "mlp", "mf"})


class KnnSettings(Open):
    k: int = Field(default=40, ge=1, le=1000)
    pretrained_path: str | None = None  # unset: the artifact svc-sr ships


class MlpSettings(Open):
    device: Literal["cpu", "cuda", "metal"] = "cpu"  # accepted; the head runs on CPU (numpy)
    pretrained_path: str | None = None


class MfSettings(Open):
    """svc-sr's `mf` family (app/models/quality_mf.py)."""

    pretrained_path: str | None = None  # unset: the artifact svc-sr ships


class MLSelection(Open):
    """The reference's `algorithm.ml`: the learned family named by `type`, one of them."""

    models_path: str | None = None  # a directory holding knn_model.npz / mlp_model.npz / mf_model.npz
    model_type: str | None = None  # accepted: svc-sr's selectors run on its MiniLM vectors
    embedding_dim: int | None = Field(default=None, ge=1)
    knn: KnnSettings | None = None
    mlp: MlpSettings | None = None
    mf: MfSettings | None = None


class AutomixSettings(Open):
    verification_threshold: float = Field(default=0.7, ge=0, le=1)
    max_escalations: int = Field(default=2, ge=0)
    cost_aware_routing: bool = True
    cost_quality_tradeoff: float = Field(default=0.3, ge=0, le=1)  # 0: quality only, 1: cost only
    discount_factor: float = Field(default=0.95, ge=0, le=1)  # accepted; no multi-step cascade here
    use_logprob_verification: bool = True  # accepted; verification is predicted, not run


class EloSettings(Strict):
    """The reference's `algorithm.elo` block (strict: a typo is refused with its path)."""

    # The anchor: every model starts here, and a rating reads as the chance of a good answer
    # against it (app/models/elo.py).
    initial_rating: float = Field(default=1500.0, ge=0, le=10_000, allow_inf_nan=False)
    k_factor: float = Field(default=32.0, ge=0, le=1000, allow_inf_nan=False)  # per outcome
    category_weighted: bool = True  # ratings of this decision's own (else shared by every elo decision)
    # Accepted, not used: svc-sr keeps every outcome's update (no time decay), orders by rating
    # whatever the count, weighs cost by `algorithm.cost_quality_tradeoff`, and keeps ratings
    # in the management store (state directory or Redis), written at each outcome.
    decay_factor: float = Field(default=0.0, ge=0, le=1)
    min_comparisons: int = Field(default=5, ge=0)
    cost_scaling_factor: float = Field(default=0.0, ge=0)
    storage_path: str | None = None
    auto_save_interval: str | None = None
    # svc-sr: starting ratings per model (and per decision name) derived from recorded answers
    # (scripts/train_selectors.py); unset: every model starts at initial_rating.
    initial_ratings_path: str | None = None


class Algorithm(Open):
    type: AlgorithmType = "static"
    ml: MLSelection | None = None
    automix: AutomixSettings | None = None
    elo: EloSettings | None = None
    # svc-sr: knn/mlp/mf/elo's weight of expected cost against quality (0: quality only).
    cost_quality_tradeoff: float = Field(default=0.0, ge=0, le=1)
    # svc-sr, `mf` only: what 1,000 requests may cost on average, in the pricing's currency.
    # The price of quality that spends it on the predictor's reference questions is found when
    # the config compiles (app/pipeline/selectors.py); it replaces cost_quality_tradeoff.
    budget_per_1k: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    on_error: Literal["skip", "fail", "fallback"] = "skip"  # a predictor that fails: static order

    @model_validator(mode="after")
    def _family_matches_type(self) -> Algorithm:
        if self.ml is not None:
            named = [family for family in ("knn", "mlp", "mf") if getattr(self.ml, family) is not None]
            if len(named) > 1:
                raise ValueError(f"algorithm.ml names {named}; it takes the one family `type` names")
            if named and self.type in LEARNED_TYPES and named[0] != self.type:
                raise ValueError(f"algorithm.type is {self.type!r} but algorithm.ml configures {named[0]!r}")
        if self.budget_per_1k is not None and self.type != "mf":
            raise ValueError(f"algorithm.budget_per_1k needs algorithm.type 'mf' (not {self.type!r})")
        return self
