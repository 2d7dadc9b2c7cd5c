"""The `mf` quality predictor: matrix factorisation of recorded outcomes over question
embeddings and learned model embeddings (RouteLLM's MF, pointwise), blended with a neighbour
vote and calibrated. It answers, for one request's MiniLM vector, each model's chance of a
right answer and its expected completion tokens (the cost input).

- **Question embedding** e(x): the router's MiniLM vector, standardised, through one GELU layer
  to `rank` dimensions (the trunk). Each model m has a quality vector v_m and bias c_m (its
  logit is e(x) . v_m + c_m) and a length vector u_m and bias a_m (its standardised log
  completion tokens). Models share the trunk, so a new model is one small head fitted on e(x)
  (`app/pipeline/learning/quality_fit.py` `add_model`), the rest untouched.
- **Neighbour vote**: app/models/selection.py's `KnnQuality` over the training questions; its
  logit is blended into the MF logit per model (`blend`: 0 for a model the vote has no record of).
- **Calibration**: per model, `slope * blended logit + intercept` (Platt), fitted on questions
  the trunk did not train on, so a 0.7 means right 7 times in 10 (docs/model-cards/
  model-selection.md has the reliability diagram).
- **Reference set**: calibrated predictions and expected tokens for held-back training questions,
  so a decision's `budget_per_1k` can be turned into a price of quality when the config compiles
  (app/pipeline/selectors.py), for that decision's candidates at its pricing.

numpy only at run time; about 0.2 ms a request on one core (bench/bench_selection.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

MF_FILE = "mf_model.npz"
_SQRT_2_OVER_PI = 0.7978845608


class Voter(Protocol):
    """The neighbour vote (app/models/selection.py's KnnQuality)."""

    def predict_many(self, vectors: np.ndarray) -> np.ndarray: ...


def gelu(x: np.ndarray) -> np.ndarray:
    """tanh-approximated GELU (the trainer's too: training and serving must agree)."""
    out: np.ndarray = 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    return out


def sigmoid(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(x, -30.0, 30.0)))
    return out


def logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-4, 1 - 1e-4)
    out: np.ndarray = np.log(q / (1 - q))
    return out


@dataclass(frozen=True)
class Trunk:
    """The question embedding e(x) = gelu(((x - center) / scale) W1 + b1) W2 + b2."""

    center: np.ndarray  # (d,)
    scale: np.ndarray  # (d,)
    w1: np.ndarray  # (d, hidden)
    b1: np.ndarray  # (hidden,)
    w2: np.ndarray  # (hidden, rank)
    b2: np.ndarray  # (rank,)

    def embed(self, vectors: np.ndarray) -> np.ndarray:
        z = (np.atleast_2d(vectors).astype(np.float32) - self.center) / self.scale
        out: np.ndarray = gelu(z @ self.w1 + self.b1) @ self.w2 + self.b2
        return out


