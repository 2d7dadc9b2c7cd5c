#!/usr/bin/env python
"""Would a text channel beside the MiniLM vector make the `mf` predictor route better? Measured,
not shipped: the candidate channels of issue 37 against the shipped predictor, on the folds
`svc-sr benchmark run --cross-validate 5` uses (app/benchmark/crossval.py `fold_of`).

The channel: the question's words and adjacent-word pairs (the domain classifier's `tokenize`)
hashed into 2^16 sublinear tf-idf columns, plus cheap cues (`text_cues`: length, digits,
formula signs, "calculate"-like verbs), a logistic regression per model for its chance of a
right answer and a ridge per model for its log completion tokens. It is stacked on the shipped
predictor's output per model (a logistic on both logits; a least-squares line on both log
token counts), and the stack is fitted on predictions of questions neither part trained on:
for each fold, inner out-of-fold predictions over the other four folds. No fold's own
questions choose anything that predicts them.

Reported per candidate: mean per-model ROC AUC and Brier, and routing on the held-out
predictions: each question to `argmax quality - price * expected cost` (the `budget_per_1k`
rule of app/pipeline/selectors.py, its price swept), billed as the benchmark bills
(configs/examples/cost-aware.yaml's prices), set against the best mix of two models
(app/benchmark/frontier.py). docs/model-cards/model-selection.md has the figures.

Run:  .venv/bin/python scripts/probe_predictor.py [--docs docs/model-cards/model-selection.md]
About 12 minutes on 2 cores shared with other work, with the question vectors cached.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml
from scipy.sparse import csr_matrix, hstack
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.linear_model import LogisticRegression, Ridge

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not a package; make `app` and the trainer importable
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from evaluate_predictor import auc, cli  # noqa: E402
from evaluate_routing import rewrite_block  # noqa: E402
from train_selectors import embed_questions  # noqa: E402

from app.benchmark.baselines import answer_cost, point  # noqa: E402
from app.benchmark.crossval import fold_of, recorded  # noqa: E402
from app.benchmark.dataset import Dataset, question_text  # noqa: E402
from app.benchmark.frontier import CurvePoint, Frontier, compute_frontier  # noqa: E402
from app.config.document import RouterConfig  # noqa: E402
from app.models.domain import tokenize  # noqa: E402
from app.models.quality_mf import logit  # noqa: E402
from app.pipeline.learning.quality_fit import Recorded, fit_mf  # noqa: E402

FOLDS = 5
CONFIG = ROOT / "configs" / "examples" / "cost-aware.yaml"
BEGIN, END = "<!-- probe_predictor: begin -->", "<!-- probe_predictor: end -->"
PRICES = np.geomspace(0.01, 100.0, 80)  # price of quality, accuracy per $ per 1k queries
_VERBS = re.compile(r"\b(calculat\w*|comput\w*|find|determine|estimate|how (many|much))\b")
_FORMULA = re.compile(r"[=^*/+]|\d\s*[a-z]\b")
_DECIMAL = re.compile(r"\d+\.\d+")


def text_cues(text: str) -> np.ndarray:
    """Cheap cues of a question that needs working out: log length in characters and words,
    share of digits, log count of digits, formula signs, a '$', a decimal number, a verb that
    asks to calculate."""
    lower = text.lower()
    digits = sum(c.isdigit() for c in text)
    return np.array(
        [
            np.log1p(len(text)), np.log1p(len(text.split())), digits / max(len(text), 1), np.log1p(digits),
            float(bool(_FORMULA.search(lower))), float("$" in text), float(bool(_DECIMAL.search(text))),
            float(bool(_VERBS.search(lower))),
        ],
        dtype=np.float64,
    )  # fmt: skip


class TextChannel:
    """Per model: logistic on hashed tf-idf and cues (right answer), ridge (log completion tokens)."""

    def __init__(self, texts: list[str]) -> None:
        self.counts = HashingVectorizer(
            analyzer=tokenize, n_features=2**16, alternate_sign=False, norm=None
        ).transform(texts)
        cues = np.stack([text_cues(t) for t in texts])
        self.cues = (cues - cues.mean(0)) / (cues.std(0) + 1e-9)

    def features(self, train: np.ndarray, rows: np.ndarray) -> csr_matrix:
        idf = TfidfTransformer(sublinear_tf=True).fit(self.counts[train])  # the training rows' idf only
        return hstack([idf.transform(self.counts[rows]), csr_matrix(self.cues[rows])]).tocsr()

    def fit_predict(
        self, data: Recorded, train: np.ndarray, test: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        x_train, x_test = self.features(train, train), self.features(train, test)
        quality = np.zeros((len(test), data.correct.shape[1]))
        log_tokens = np.zeros_like(quality)
        for j in range(data.correct.shape[1]):
            y = data.correct[train, j]
            if y.all() or not y.any():
                quality[:, j] = float(y.mean())
            else:
                quality[:, j] = (
                    LogisticRegression(C=1.0, max_iter=500).fit(x_train, y).predict_proba(x_test)[:, 1]
                )
            ridge = Ridge(alpha=1.0).fit(x_train, np.log1p(data.completion[train, j]))
            log_tokens[:, j] = ridge.predict(x_test)
        return quality, log_tokens


def mf_predict(
    data: Recorded, models: tuple[str, ...], train: np.ndarray, test: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    quality, tokens = fit_mf(data.rows(train), models).estimate_many(data.vectors[test])
    return quality, np.log1p(tokens)


Predict = Callable[[Recorded, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def inner_out_of_fold(
    data: Recorded, fold: np.ndarray, outer: int, predict: Predict
) -> tuple[np.ndarray, np.ndarray]:
    """Predictions for every row outside fold `outer`, each by a fit on the rows outside both
    its fold and `outer` (rows of `outer` stay zero)."""
    quality, log_tokens = np.zeros(data.correct.shape), np.zeros(data.correct.shape)
    for inner in sorted(set(fold.tolist()) - {outer}):
        train, test = np.flatnonzero((fold != outer) & (fold != inner)), np.flatnonzero(fold == inner)
        quality[test], log_tokens[test] = predict(data, train, test)
    return quality, log_tokens


def stack_quality(
    a: np.ndarray, b: np.ndarray, y: np.ndarray, a_new: np.ndarray, b_new: np.ndarray
) -> np.ndarray:
    """Per model: a logistic on the two channels' logits, fitted on (a, b, y), applied to the new rows."""
    out = np.zeros(a_new.shape)
    for j in range(a.shape[1]):
        fit = LogisticRegression(C=100.0, max_iter=500).fit(
            np.column_stack([logit(a[:, j]), logit(b[:, j])]), y[:, j]
        )
        out[:, j] = fit.predict_proba(np.column_stack([logit(a_new[:, j]), logit(b_new[:, j])]))[:, 1]
    return out


