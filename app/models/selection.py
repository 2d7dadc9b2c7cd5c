"""Learned quality predictors for model selection: how likely each model answers a request
right, from the request's MiniLM vector. The decisions' `algorithm` types `knn`, `mlp` and
`mf` (app/pipeline/selectors.py) trade this against each model's expected cost.

- `KnnQuality`: the k nearest training questions (cosine, in a 64-d PCA space of the
  MiniLM vector, stored int8) vote with their recorded per-model outcomes, weighted by
  similarity and shrunk toward each model's overall accuracy (`prior_weight` pseudo-votes),
  so a sparse neighbourhood falls back to the average instead of to noise.
- `MlpQuality`: one hidden ReLU layer, one sigmoid output per model (multi-label: each
  output is that model's probability of being right).

- `FactorQuality` (`mf`, app/models/quality_mf.py): matrix factorisation over a learned
  question embedding and per-model embeddings, blended with a `KnnQuality` vote, calibrated;
  it also predicts each model's completion tokens for this request.

knn and mlp carry each model's mean completion tokens, the expected-cost input. Artifacts are
.npz files written by `save_*` (scripts/train_selectors.py trains them on recorded answers);
run time needs numpy only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from app.models.quality_mf import MF_FILE, FactorQuality, mf_arrays, mf_from_arrays

ARTIFACT_DIR = Path(__file__).parent / "artifacts" / "selection"
KNN_FILE = "knn_model.npz"
MLP_FILE = "mlp_model.npz"
FORMAT_VERSION = 1


class SelectionArtifactError(ValueError):
    """An artifact that is missing, unreadable or of another kind than the config says."""


class QualityModel(Protocol):
    @property
    def models(self) -> tuple[str, ...]: ...

    @property
    def mean_completion_tokens(self) -> np.ndarray:  # (n_models,)
        ...

    def predict(self, vector: np.ndarray) -> np.ndarray:
        """(n_models,) probabilities that each model answers right."""
        ...

    def estimate(self, vector: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(n_models,) probabilities and (n_models,) expected completion tokens."""
        ...