@dataclass(frozen=True)
class Heads:
    """Per-model heads on e(x): quality logits and standardised log completion tokens."""

    quality: np.ndarray  # (rank, m)
    quality_bias: np.ndarray  # (m,)
    length: np.ndarray  # (rank, m)
    length_bias: np.ndarray  # (m,)
    length_center: np.ndarray  # (m,) mean of log1p(tokens)
    length_scale: np.ndarray  # (m,) its standard deviation
    length_smear: np.ndarray  # (m,) mean exp(residual): E[tokens], not exp(E[log tokens])
    slope: np.ndarray  # (m,) calibration
    intercept: np.ndarray  # (m,)
    blend: np.ndarray  # (m,) weight of the neighbour vote's logit (0: MF alone)

    @property
    def count(self) -> int:
        return int(self.quality_bias.shape[0])

    def estimate(self, e: np.ndarray, voted: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Calibrated chances and expected tokens from embeddings `e` (and the vote's
        probabilities as logits, for its first columns: models added later have none)."""
        raw = e @ self.quality + self.quality_bias
        if voted is not None:
            known = voted.shape[1]
            raw[:, :known] = (1 - self.blend[:known]) * raw[:, :known] + self.blend[:known] * voted
        quality = sigmoid(self.slope * raw + self.intercept)
        log_tokens = (e @ self.length + self.length_bias) * self.length_scale + self.length_center
        tokens = np.maximum(np.exp(log_tokens) * self.length_smear - 1.0, 0.0)
        return quality, tokens


@dataclass(frozen=True)
class Reference:
    """Held-back training questions as the predictor saw them: what a budget is computed on."""

    quality: np.ndarray  # (n, m) calibrated probabilities
    completion_tokens: np.ndarray  # (n, m) expected
    prompt_tokens: np.ndarray  # (n,)
    embedding: np.ndarray  # (n, rank) e(x): a model added later gets its columns from it


@dataclass(frozen=True)
class FactorQuality:
    models: tuple[str, ...]
    mean_completion_tokens: np.ndarray  # (m,) over the training questions (the fallback)
    trunk: Trunk
    heads: Heads
    neighbours: Voter | None  # its columns are the first models' (added ones have no vote)
    reference: Reference | None

    def predict(self, vector: np.ndarray) -> np.ndarray:
        return self.estimate_many(vector)[0][0]

    def estimate(self, vector: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(m,) chances of a right answer and (m,) expected completion tokens."""
        quality, tokens = self.estimate_many(vector)
        return quality[0], tokens[0]

    def estimate_many(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e = self.trunk.embed(vectors)
        voted = logit(self.neighbours.predict_many(vectors)) if self.neighbours is not None else None
        return self.heads.estimate(e, voted)


def mf_arrays(model: FactorQuality) -> dict[str, Any]:
    """The artifact's arrays (app/models/selection.py writes them with the header)."""
    t, h = model.trunk, model.heads
    arrays: dict[str, Any] = {
        "center": t.center, "scale": t.scale, "w1": t.w1.astype(np.float16), "b1": t.b1,
        "w2": t.w2.astype(np.float16), "b2": t.b2,
        "quality": h.quality, "quality_bias": h.quality_bias, "length": h.length,
        "length_bias": h.length_bias, "length_center": h.length_center, "length_scale": h.length_scale,
        "length_smear": h.length_smear, "slope": h.slope, "intercept": h.intercept, "blend": h.blend,
    }  # fmt: skip
    if model.reference is not None:
        arrays["ref_quality"] = model.reference.quality.astype(np.float16)
        arrays["ref_tokens"] = model.reference.completion_tokens.astype(np.float32)
        arrays["ref_prompt"] = model.reference.prompt_tokens.astype(np.float32)
        arrays["ref_embedding"] = model.reference.embedding.astype(np.float16)
    return arrays


def mf_from_arrays(
    models: tuple[str, ...],
    completion: np.ndarray,
    arrays: dict[str, np.ndarray],
    neighbours: Voter | None,
) -> FactorQuality:
    f32 = {name: value.astype(np.float32) for name, value in arrays.items()}
    trunk = Trunk(f32["center"], f32["scale"], f32["w1"], f32["b1"], f32["w2"], f32["b2"])
    heads = Heads(
        f32["quality"], f32["quality_bias"], f32["length"], f32["length_bias"], f32["length_center"],
        f32["length_scale"], f32["length_smear"], f32["slope"], f32["intercept"], f32["blend"],
    )  # fmt: skip
    reference = None
    if "ref_quality" in arrays:
        reference = Reference(f32["ref_quality"], f32["ref_tokens"], f32["ref_prompt"], f32["ref_embedding"])
    if heads.count != len(models) or trunk.w2.shape[1] != heads.quality.shape[0]:
        raise ValueError("the heads do not match the models or the trunk")
    return FactorQuality(models, completion, trunk, heads, neighbours, reference)
