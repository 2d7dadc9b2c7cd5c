#!/usr/bin/env python
"""Cross-validated routing quality of svc-sr's selection algorithms on recorded answers
(docs/routing-quality.md is written from this script's output).

The questions are split into K folds by a hash of their id. For each fold, the learned
selectors are trained on the other folds (scripts/train_selectors.py `train`) and every
setting below routes only that fold's questions, through `svc-sr benchmark`'s runner (the
router's own pipeline over configs/examples/cost-aware.yaml with the decision's `algorithm`
replaced): no question is ever scored by a selector that was trained on it. The folds' rows
are then pooled. Baselines (every single model, the per-category best chosen with hindsight,
the per-question oracle) come from the recorded answers directly.

Run:  .venv/bin/python scripts/evaluate_routing.py                  (prints the table; ~3 min)
      .venv/bin/python scripts/evaluate_routing.py --plot docs/routing-quality.png --json out.json
      .venv/bin/python scripts/evaluate_routing.py --only elo          (one algorithm's rows)
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not a package; make `app` and the trainer importable
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from train_selectors import KINDS, SHARED_DATASET, embed_questions, train  # noqa: E402

from app.benchmark.baselines import Point, compute_baselines, point  # noqa: E402
from app.benchmark.dataset import Dataset, question_text  # noqa: E402
from app.benchmark.local_services import VectorTable  # noqa: E402
from app.benchmark.plot import render_accuracy_vs_cost  # noqa: E402
from app.benchmark.records import QuestionResult  # noqa: E402
from app.benchmark.runner import dataset_models, run_benchmark  # noqa: E402
from app.config.document import RouterConfig  # noqa: E402
from app.config.validate import MMLU_PRO_CATEGORIES  # noqa: E402
from app.models.elo import ELO_FILE  # noqa: E402

BASE_CONFIG = ROOT / "configs" / "examples" / "cost-aware.yaml"
REFERENCE_MODEL = "gemini-1.5-pro-002"
ELO_TRADEOFFS = (0.0, 0.05, 0.1)
ARTIFACT_OF = {"knn": "knn", "mlp": "mlp", "automix": "knn", "elo": "elo"}  # a family's artifact


def fold_of(question_id: int, folds: int) -> int:
    return int(hashlib.sha256(str(question_id).encode()).hexdigest(), 16) % folds


def settings(base: dict[str, Any], artifacts: Path) -> dict[str, RouterConfig]:
    """Each algorithm setting evaluated: name -> the configuration it routes with."""
    knn = {"knn": {"k": 40, "pretrained_path": str(artifacts / "knn_model.npz")}}
    mlp = {"mlp": {"pretrained_path": str(artifacts / "mlp_model.npz")}}
    out: dict[str, RouterConfig] = {}
    for tradeoff in (0.0, 0.04, 0.08, 0.09, 0.1, 0.15):
        out[f"knn t={tradeoff}"] = config_with(
            base, {"type": "knn", "cost_quality_tradeoff": tradeoff, "ml": knn}
        )
    for tradeoff in (0.0, 0.09, 0.1):
        out[f"mlp t={tradeoff}"] = config_with(
            base, {"type": "mlp", "cost_quality_tradeoff": tradeoff, "ml": mlp}
        )
    for threshold in (0.6, 0.7, 0.8):
        out[f"automix v={threshold}"] = config_with(base, {
            "type": "automix",
            "automix": {"verification_threshold": threshold, "cost_quality_tradeoff": 0.1},
            "ml": knn,
        })  # fmt: skip
    for tradeoff in ELO_TRADEOFFS:
        out[f"elo t={tradeoff}"] = elo_config(base, artifacts / ELO_FILE, tradeoff)
    return out


def config_with(base: dict[str, Any], algorithm: dict[str, Any]) -> RouterConfig:
    document = copy.deepcopy(base)
    document["routing"]["decisions"][0]["algorithm"] = algorithm
    return RouterConfig.model_validate(document)


def elo_config(base: dict[str, Any], ratings: Path, tradeoff: float) -> RouterConfig:
    """Elo per category: one decision per MMLU-Pro category (the domain classifier's labels),
    each starting from its category's ratings in the training folds' artifact (no outcome
    arrives during a run, so these are the ratings it selects by); the catch-all decision reads
    the overall ratings."""

    def elo(category_weighted: bool) -> dict[str, Any]:
        settings = {"initial_ratings_path": str(ratings), "category_weighted": category_weighted}
        return {"type": "elo", "cost_quality_tradeoff": tradeoff, "elo": settings}

    document = copy.deepcopy(base)
    routing = document["routing"]
    catch_all = routing["decisions"][0]
    routing["signals"] = {"domains": [{"name": c, "mmlu_categories": [c]} for c in MMLU_PRO_CATEGORIES]}
    routing["decisions"] = [
        {
            "name": category,  # the artifact's table of this name is the decision's start
            "priority": 200,
            "rules": {"operator": "OR", "conditions": [{"type": "domain", "name": category}]},
            "modelRefs": catch_all["modelRefs"],
            "algorithm": elo(True),
        }
        for category in MMLU_PRO_CATEGORIES
    ] + [{**catch_all, "algorithm": elo(False)}]
    return RouterConfig.model_validate(document)


async def evaluate(
    dataset: Dataset, vectors: dict[int, np.ndarray], folds: int, only: str | None = None
) -> dict[str, list[QuestionResult]]:
    """Every setting (or only one algorithm's), pooled over the folds."""
    by_text = {question_text(q): vectors[q.question_id] for q in dataset.questions}

    async def cached(texts: list[str]) -> np.ndarray:
        return np.stack([by_text[t] for t in texts])

    table = VectorTable(encode=cached)  # the runner reads the vectors training used; no encoder
    base = yaml.safe_load(BASE_CONFIG.read_text())
    pooled: dict[str, list[QuestionResult]] = {}
    with tempfile.TemporaryDirectory(prefix="svcsr-cv-") as scratch:
        for fold in range(folds):
            held_out = [q.question_id for q in dataset.questions if fold_of(q.question_id, folds) == fold]
            trained = [q.question_id for q in dataset.questions if fold_of(q.question_id, folds) != fold]
            artifacts = Path(scratch) / f"fold{fold}"
            train(dataset, trained, artifacts, vectors, kinds=KINDS if only is None else (ARTIFACT_OF[only],))
            for name, config in settings(base, artifacts).items():
                if only is not None and not name.startswith(only):
                    continue
                started = time.perf_counter()
                results, _ = await run_benchmark(config, dataset, held_out, vectors=table)
                pooled.setdefault(name, []).extend(results)
                print(f"fold {fold} {name}: {len(results)} questions, {time.perf_counter() - started:.1f} s",
                      file=sys.stderr)  # fmt: skip
    return pooled


def pooled_point(name: str, results: list[QuestionResult]) -> Point:
    return point(name, len(results), sum(r.correct for r in results), sum(r.cost for r in results))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", type=Path, default=SHARED_DATASET)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--plot", type=Path, help="write the accuracy-vs-cost PNG here")
    parser.add_argument("--json", type=Path, help="write every figure as JSON here")
    parser.add_argument("--only", choices=sorted(ARTIFACT_OF), help="only this algorithm's settings")
    args = parser.parse_args()
    dataset = Dataset.load(args.dataset)
    base = RouterConfig.model_validate(yaml.safe_load(BASE_CONFIG.read_text()))
    names = dataset_models(base, dataset)
    pricing = {names[m.name]: m.pricing for m in base.providers.models if m.name in names}
    baselines = compute_baselines(
        {q.question_id: q.category for q in dataset.questions}, dataset.answers, pricing
    )
    reference = next(p for p in baselines.models if p.name == REFERENCE_MODEL)
    vectors = embed_questions(dataset)  # before the event loop: a cold cache runs its own
    runs = [
        pooled_point(name, rows)
        for name, rows in asyncio.run(evaluate(dataset, vectors, args.folds, args.only)).items()
    ]
    rows = [*baselines.models, baselines.category_best, baselines.oracle, *runs]
    print(f"| | accuracy | cost ($) | per 1,000 queries | of {REFERENCE_MODEL}: accuracy | cost |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.name} | {row.accuracy:.4f} | {row.cost:.2f} | {row.cost_per_1k:.4f} "
              f"| {row.accuracy / reference.accuracy:.1%} | {row.cost / reference.cost:.1%} |")  # fmt: skip
    if args.plot:
        chosen = [r for r in runs if r.name in ("knn t=0.09", "mlp t=0.09", "automix v=0.8")]
        args.plot.write_bytes(render_accuracy_vs_cost(baselines, chosen))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"baselines": baselines.model_dump(), "runs": [r.model_dump() for r in runs]}, indent=2
            )
        )


if __name__ == "__main__":
    main()
