#!/usr/bin/env python
"""The cross-validated routing-quality tables of docs/routing-quality.md, in one command
(`make routing-quality`).

It runs what `svc-sr benchmark run --cross-validate ... --sweep ...` runs (app/benchmark/
sweep.py: each fold's predictor trained on the other folds, every question routed through the
router's own pipeline, the knob swept) for each setting below, and reports it against the fixed
mixes of models (app/benchmark/frontier.py): every single model, the hull of the random mixes of
two, the oracle, the router's curve over its knob, APGR and the margin over the hull at fixed
budgets. Each curve point carries 95 % intervals: the accuracy's (binomial) and the margin's,
paired per question against the hull's mix at the point's cost (the mix scored as its expected
accuracy on each question). `mf` is configs/examples/cost-aware.yaml itself, by question
(5 folds) and by held-out category (14 folds: the predictor never saw the category); `knn` is
the earlier selector on the same refs, by question.

Run:  make routing-quality        (rewrites the block of docs/routing-quality.md and the plot)
      .venv/bin/python scripts/evaluate_routing.py --only mf --folds 5   (one setting, one split)
About 40 minutes on 2 shared cores; the question vectors are cached on disk
(scripts/train_selectors.py `embed_questions`): the same vectors a run computes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not a package; make `app` and the trainer importable
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from train_selectors import SHARED_DATASET, embed_questions  # noqa: E402

from app.benchmark.baselines import Baselines, Point, compute_baselines, point  # noqa: E402
from app.benchmark.crossval import BY_CATEGORY  # noqa: E402
from app.benchmark.dataset import Dataset, question_text  # noqa: E402
from app.benchmark.frontier import CurvePoint, Frontier, compute_frontier  # noqa: E402
from app.benchmark.local_services import VectorTable  # noqa: E402
from app.benchmark.plot import render_accuracy_vs_cost  # noqa: E402
from app.benchmark.records import QuestionResult  # noqa: E402
from app.benchmark.runner import dataset_models  # noqa: E402
from app.benchmark.sweep import PlannedRun, RunPlan  # noqa: E402
from app.config.document import RouterConfig  # noqa: E402

BASE_CONFIG = ROOT / "configs" / "examples" / "cost-aware.yaml"
REFERENCE_MODEL = "gemini-1.5-pro-002"
BUDGETS = (0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.17, 0.2, 0.25, 0.3, 0.4)
TRADEOFFS = (0.0, 0.04, 0.08, 0.1, 0.15, 0.2, 0.3)
BEGIN, END = "<!-- evaluate_routing: begin -->", "<!-- evaluate_routing: end -->"
Z95 = 1.96


def settings(base: dict[str, Any]) -> dict[str, tuple[RouterConfig, str, tuple[str, ...]]]:
    """Name -> (the config it routes with, its sweep, the splits it is reported on)."""

    def with_algorithm(algorithm: dict[str, Any]) -> RouterConfig:
        document = json.loads(json.dumps(base))
        document["routing"]["decisions"][0]["algorithm"] = algorithm
        return RouterConfig.model_validate(document)

    return {
        "mf": (
            RouterConfig.model_validate(base),
            "budget_per_1k=" + ",".join(f"{b:g}" for b in BUDGETS),
            ("5", BY_CATEGORY),
        ),
        "knn": (
            with_algorithm({"type": "knn", "cost_quality_tradeoff": 0.1, "ml": {"knn": {"k": 40}}}),
            "cost_quality_tradeoff=" + ",".join(f"{t:g}" for t in TRADEOFFS),
            ("5",),
        ),
    }


async def evaluate(
    config: RouterConfig, sweep: str, dataset: Dataset, table: VectorTable, folds: str
) -> tuple[list[QuestionResult], dict[str, list[QuestionResult]]]:
    """The config's own rows and each knob value's, cross-validated by `folds`."""
    ids = [q.question_id for q in dataset.questions]
    run = PlannedRun(config, RunPlan(dataset, ids, folds, sweep), table)
    try:
        return await run.route(ids), await run.curve_rows()
    finally:
        run.close()


def pooled(name: str, rows: Sequence[QuestionResult]) -> Point:
    return point(name, len(rows), sum(r.correct for r in rows), sum(r.cost for r in rows))


def accuracy_interval(p: Point) -> float:
    """Half the width of the accuracy's 95 % interval (normal approximation)."""
    return Z95 * math.sqrt(p.accuracy * (1 - p.accuracy) / max(p.questions, 1))