def stack_tokens(
    a: np.ndarray, b: np.ndarray, log_y: np.ndarray, a_new: np.ndarray, b_new: np.ndarray
) -> np.ndarray:
    """Per model: least squares of log1p(tokens) on the two channels' predictions, then Duan's
    smearing, so the result is expected tokens (what cost is)."""
    out = np.zeros(a_new.shape)
    for j in range(a.shape[1]):
        design = np.column_stack([a[:, j], b[:, j], np.ones(len(a))])
        weights = np.linalg.lstsq(design, log_y[:, j], rcond=None)[0]
        smear = np.exp(log_y[:, j] - design @ weights).mean()
        fitted = np.column_stack([a_new[:, j], b_new[:, j], np.ones(len(a_new))]) @ weights
        out[:, j] = np.maximum(np.exp(fitted) * smear - 1.0, 0.0)
    return out


def held_out(dataset: Dataset) -> tuple[Recorded, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Each candidate's out-of-fold (quality, expected completion tokens) over every question."""
    vectors = embed_questions(dataset)
    ids = [q.question_id for q in dataset.questions]
    data = recorded(dataset, ids, vectors)
    models = tuple(dataset.models)
    fold = np.array([fold_of(qid, FOLDS) for qid in ids])
    channel = TextChannel([question_text(q) for q in dataset.questions])

    def mf(d: Recorded, tr: np.ndarray, te: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return mf_predict(d, models, tr, te)

    shape = data.correct.shape
    out = {
        name: (np.zeros(shape), np.zeros(shape))
        for name in ("mf", "mf + text quality", "mf + text tokens", "mf + text both")
    }
    log_y = np.log1p(data.completion)
    for f in range(FOLDS):
        train, test = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
        mf_q, mf_t = mf(data, train, test)
        tx_q, tx_t = channel.fit_predict(data, train, test)
        in_mf_q, in_mf_t = (v[train] for v in inner_out_of_fold(data, fold, f, mf))
        in_tx_q, in_tx_t = (v[train] for v in inner_out_of_fold(data, fold, f, channel.fit_predict))
        quality = stack_quality(in_mf_q, in_tx_q, data.correct[train], mf_q, tx_q)
        tokens = stack_tokens(in_mf_t, in_tx_t, log_y[train], mf_t, tx_t)
        for name, (q, t) in {
            "mf": (mf_q, np.expm1(mf_t)), "mf + text quality": (quality, np.expm1(mf_t)),
            "mf + text tokens": (mf_q, tokens), "mf + text both": (quality, tokens),
        }.items():  # fmt: skip
            out[name][0][test], out[name][1][test] = q, t
        print(f"fold {f + 1}/{FOLDS}", file=sys.stderr)
    return data, out


def prices_of(dataset: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per dataset model, by the shipped example's pricing: $ per 1M prompt and completion
    tokens, and what each (question, model) answer was billed (the benchmark's `answer_cost`)."""
    config = RouterConfig.model_validate(yaml.safe_load(CONFIG.read_text()))
    by_name = {m.name: m.pricing for m in config.providers.models if m.pricing is not None}
    pricing = [by_name[m] for m in dataset.models]
    billed = np.array(
        [
            [
                answer_cost(a, p) if (a := dataset.answer(q.question_id, m)) else 0.0
                for m, p in zip(dataset.models, pricing, strict=True)
            ]
            for q in dataset.questions
        ]
    )
    prompt = np.array([p.prompt_per_1m for p in pricing])
    return prompt, np.array([p.completion_per_1m for p in pricing]), billed


def route(
    models: list[str],
    data: Recorded,
    billed: np.ndarray,
    prices: tuple[np.ndarray, np.ndarray],
    quality: np.ndarray,
    tokens: np.ndarray,
) -> Frontier:
    """Each question to argmax(quality - price * expected cost), over the price sweep."""
    expected = (data.prompt_tokens[:, None] * prices[0] + tokens * prices[1]) / 1e6
    rows, n = np.arange(len(quality)), len(quality)
    singles = [
        point(name, n, int(data.correct[:, j].sum()), float(billed[:, j].sum()))
        for j, name in enumerate(models)
    ]
    curve = []
    for price in PRICES:
        pick = np.argmax(quality - price * 1000 * expected, axis=1)
        p = point(
            f"price={price:.3g}", n, int(data.correct[rows, pick].sum()), float(billed[rows, pick].sum())
        )
        curve.append(CurvePoint(knob=p.name, point=p))
    return compute_frontier(singles, curve)


def markdown(
    models: list[str],
    data: Recorded,
    billed: np.ndarray,
    prices: tuple[np.ndarray, np.ndarray],
    out: dict[str, tuple[np.ndarray, np.ndarray]],
) -> str:
    y = data.correct
    lines = [
        "| predictor | mean ROC AUC | Brier | APGR | "
        + " | ".join(f"margin at {s:.0%}" for s in (0.15, 0.25, 0.35, 0.5, 0.75))
        + " |"
    ]
    lines.append("|---" * 9 + "|")
    for name, (quality, tokens) in out.items():
        frontier = route(models, data, billed, prices, quality, tokens)
        margins = {round(m.share_of_strong, 2): m.margin for m in frontier.margins}
        mean_auc = np.mean([auc(quality[:, j], y[:, j]) for j in range(y.shape[1])])
        cells = " | ".join(
            f"{margins.get(s, float('nan')) * 100:+.1f} pts" for s in (0.15, 0.25, 0.35, 0.5, 0.75)
        )
        lines.append(
            f"| {name} | {mean_auc:.3f} | {np.mean((quality - y) ** 2):.4f} | {frontier.apgr or 0:.3f} | {cells} |"
        )
    return "\n".join(lines)


def main() -> None:
    args = cli(__doc__)
    dataset = Dataset.load(args.dataset)
    prompt, completion, billed = prices_of(dataset)
    data, out = held_out(dataset)
    text = markdown(list(dataset.models), data, billed, (prompt, completion), out)
    print(text)
    if args.docs:
        rewrite_block(args.docs, BEGIN, END, text)


if __name__ == "__main__":
    main()
