"""Fitting the learned quality predictors (app/models/selection.py, app/models/quality_mf.py) on
recorded answers: numpy only, so `svc-sr benchmark run --cross-validate` can train a fold's
predictor in the product, and deterministic for a seed.

`fit_mf` holds back `validation_share` of the questions it is given and uses them, and only
them, to stop the trunk's training, pick the neighbour vote's k and its blend weight, fit each
model's calibration and make the reference set a budget is computed on. No hyper-parameter is
chosen on questions outside the ones it is given: cross-validation reports folds it never saw.

`add_model` fits a new model's heads on the frozen question embedding from a few hundred of
its labelled answers, shrunk toward the average model's heads: the other models are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from app.models.quality_mf import FactorQuality, Heads, Reference, Trunk, gelu, logit, sigmoid
from app.models.selection import KnnQuality


@dataclass(frozen=True)
class FitSettings:
    hidden: int = 256
    rank: int = 64
    epochs: int = 12
    learning_rate: float = 1e-3
    weight_decay: float = 0.05
    dropout_input: float = 0.1
    dropout_hidden: float = 0.3
    length_weight: float = 0.5  # the length loss's weight beside the outcomes' cross-entropy
    batch: int = 256
    validation_share: float = 0.15
    knn_ks: tuple[int, ...] = (40, 100, 200)
    blends: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    pca_dims: int = 64
    seed: int = 0


@dataclass(frozen=True)
class Recorded:
    """Questions with every model's recorded outcome: what the predictors learn from."""

    vectors: np.ndarray  # (n, d) MiniLM
    correct: np.ndarray  # (n, m) bool
    completion: np.ndarray  # (n, m) completion tokens
    prompt_tokens: np.ndarray  # (n,)

    def rows(self, index: np.ndarray) -> Recorded:
        return Recorded(
            self.vectors[index], self.correct[index], self.completion[index], self.prompt_tokens[index]
        )


def fit_knn(
    data: Recorded, models: tuple[str, ...], k: int = 40, dims: int = 64, prior_weight: float = 10.0
) -> KnnQuality:
    """The neighbour vote: the vectors centred, projected to `dims` principal directions
    (eigenvectors of their covariance: cheaper than an SVD of every row), unit, int8."""
    vectors = data.vectors.astype(np.float64)
    mean = vectors.mean(axis=0)
    centred = vectors - mean
    _, eigenvectors = np.linalg.eigh(centred.T @ centred)  # ascending eigenvalues
    projection = eigenvectors[:, ::-1][:, : min(dims, vectors.shape[1])].astype(np.float32)
    z = centred @ projection
    z /= np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    return KnnQuality(
        models=models,
        mean_completion_tokens=data.completion.mean(axis=0),
        mean=mean.astype(np.float32),
        projection=projection,
        points=np.round(z * 127).astype(np.int8),
        outcomes=data.correct.astype(bool),
        prior=data.correct.mean(axis=0),
        k=max(1, min(k, len(vectors))),
        prior_weight=prior_weight,
    )


def fit_mf(data: Recorded, models: tuple[str, ...], settings: FitSettings | None = None) -> FactorQuality:
    s = settings or FitSettings()
    rng = np.random.default_rng(s.seed)
    held = rng.random(len(data.vectors)) < s.validation_share
    if held.sum() < 2 or (~held).sum() < 2:  # too few questions to hold any back: fit on all
        held = np.zeros(len(data.vectors), dtype=bool)
    train, valid = data.rows(~held), data.rows(held) if held.any() else data.rows(~held)
    trunk, heads = _fit_trunk(train, valid, s)
    heads = _refit_lengths(trunk.embed(train.vectors), train.completion, heads)
    e_valid = trunk.embed(valid.vectors)
    mf_logits = e_valid @ heads.quality + heads.quality_bias
    vote_k = _best_k(train, valid, models, s)
    voter = fit_knn(train, models, vote_k, s.pca_dims)
    voted = logit(voter.predict_many(valid.vectors))
    blend, slope, intercept = _blend_and_calibrate(mf_logits, voted, valid.correct, s.blends)
    smear = _smearing(e_valid, heads, valid.completion)
    heads = replace(heads, slope=slope, intercept=intercept, blend=blend, length_smear=smear)
    partial = FactorQuality(models, data.completion.mean(axis=0), trunk, heads, voter, None)
    quality, tokens = partial.estimate_many(valid.vectors)  # the reference: unseen by the vote
    reference = Reference(quality, tokens, valid.prompt_tokens.astype(np.float32), e_valid)
    neighbours = fit_knn(data, models, vote_k, s.pca_dims)  # the vote over every question given
    return replace(partial, neighbours=neighbours, reference=reference)


