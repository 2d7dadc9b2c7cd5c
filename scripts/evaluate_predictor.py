#!/usr/bin/env python
"""How well the `mf` quality predictor predicts, on questions it never saw: the held-out block of
docs/model-cards/model-selection.md (`make routing-quality` runs it after the routing tables).

The questions are split as `svc-sr benchmark run --cross-validate 5` splits them (app/benchmark/
crossval.py `fold_of`); each fold's predictor is trained on the other folds with the shipped
settings (app/pipeline/learning/quality_fit.py `fit_mf`) and predicts the fold. Reported, pooled
over the folds: each model's ROC AUC (how well it ranks questions the model gets right above
those it gets wrong), Brier score (and a constant's, the model's training accuracy), the mean
predicted probability against the share right, and a reliability table over every model's
predictions in ten bins of predicted probability.

Run:  .venv/bin/python scripts/evaluate_predictor.py [--docs docs/model-cards/model-selection.md]
About 5 minutes on 2 cores with the question vectors cached.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not a package; make `app` and the trainer importable
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from evaluate_routing import rewrite_block  # noqa: E402
from train_selectors import SHARED_DATASET, embed_questions  # noqa: E402

from app.benchmark.crossval import fold_of, recorded  # noqa: E402
from app.benchmark.dataset import Dataset  # noqa: E402
from app.pipeline.learning.quality_fit import fit_mf  # noqa: E402

FOLDS = 5
BINS = 10
BEGIN, END = "<!-- evaluate_predictor: begin -->", "<!-- evaluate_predictor: end -->"


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC by the rank-sum formula (ties get their mean rank)."""
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def held_out(dataset: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Out-of-fold predicted probabilities, the outcomes, and each row's training-fold accuracy."""
    vectors = embed_questions(dataset)
    ids = [q.question_id for q in dataset.questions]
    data = recorded(dataset, ids, vectors)
    models = tuple(dataset.models)
    fold = np.array([fold_of(qid, FOLDS) for qid in ids])
    predicted = np.zeros(data.correct.shape)
    prior = np.zeros(data.correct.shape)
    for f in range(FOLDS):
        train, test = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
        model = fit_mf(data.rows(train), models)
        predicted[test] = model.estimate_many(data.vectors[test])[0]
        prior[test] = data.correct[train].mean(axis=0)
        print(f"fold {f + 1}/{FOLDS}", file=sys.stderr)
    return predicted, data.correct, prior


def markdown(models: list[str], predicted: np.ndarray, correct: np.ndarray, prior: np.ndarray) -> str:
    y = correct.astype(float)
    lines = [
        f"Held out: {len(y):,} questions, {FOLDS} folds by question (each fold predicted by the "
        "predictor trained on the others).",
        "",
        "| model | ROC AUC | Brier | Brier of its accuracy alone | mean predicted | share right |",
        "|---|---|---|---|---|---|",
    ]
    for j, name in enumerate(models):
        lines.append(
            f"| {name} | {auc(predicted[:, j], correct[:, j]):.3f} "
            f"| {np.mean((predicted[:, j] - y[:, j]) ** 2):.4f} "
            f"| {np.mean((prior[:, j] - y[:, j]) ** 2):.4f} "
            f"| {predicted[:, j].mean():.3f} | {y[:, j].mean():.3f} |"
        )
    lines += [
        f"| all | {auc(predicted.ravel(), correct.ravel()):.3f} | {np.mean((predicted - y) ** 2):.4f} "
        f"| {np.mean((prior - y) ** 2):.4f} | {predicted.mean():.3f} | {y.mean():.3f} |",
        "",
        "Reliability (every model's predictions, in bins of predicted probability):",
        "",
        "| predicted | answers | mean predicted | share right |",
        "|---|---|---|---|",
    ]
    p, r = predicted.ravel(), y.ravel()
    edges = np.linspace(0, 1, BINS + 1)
    for low, high in zip(edges, edges[1:], strict=False):
        inside = (p >= low) & ((p < high) | (high == 1.0))
        if inside.any():
            lines.append(
                f"| {low:.1f}-{high:.1f} | {int(inside.sum()):,} | {p[inside].mean():.3f} | {r[inside].mean():.3f} |"
            )
    return "\n".join(lines)


def cli(doc: str | None) -> argparse.Namespace:
    """The held-out predictor scripts' options (this one and scripts/probe_predictor.py)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=SHARED_DATASET)
    parser.add_argument("--docs", type=Path, help="rewrite the marked block of this markdown file")
    return parser.parse_args()


def main() -> None:
    args = cli(__doc__)
    dataset = Dataset.load(args.dataset)
    text = markdown(list(dataset.models), *held_out(dataset))
    print(text)
    if args.docs:
        rewrite_block(args.docs, BEGIN, END, text)


if __name__ == "__main__":
    main()
