#!/usr/bin/env python
"""The cross-validated routing-quality tables of docs/routing-quality.md, in one command.

It runs what `svc-sr benchmark run --cross-validate ... --sweep ...` runs (app/benchmark/
sweep.py: the folds' predictors trained on the other folds, every question routed through the
router's own pipeline, the knob swept) for each configuration below, by question (5 folds)
and by held-out category (14 folds), and reports them against the fixed mixes of models
(app/benchmark/frontier.py): every single model, the hull of the random mixes of two, the
oracle, the router's curve over its knob, APGR and the margin over the hull at fixed budgets.
The question vectors are cached on disk (scripts/train_selectors.py `embed_questions`): the
same vectors a run computes, so the figures are the CLI's.

Run:  .venv/bin/python scripts/evaluate_routing.py                       (prints the tables)
      .venv/bin/python scripts/evaluate_routing.py --docs docs/routing-quality.md --plot docs/routing-quality.png
      .venv/bin/python scripts/evaluate_routing.py --only mf --folds 5    (one setting, one split)
About 15 minutes on 2 cores (most of it training 2 x 19 folds' predictors); set
OPENBLAS_NUM_THREADS=1 on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
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
from app.benchmark.runner import dataset_models  # noqa: E402
from app.benchmark.sweep import PlannedRun, RunPlan  # noqa: E402
from app.config.document import RouterConfig  # noqa: E402

BASE_CONFIG = ROOT / "configs" / "examples" / "cost-aware.yaml"
REFERENCE_MODEL = "gemini-1.5-pro-002"
BUDGETS = (0.03, 0.04, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.25, 0.3, 0.4, 0.5)
TRADEOFFS = (0.0, 0.04, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3)
BEGIN, END = "<!-- evaluate_routing: begin -->", "<!-- evaluate_routing: end -->"


def settings(base: dict[str, Any]) -> dict[str, tuple[RouterConfig, str]]:
    """Name -> (the config it routes with, its sweep). `mf`: the shipped example itself."""

    def with_algorithm(algorithm: dict[str, Any]) -> RouterConfig:
        document = json.loads(json.dumps(base))
        document["routing"]["decisions"][0]["algorithm"] = algorithm
        return RouterConfig.model_validate(document)

    return {
        "mf": (RouterConfig.model_validate(base), "budget_per_1k=" + ",".join(f"{b:g}" for b in BUDGETS)),
        "knn": (
            with_algorithm({"type": "knn", "cost_quality_tradeoff": 0.1, "ml": {"knn": {"k": 40}}}),
            "cost_quality_tradeoff=" + ",".join(f"{t:g}" for t in TRADEOFFS),
        ),
    }


async def evaluate(
    config: RouterConfig, sweep: str, dataset: Dataset, table: VectorTable, folds: str
) -> tuple[Point, list[CurvePoint]]:
    """The config's own point and its curve, cross-validated by `folds`."""
    ids = [q.question_id for q in dataset.questions]
    run = PlannedRun(config, RunPlan(dataset, ids, folds, sweep), table)
    try:
        rows = await run.route(ids)
        curve = await run.curve()
    finally:
        run.close()
    own = point("configured", len(rows), sum(r.correct for r in rows), sum(r.cost for r in rows))
    return own, curve


def markdown(name: str, folds: str, own: Point, frontier: Frontier, reference: Point) -> list[str]:
    how = "by held-out category (14 folds)" if folds == BY_CATEGORY else f"{folds} folds by question"
    apgr = "-" if frontier.apgr is None else f"{frontier.apgr:.3f}"
    lines = [
        f"### `{name}`, cross-validated {how}",
        "",
        f"APGR **{apgr}** (weak {frontier.weak}, strong {frontier.strong}; the hull's straight line scores 0.5). "
        f"The configured setting: accuracy {own.accuracy:.4f} at ${own.cost_per_1k:.4f} per 1,000 "
        f"({own.accuracy / reference.accuracy:.1%} of {REFERENCE_MODEL}'s accuracy at "
        f"{own.cost_per_1k / reference.cost_per_1k:.1%} of its cost).",
        "",
        "| knob | accuracy | per 1,000 queries | of pro: accuracy | cost | best mix of two there | margin |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in frontier.curve:
        p = c.point
        hull = _hull_at(frontier, p.cost_per_1k)
        margin = "-" if hull is None else f"{(p.accuracy - hull) * 100:+.1f} pts"
        lines.append(
            f"| {c.knob} | {p.accuracy:.4f} | ${p.cost_per_1k:.4f} | {p.accuracy / reference.accuracy:.1%} "
            f"| {p.cost_per_1k / reference.cost_per_1k:.1%} | {'-' if hull is None else f'{hull:.4f}'} | {margin} |"
        )
    lines += [
        "",
        "| budget per 1,000 | of pro's cost | router (its curve) | best mix of two | margin |",
        "|---|---|---|---|---|",
    ]
    for m in frontier.margins:
        lines.append(
            f"| ${m.cost_per_1k:.4f} | {m.share_of_strong:.0%} | {m.router:.4f} | {m.hull:.4f} | {m.margin * 100:+.1f} pts |"
        )
    return [*lines, ""]


def _hull_at(frontier: Frontier, cost: float) -> float | None:
    from app.benchmark.frontier import hull_accuracy

    return hull_accuracy(frontier.hull, cost)


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
    parser.add_argument("--folds", nargs="+", default=["5", BY_CATEGORY], help="5 (by question), category")
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
    for name, (routed, sweep) in settings(base).items():
        if args.only not in (None, name):
            continue
        for folds in args.folds:
            own, curve = asyncio.run(evaluate(routed, sweep, dataset, table, folds))
            frontier = compute_frontier(baselines.models, curve)
            if not out:
                out += baseline_table(baselines, frontier, reference)
            out += markdown(name, folds, own, frontier, reference)
            dump[f"{name} {folds}"] = {"configured": own.model_dump(), "frontier": frontier.model_dump()}
            if name == "mf" and folds != BY_CATEGORY and plotted is None:
                plotted = frontier
            print(f"{name} {folds}: APGR {frontier.apgr}", file=sys.stderr)
    text = "\n".join(out)
    print(text)
    if args.plot and plotted is not None:
        args.plot.write_bytes(render_accuracy_vs_cost(baselines, [], plotted))
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1))
    if args.docs:
        document = args.docs.read_text()
        block = f"{BEGIN}\n{text}\n{END}"
        pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
        if not pattern.search(document):
            raise SystemExit(f"{args.docs} has no {BEGIN} ... {END} block")
        args.docs.write_text(pattern.sub(lambda _: block, document))


if __name__ == "__main__":
    main()