def _standard_lengths(completion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    logs = np.log1p(completion)
    return logs.mean(axis=0), np.maximum(logs.std(axis=0), 1e-3)


def _fit_trunk(train: Recorded, valid: Recorded, s: FitSettings) -> tuple[Trunk, Heads]:
    """Adam on cross-entropy of the outcomes plus the length loss; the epoch with the best
    held-back cross-entropy is kept."""
    rng = np.random.default_rng(s.seed)
    center = train.vectors.mean(axis=0).astype(np.float32)
    scale = (train.vectors.std(axis=0) + 1e-3).astype(np.float32)
    x = ((train.vectors - center) / scale).astype(np.float32)
    xv = ((valid.vectors - center) / scale).astype(np.float32)
    y = train.correct.astype(np.float32)
    length_center, length_scale = _standard_lengths(train.completion)
    lengths = ((np.log1p(train.completion) - length_center) / length_scale).astype(np.float32)
    d, m = x.shape[1], y.shape[1]
    rate = np.clip(y.mean(axis=0), 1e-3, 1 - 1e-3)
    p = {
        "w1": rng.normal(0, 1 / np.sqrt(d), (d, s.hidden)).astype(np.float32),
        "b1": np.zeros(s.hidden, np.float32),
        "w2": rng.normal(0, 1 / np.sqrt(s.hidden), (s.hidden, s.rank)).astype(np.float32),
        "b2": np.zeros(s.rank, np.float32),
        "v": rng.normal(0, 0.1 / np.sqrt(s.rank), (s.rank, m)).astype(np.float32),
        "c": np.log(rate / (1 - rate)).astype(np.float32),
        "u": rng.normal(0, 0.1 / np.sqrt(s.rank), (s.rank, m)).astype(np.float32),
        "a": np.zeros(m, np.float32),
    }
    adam = _Adam(p, s.learning_rate, s.weight_decay, decayed=("w1", "w2", "v", "u"))
    best = (np.inf, {k: v.copy() for k, v in p.items()})
    for _ in range(s.epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), s.batch):
            rows = order[start : start + s.batch]
            adam.step(_gradients(p, x[rows], y[rows], lengths[rows], s, rng))
        loss = _cross_entropy(_forward(p, xv)[0], valid.correct)
        if loss < best[0]:
            best = (loss, {k: v.copy() for k, v in p.items()})
    p = best[1]
    trunk = Trunk(center, scale, p["w1"], p["b1"], p["w2"], p["b2"])
    ones, zeros = np.ones(m, np.float32), np.zeros(m, np.float32)
    heads = Heads(
        p["v"], p["c"], p["u"], p["a"], length_center.astype(np.float32), length_scale.astype(np.float32),
        ones, ones, zeros, zeros,
    )  # fmt: skip
    return trunk, heads


