"""The fact-check head: does a prompt ask for verifiable facts (`needs_fact_check`) or not
(`no_fact_check_needed`: creative writing, code, rewriting given text, advice, chit-chat,
arithmetic)? A logistic regression on the router's MiniLM vector, trained by
scripts/train_fact_check.py (docs/model-cards/fact-check.md); a dot product at run time."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
ARTIFACT = ARTIFACTS / "fact_check_head.npz"
METRICS = ARTIFACTS / "fact_check_metrics.json"
FACT_CHECK_LABELS: tuple[str, ...] = ("needs_fact_check", "no_fact_check_needed")


class FactCheckHead:
    def __init__(self, coef: np.ndarray, intercept: float) -> None:
        self.coef = coef.astype(np.float32)
        self.intercept = float(intercept)

    @classmethod
    def load(cls, path: Path = ARTIFACT) -> FactCheckHead:
        with np.load(path) as data:
            return cls(data["coef"], float(data["intercept"]))

    def probability(self, vector: np.ndarray) -> float:
        """P(needs_fact_check) for one unit sentence vector."""
        return float(1.0 / (1.0 + np.exp(-(float(self.coef @ vector) + self.intercept))))

    def labels(self, vector: np.ndarray) -> dict[str, float]:
        needs = self.probability(vector)
        return {"needs_fact_check": needs, "no_fact_check_needed": 1.0 - needs}


@lru_cache(maxsize=1)
def shared_fact_check_head() -> FactCheckHead:
    return FactCheckHead.load()