def margin_interval(
    rows: Sequence[QuestionResult], cost_per_1k: float, hull: Sequence[Point], dataset: Dataset
) -> tuple[float, float] | None:
    """The margin over the hull's mix at this cost and half its 95 % interval, paired per
    question (None: the cost is outside the hull)."""
    for low, high in zip(hull, hull[1:], strict=False):
        if low.cost_per_1k <= cost_per_1k <= high.cost_per_1k:
            share = (cost_per_1k - low.cost_per_1k) / (high.cost_per_1k - low.cost_per_1k)
            diffs = []
            for r in rows:
                a, b = dataset.answer(r.question_id, low.name), dataset.answer(r.question_id, high.name)
                mix = (1 - share) * float(bool(a and a.correct)) + share * float(bool(b and b.correct))
                diffs.append(float(r.correct) - mix)
            d = np.asarray(diffs)
            return float(d.mean()), Z95 * float(d.std(ddof=1)) / math.sqrt(len(d))
    return None


def markdown(
    name: str, folds: str, own: Point, curve: dict[str, list[QuestionResult]], frontier: Frontier,
    reference: Point, dataset: Dataset,
) -> list[str]:  # fmt: skip
    how = "by held-out category (14 folds)" if folds == BY_CATEGORY else f"{folds} folds by question"
    apgr = "-" if frontier.apgr is None else f"{frontier.apgr:.3f}"
    lines = [
        f"### `{name}`, cross-validated {how}",
        "",
        f"APGR **{apgr}** (weak {frontier.weak}, strong {frontier.strong}; the hull's straight "
        f"line scores 0.5). The configured setting: accuracy {own.accuracy:.4f} "
        f"± {accuracy_interval(own):.4f} at ${own.cost_per_1k:.4f} per 1,000 "
        f"({own.accuracy / reference.accuracy:.1%} of {REFERENCE_MODEL}'s accuracy at "
        f"{own.cost_per_1k / reference.cost_per_1k:.1%} of its cost).",
        "",
        "| knob | accuracy (95 % interval) | per 1,000 queries | of pro: accuracy | cost "
        "| best mix of two there | margin (95 % interval) |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in frontier.curve:
        p = c.point
        margin = margin_interval(curve[c.knob], p.cost_per_1k, frontier.hull, dataset)
        shown = "-" if margin is None else f"{margin[0] * 100:+.1f} ± {margin[1] * 100:.1f} pts"
        hull = "-" if margin is None else f"{p.accuracy - margin[0]:.4f}"
        lines.append(
            f"| {c.knob} | {p.accuracy:.4f} ± {accuracy_interval(p):.4f} | ${p.cost_per_1k:.4f} "
            f"| {p.accuracy / reference.accuracy:.1%} | {p.cost_per_1k / reference.cost_per_1k:.1%} "
            f"| {hull} | {shown} |"
        )
    lines += [
        "",
        "At fixed budgets (the router's curve interpolated between its knob values):",
        "",
        "| budget per 1,000 | of pro's cost | router | best mix of two | margin |",
        "|---|---|---|---|---|",
    ]
    for m in frontier.margins:
        lines.append(
            f"| ${m.cost_per_1k:.4f} | {m.share_of_strong:.0%} | {m.router:.4f} | {m.hull:.4f} "
            f"| {m.margin * 100:+.1f} pts |"
        )
    return [*lines, ""]


def baseline_table(baselines: Baselines, frontier: Frontier, reference: Point) -> list[str]:
    lines = [
        "| | accuracy | cost ($) | per 1,000 queries | of pro: accuracy | cost |",
        "|---|---|---|---|---|---|",
    ]
    for row in [*baselines.models, baselines.category_best, baselines.oracle]:
        lines.append(
            f"| {row.name} | {row.accuracy:.4f} | {row.cost:.2f} | {row.cost_per_1k:.4f} "
            f"| {row.accuracy / reference.accuracy:.1%} | {row.cost / reference.cost:.1%} |"
        )
    hull = " -> ".join(f"{p.name} ({p.accuracy:.3f} at ${p.cost_per_1k:.4f})" for p in frontier.hull)
    return [*lines, "", f"Hull of the random mixes of two models: {hull}.", ""]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", type=Path, default=SHARED_DATASET)
    parser.add_argument("--folds", nargs="+", help="only these splits: 5 (by question), category")
    parser.add_argument("--only", choices=["mf", "knn"], help="one setting")
    parser.add_argument("--plot", type=Path, help="write the accuracy-vs-cost PNG (mf, 5 folds) here")
    parser.add_argument("--docs", type=Path, help="rewrite the marked block of this markdown file")
    parser.add_argument("--json", type=Path, help="write every curve as JSON here")
    args = parser.parse_args()
    dataset = Dataset.load(args.dataset)
    base = yaml.safe_load(BASE_CONFIG.read_text())
    config = RouterConfig.model_validate(base)
    names = dataset_models(config, dataset)
    pricing = {names[m.name]: m.pricing for m in config.providers.models if m.name in names}
    baselines = compute_baselines(
        {q.question_id: q.category for q in dataset.questions}, dataset.answers, pricing
    )
    reference = next(p for p in baselines.models if p.name == REFERENCE_MODEL)
    vectors = embed_questions(dataset)  # before the event loop: a cold cache runs its own
    by_text = {question_text(q): vectors[q.question_id] for q in dataset.questions}

    async def cached(texts: list[str]) -> np.ndarray:
        return np.stack([by_text[t] for t in texts])

    table = VectorTable(encode=cached)
    out: list[str] = []
    dump: dict[str, Any] = {}
    plotted: Frontier | None = None
    for name, (routed, sweep, splits) in settings(base).items():
        if args.only not in (None, name):
            continue
        for folds in splits:
            if args.folds and folds not in args.folds:
                continue
            started = time.perf_counter()
            rows, curve = asyncio.run(evaluate(routed, sweep, dataset, table, folds))
            own = pooled("configured", rows)
            frontier = compute_frontier(
                baselines.models,
                [CurvePoint(knob=label, point=pooled(label, r)) for label, r in curve.items()],
            )
            if not out:
                out += baseline_table(baselines, frontier, reference)
            out += markdown(name, folds, own, curve, frontier, reference, dataset)
            dump[f"{name} {folds}"] = {"configured": own.model_dump(), "frontier": frontier.model_dump()}
            if name == "mf" and folds != BY_CATEGORY and plotted is None:
                plotted = frontier
            print(f"{name} {folds}: APGR {frontier.apgr} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr)  # fmt: skip
    text = "\n".join(out)
    print(text)
    if args.plot and plotted is not None:
        args.plot.write_bytes(render_accuracy_vs_cost(baselines, [], plotted))
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1))
    if args.docs:
        rewrite_block(args.docs, BEGIN, END, text)


def rewrite_block(path: Path, begin: str, end: str, text: str) -> None:
    """Replace what lies between the markers `begin` and `end` of a markdown file with `text`."""
    document = path.read_text()
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(document):
        raise SystemExit(f"{path} has no {begin} ... {end} block")
    path.write_text(pattern.sub(lambda _: f"{begin}\n{text}\n{end}", document))


if __name__ == "__main__":
    main()