def _forward(p: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    e = gelu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return e @ p["v"] + p["c"], e @ p["u"] + p["a"]


def _gelu_grad(a: np.ndarray) -> np.ndarray:
    t = np.tanh(0.7978845608 * (a + 0.044715 * a**3))
    out: np.ndarray = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * 0.7978845608 * (1 + 3 * 0.044715 * a * a)
    return out


def _gradients(
    p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, lengths: np.ndarray, s: FitSettings,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:  # fmt: skip
    n = len(x)
    if s.dropout_input > 0:
        x = x * (rng.random(x.shape) > s.dropout_input) / (1 - s.dropout_input)
    a1 = x @ p["w1"] + p["b1"]
    kept = (rng.random(a1.shape) > s.dropout_hidden).astype(np.float32) / (1 - s.dropout_hidden)
    h = gelu(a1) * kept
    e = h @ p["w2"] + p["b2"]
    g_quality = (sigmoid(e @ p["v"] + p["c"]) - y) / n
    g_length = s.length_weight * 2 * ((e @ p["u"] + p["a"]) - lengths) / n
    g_e = g_quality @ p["v"].T + g_length @ p["u"].T
    g_h = (g_e @ p["w2"].T) * kept * _gelu_grad(a1)
    return {
        "v": e.T @ g_quality, "c": g_quality.sum(0), "u": e.T @ g_length, "a": g_length.sum(0),
        "w2": h.T @ g_e, "b2": g_e.sum(0), "w1": x.T @ g_h, "b1": g_h.sum(0),
    }  # fmt: skip


class _Adam:
    def __init__(self, params: dict[str, np.ndarray], rate: float, decay: float, decayed: tuple[str, ...]):
        self.p, self.rate, self.decay, self.decayed = params, rate, decay, decayed
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict[str, np.ndarray]) -> None:
        self.t += 1
        for k, g in grads.items():
            self.m[k] = 0.9 * self.m[k] + 0.1 * g
            self.v[k] = 0.999 * self.v[k] + 0.001 * g * g
            update = (self.m[k] / (1 - 0.9**self.t)) / (np.sqrt(self.v[k] / (1 - 0.999**self.t)) + 1e-8)
            if k in self.decayed:  # decoupled weight decay (AdamW)
                update = update + self.decay * self.p[k]
            self.p[k] -= (self.rate * update).astype(np.float32)


def _cross_entropy(logits: np.ndarray, correct: np.ndarray) -> float:
    p = np.clip(sigmoid(logits), 1e-7, 1 - 1e-7)
    return float(-np.mean(correct * np.log(p) + (1 - correct) * np.log(1 - p)))


def _best_k(train: Recorded, valid: Recorded, models: tuple[str, ...], s: FitSettings) -> int:
    base = fit_knn(train, models, s.knn_ks[0], s.pca_dims)
    losses = {
        k: _cross_entropy(logit(base.with_k(k).predict_many(valid.vectors)), valid.correct) for k in s.knn_ks
    }
    return min(losses, key=lambda k: (losses[k], k))


def platt(logits: np.ndarray, correct: np.ndarray, l2: float = 1e-3) -> tuple[float, float]:
    """slope, intercept of the logistic fit of `correct` on `logits` (Newton's method)."""
    w = np.array([1.0, 0.0])
    features = np.stack([logits, np.ones_like(logits)], axis=1)
    y = correct.astype(np.float64)
    for _ in range(25):
        p = sigmoid(features @ w)
        grad = features.T @ (p - y) + l2 * np.array([w[0] - 1.0, w[1]])
        hess = (features * (p * (1 - p))[:, None]).T @ features + l2 * np.eye(2)
        w -= np.linalg.solve(hess, grad)
    return float(w[0]), float(w[1])


def _blend_and_calibrate(
    mf_logits: np.ndarray, voted: np.ndarray, correct: np.ndarray, blends: tuple[float, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per model: the blend weight whose calibrated logit has the least held-back cross-entropy."""
    m = mf_logits.shape[1]
    blend, slope, intercept = (np.zeros(m, np.float32) for _ in range(3))
    for col in range(m):
        best = (np.inf, 0.0, 1.0, 0.0)
        for w in blends:
            raw = (1 - w) * mf_logits[:, col] + w * voted[:, col]
            a, b = platt(raw, correct[:, col])
            loss = _cross_entropy(a * raw + b, correct[:, col : col + 1].ravel())
            if loss < best[0] - 1e-9:
                best = (loss, w, a, b)
        blend[col], slope[col], intercept[col] = best[1], best[2], best[3]
    return blend, slope, intercept


def _refit_lengths(e: np.ndarray, completion: np.ndarray, heads: Heads, strength: float = 1.0) -> Heads:
    """The length heads by ridge on the trained embedding (no dropout noise): closed form."""
    target = (np.log1p(completion) - heads.length_center) / heads.length_scale
    fitted = _ridge(e.astype(np.float64), target, strength)
    return replace(heads, length=fitted[:-1].astype(np.float32), length_bias=fitted[-1].astype(np.float32))


def _smearing(e: np.ndarray, heads: Heads, completion: np.ndarray) -> np.ndarray:
    """Duan's smearing factor per model: mean exp(residual) of log1p(tokens), so that the
    predicted tokens are an expected value (what cost is), not a median."""
    predicted = (e @ heads.length + heads.length_bias) * heads.length_scale + heads.length_center
    out: np.ndarray = np.exp(np.log1p(completion) - predicted).mean(axis=0).astype(np.float32)
    return out


def add_model(model: FactorQuality, name: str, data: Recorded, strength: float = 20.0) -> FactorQuality:
    """`model` with one more model, fitted from its labelled answers (`data.correct` and
    `data.completion`, one column) on the frozen question embedding: a logistic head shrunk
    toward the known models' mean head (`strength`: the L2 pull, in questions' worth), and a
    length head by ridge. The existing models' heads, the trunk and the vote are untouched."""
    if name in model.models:
        raise ValueError(f"{name!r} is already one of the predictor's models")
    e = model.trunk.embed(data.vectors).astype(np.float64)
    h = model.heads
    y = data.correct.reshape(-1).astype(np.float64)
    prior = np.append(h.quality.mean(axis=1), h.quality_bias.mean())
    weights = _shrunk_logistic(e, y, prior, strength)
    log_tokens = np.log1p(data.completion.reshape(-1))
    center, scale = float(log_tokens.mean()), float(max(log_tokens.std(), 1e-3))
    length = _ridge(e, (log_tokens - center) / scale, strength)
    residual = log_tokens - ((e @ length[:-1] + length[-1]) * scale + center)

    def grow(values: np.ndarray, extra: float) -> np.ndarray:
        return np.append(values, np.float32(extra)).astype(np.float32)

    heads = Heads(
        quality=np.column_stack([h.quality, weights[:-1]]).astype(np.float32),
        quality_bias=grow(h.quality_bias, weights[-1]),
        length=np.column_stack([h.length, length[:-1]]).astype(np.float32),
        length_bias=grow(h.length_bias, length[-1]),
        length_center=grow(h.length_center, center),
        length_scale=grow(h.length_scale, scale),
        length_smear=grow(h.length_smear, float(np.exp(residual).mean())),
        slope=grow(h.slope, 1.0),
        intercept=grow(h.intercept, 0.0),
        blend=grow(h.blend, 0.0),
    )
    completion = np.append(model.mean_completion_tokens, data.completion.mean())
    reference = model.reference
    if reference is not None:  # the new model's columns on the same held-back questions
        column = replace(heads, **{f: getattr(heads, f)[..., -1:] for f in _COLUMN_FIELDS})
        quality, tokens = column.estimate(reference.embedding, None)
        reference = replace(
            reference,
            quality=np.column_stack([reference.quality, quality]),
            completion_tokens=np.column_stack([reference.completion_tokens, tokens]),
        )
    return replace(
        model,
        models=(*model.models, name),
        mean_completion_tokens=completion,
        heads=heads,
        reference=reference,
    )


_COLUMN_FIELDS = (
    "quality", "quality_bias", "length", "length_bias", "length_center", "length_scale", "length_smear",
    "slope", "intercept", "blend",
)  # fmt: skip


def _shrunk_logistic(e: np.ndarray, y: np.ndarray, prior: np.ndarray, strength: float) -> np.ndarray:
    """MAP logistic regression with a Gaussian prior centred on `prior` (Newton's method)."""
    features = np.column_stack([e, np.ones(len(e))])
    w = prior.copy()
    for _ in range(30):
        p = sigmoid(features @ w)
        grad = features.T @ (p - y) + strength * (w - prior)
        hess = (features * (p * (1 - p))[:, None]).T @ features + strength * np.eye(len(w))
        w -= np.linalg.solve(hess, grad)
    return w


def _ridge(e: np.ndarray, target: np.ndarray, strength: float) -> np.ndarray:
    features = np.column_stack([e, np.ones(len(e))])
    penalty = strength * np.eye(features.shape[1])
    penalty[-1, -1] = 0.0  # the intercept is not shrunk
    out: np.ndarray = np.linalg.solve(features.T @ features + penalty, features.T @ target)
    return out
