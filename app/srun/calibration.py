"""The decision model's calibration: raw MiniLM similarities -> probabilities.

Raw scores are cosines between the state's sentence vector and each option's vector (the
option is embedded as "key: description", chosen on the train split). The maps below turn
them into probabilities; their few parameters are fitted on the train split by
`scripts/train_decision_calibration.py` and committed as
`app/models/artifacts/decision_calibration.json`.

- choice: softmax over `scale * cos_k` plus an abstain logit `abstain + log K` (the log K
  keeps the abstain mass comparable between questions with 2 and 200 options). Reported
  `probabilities` are conditional on not abstaining (they sum to 1);
  `abstain_probability` is the extra class's mass; `confidence` is the chosen option's
  unconditional probability, p(option) * (1 - abstain).
- score: softmax over `scale * cos_level`; the score is the expected level index.
- noul: with both descriptions sigmoid(w * (cos_true - cos_false) + b); with one (or only
  the instructions, read as the "true" statement) sigmoid(w * cos + b).
- set labels: sigmoid(w0 * cos + w1 * (cos - mean cos of the question's labels) + b).
- span candidates: sigmoid(w . [cos(candidate text), cos(mean of its contextual token
  states), cos - best other label's cos] + b).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ARTIFACT = Path(__file__).resolve().parents[1] / "models" / "artifacts" / "decision_calibration.json"


@dataclass
class Calibration:
    choice_scale: float = 20.0
    choice_abstain: float = 5.0
    score_scale: float = 20.0
    noul_pair: tuple[float, float] = (20.0, 0.0)
    noul_single: tuple[float, float] = (15.0, -5.0)
    label: tuple[float, float, float] = (15.0, 10.0, -5.0)
    span: tuple[float, float, float, float] = (10.0, 5.0, 5.0, -5.0)
    thresholds: dict[str, float] = field(
        default_factory=lambda: {"choice": 0.0, "score": 0.0, "noul": 0.5, "set": 0.5, "span": 0.5}
    )
    version: str = "untrained"

    @classmethod
    def load(cls, path: Path = ARTIFACT) -> Calibration:
        data = json.loads(Path(path).read_text())
        params = data["params"]
        return cls(
            choice_scale=float(params["choice_scale"]),
            choice_abstain=float(params["choice_abstain"]),
            score_scale=float(params["score_scale"]),
            noul_pair=tuple(params["noul_pair"]),
            noul_single=tuple(params["noul_single"]),
            label=tuple(params["label"]),
            span=tuple(params["span"]),
            thresholds={**cls().thresholds, **data.get("thresholds", {})},
            version=str(data.get("version", "unknown")),
        )

    def params(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("thresholds")
        out.pop("version")
        return out


def sigmoid(x: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(np.asarray(x, np.float64), -60, 60)))


def choice_probs(cos: np.ndarray, cal: Calibration) -> tuple[np.ndarray, float]:
    """(conditional option probabilities, abstain probability)."""
    logits = np.append(
        cal.choice_scale * np.asarray(cos, np.float64), cal.choice_abstain + math.log(len(cos))
    )
    logits -= logits.max()
    p = np.exp(logits)
    p /= p.sum()
    abstain = float(p[-1])
    options = p[:-1] / max(1.0 - abstain, 1e-12)
    return options, abstain


def score_probs(cos: np.ndarray, cal: Calibration) -> np.ndarray:
    logits = cal.score_scale * np.asarray(cos, np.float64)
    p = np.exp(logits - logits.max())
    return p / p.sum()


def noul_prob(cos_true: float | None, cos_false: float | None, cal: Calibration) -> float:
    if cos_true is not None and cos_false is not None:
        w, b = cal.noul_pair
        return float(sigmoid(w * (cos_true - cos_false) + b))
    w, b = cal.noul_single
    if cos_true is not None:
        return float(sigmoid(w * cos_true + b))
    assert cos_false is not None
    return float(1.0 - sigmoid(w * cos_false + b))


def label_features(cos: np.ndarray) -> np.ndarray:
    cos = np.asarray(cos, np.float64)
    return np.stack([cos, cos - cos.mean()], axis=1)


def label_probs(cos: np.ndarray, cal: Calibration) -> np.ndarray:
    w0, w1, b = cal.label
    return sigmoid(label_features(cos) @ np.array([w0, w1]) + b)


def span_features(direct: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Features of candidates x labels: arrays (n_candidates, n_labels) -> (n, labels, 3)."""
    direct = np.asarray(direct, np.float64)
    context = np.asarray(context, np.float64)
    if direct.shape[1] > 1:
        # best other label per cell: the max over labels, or the runner-up where this label is the max
        top = np.sort(direct, axis=1)
        best, second = top[:, -1:], top[:, -2:-1]
        other = np.where(direct >= best, second, best)
    else:
        other = np.zeros_like(direct)
    return np.stack([direct, context, direct - other], axis=2)


def span_probs(direct: np.ndarray, context: np.ndarray, cal: Calibration) -> np.ndarray:
    w = np.array(cal.span[:3])
    return sigmoid(span_features(direct, context) @ w + cal.span[3])