@dataclass(frozen=True)
class KnnQuality:
    models: tuple[str, ...]
    mean_completion_tokens: np.ndarray
    mean: np.ndarray  # (384,) centring before the projection
    projection: np.ndarray  # (384, d)
    points: np.ndarray  # (n, d) int8, unit rows scaled by 127
    outcomes: np.ndarray  # (n, n_models) bool
    prior: np.ndarray  # (n_models,) overall accuracy
    k: int = 40
    prior_weight: float = 5.0
    sharpness: float = 4.0  # similarity ** sharpness: the closest neighbours count most

    # The int8 points as unit float rows, converted once (not per request).
    unit_points: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "unit_points", self.points.astype(np.float32) / 127.0)

    def with_k(self, k: int | None) -> KnnQuality:
        if k is None or k == self.k:
            return self
        return replace(self, k=max(1, min(int(k), len(self.points))))

    def project(self, vectors: np.ndarray) -> np.ndarray:
        z = (np.atleast_2d(vectors).astype(np.float32) - self.mean) @ self.projection
        norms = np.linalg.norm(z, axis=1, keepdims=True)
        return z / np.where(norms == 0, 1.0, norms)

    def predict(self, vector: np.ndarray) -> np.ndarray:
        return self.predict_many(vector)[0]

    def estimate(self, vector: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.predict(vector), self.mean_completion_tokens

    def predict_many(self, vectors: np.ndarray) -> np.ndarray:
        z = self.project(vectors)
        similarity = z @ self.unit_points.T  # (q, n)
        k = min(self.k, similarity.shape[1])
        nearest = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
        weights = np.maximum(np.take_along_axis(similarity, nearest, 1), 0.0) ** self.sharpness + 1e-6
        votes = (self.outcomes[nearest] * weights[:, :, None]).sum(1) / weights.sum(1)[:, None]
        shrunk: np.ndarray = (votes * k + self.prior * self.prior_weight) / (k + self.prior_weight)
        return shrunk


@dataclass(frozen=True)
class MlpQuality:
    models: tuple[str, ...]
    mean_completion_tokens: np.ndarray
    hidden_weights: np.ndarray  # (384, h)
    hidden_bias: np.ndarray  # (h,)
    output_weights: np.ndarray  # (h, n_models)
    output_bias: np.ndarray  # (n_models,)

    def predict(self, vector: np.ndarray) -> np.ndarray:
        return self.predict_many(vector)[0]

    def estimate(self, vector: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.predict(vector), self.mean_completion_tokens

    def predict_many(self, vectors: np.ndarray) -> np.ndarray:
        hidden = np.maximum(
            np.atleast_2d(vectors).astype(np.float32) @ self.hidden_weights + self.hidden_bias, 0
        )
        logits = hidden @ self.output_weights + self.output_bias
        probabilities: np.ndarray = 1.0 / (1.0 + np.exp(-logits))
        return probabilities


def knn_arrays(model: KnnQuality) -> dict[str, Any]:
    return {
        "mean": model.mean, "projection": model.projection, "points": model.points,
        "outcomes": np.packbits(model.outcomes.astype(bool), axis=1), "prior": model.prior,
        "settings": np.array([model.k, model.prior_weight, model.sharpness], dtype=np.float64),
    }  # fmt: skip


def knn_from_arrays(
    models: tuple[str, ...], completion: np.ndarray, arrays: dict[str, np.ndarray]
) -> KnnQuality:
    k, prior_weight, sharpness = (float(v) for v in arrays["settings"])
    outcomes = np.unpackbits(arrays["outcomes"], axis=1, count=len(models)).astype(bool)
    return KnnQuality(
        models, completion, arrays["mean"], arrays["projection"], arrays["points"], outcomes,
        arrays["prior"], int(k), prior_weight, sharpness,
    )  # fmt: skip


def save_knn(path: Path, model: KnnQuality, meta: dict[str, object] | None = None) -> None:
    _save(path, "knn", model.models, model.mean_completion_tokens, meta, knn_arrays(model))


def save_mf(path: Path, model: FactorQuality, meta: dict[str, object] | None = None) -> None:
    """The MF predictor; its neighbour vote (a KnnQuality over its first models) rides along,
    its arrays prefixed `knn_`."""
    arrays = mf_arrays(model)
    if isinstance(model.neighbours, KnnQuality):
        arrays |= {f"knn_{name}": value for name, value in knn_arrays(model.neighbours).items()}
        meta = {**(meta or {}), "neighbour_models": list(model.neighbours.models)}
    _save(path, "mf", model.models, model.mean_completion_tokens, meta, arrays)


def save_mlp(path: Path, model: MlpQuality, meta: dict[str, object] | None = None) -> None:
    _save(path, "mlp", model.models, model.mean_completion_tokens, meta, {
        "hidden_weights": model.hidden_weights, "hidden_bias": model.hidden_bias,
        "output_weights": model.output_weights, "output_bias": model.output_bias,
    })  # fmt: skip


def _save(
    path: Path,
    kind: str,
    models: tuple[str, ...],
    completion: np.ndarray,
    meta: dict[str, object] | None,
    arrays: dict[str, Any],
) -> None:
    header = {"format": FORMAT_VERSION, "kind": kind, "models": list(models), **(meta or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as fh:  # a crash leaves the old artifact, never half of a new one
        payload: dict[str, Any] = {
            "header": np.array(json.dumps(header)),
            "mean_completion_tokens": completion,
        }
        np.savez_compressed(fh, **payload, **arrays)
    partial.replace(path)


def load_quality_model(path: Path, kind: str) -> QualityModel:
    """The artifact at `path` (cached by path and modification time)."""
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as exc:
        raise SelectionArtifactError(f"{kind} selection artifact {path} not found") from exc
    return _load(str(path), kind, stamp)


@lru_cache(maxsize=16)
def _load(path: str, kind: str, stamp: int) -> QualityModel:
    del stamp  # part of the cache key: a retrained file is read again
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            arrays = {name: data[name] for name in data.files if name != "header"}
    except (OSError, ValueError, KeyError) as exc:
        raise SelectionArtifactError(f"{path} is not a selection artifact: {exc}") from exc
    if header.get("kind") != kind:
        raise SelectionArtifactError(f"{path} holds a {header.get('kind')!r} model, not {kind!r}")
    models = tuple(str(m) for m in header["models"])
    completion = arrays["mean_completion_tokens"].astype(np.float64)
    try:
        if kind == "knn":
            return knn_from_arrays(models, completion, arrays)
        if kind == "mf":
            return _mf(header, models, completion, arrays)
    except (KeyError, ValueError) as exc:
        raise SelectionArtifactError(f"{path} is not a usable {kind} artifact: {exc}") from exc
    return MlpQuality(
        models, completion, arrays["hidden_weights"], arrays["hidden_bias"],
        arrays["output_weights"], arrays["output_bias"],
    )  # fmt: skip


def _mf(
    header: dict[str, Any], models: tuple[str, ...], completion: np.ndarray, arrays: dict[str, np.ndarray]
) -> FactorQuality:
    neighbours = None
    if "neighbour_models" in header:
        voters = tuple(str(m) for m in header["neighbour_models"])
        knn = {name[4:]: value for name, value in arrays.items() if name.startswith("knn_")}
        neighbours = knn_from_arrays(voters, completion[: len(voters)], knn)
    own = {name: value for name, value in arrays.items() if not name.startswith("knn_")}
    own.pop("mean_completion_tokens", None)
    return mf_from_arrays(models, completion, own, neighbours)


ARTIFACT_FILES = {"knn": KNN_FILE, "mlp": MLP_FILE, "mf": MF_FILE}


def packaged_artifact(kind: str) -> Path:
    """The artifact svc-sr ships for `kind` (trained on MMLU-Pro's recorded answers)."""
    return ARTIFACT_DIR / ARTIFACT_FILES[kind]
