"""Cross-validated and swept runs (`svc-sr benchmark run --cross-validate ... --sweep ...`).

Cross-validation: the run's questions are split into folds, by question (K folds by a hash of
the id, so a question always falls in the same fold) or by category (one fold per category:
the predictor never saw any question of the category it routes). For each fold, every learned
predictor the config's decisions use (`knn`, `mf`, `elo`'s starting ratings, also under
automix's `ml`) is trained on the run's other questions (app/pipeline/learning/quality_fit.py,
the functions scripts/train_selectors.py ships with), written under a scratch directory, and
the fold's questions are routed by the config with those artifacts. No question is scored by a
predictor trained on it, and each trainer picks its own settings on its training questions.

Sweep: the run routes the same questions again at each value of one knob of every decision
with a learned algorithm (`budget_per_1k`, `cost_quality_tradeoff`): the router's curve the
report sets against the hull of fixed mixes (app/benchmark/frontier.py).
"""

from __future__ import annotations

import copy
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.benchmark.dataset import Dataset, question_text
from app.benchmark.local_services import VectorTable
from app.config.document import RouterConfig
from app.models.elo import ELO_FILE, initial_ratings_from, save_initial_ratings
from app.models.quality_mf import MF_FILE
from app.models.selection import KNN_FILE, save_knn, save_mf
from app.pipeline.learning.quality_fit import Recorded, fit_knn, fit_mf
from app.runtime.encoder import token_counter

KNOBS = ("budget_per_1k", "cost_quality_tradeoff")
FillProgress = Callable[[int, int], None]
KNN_PRIOR_WEIGHT = 5.0  # the shipped knn artifact's (scripts/train_selectors.py)
BY_CATEGORY = "category"


class CrossValidationError(ValueError):
    """A cross-validation or sweep the config or the dataset cannot give (bad input)."""


def fold_of(question_id: int, folds: int) -> int:
    return int(hashlib.sha256(str(question_id).encode()).hexdigest(), 16) % folds


def parse_folds(spec: str) -> str:
    """`category`, or a number of folds by question (2-20)."""
    if spec == BY_CATEGORY or (spec.isdigit() and 2 <= int(spec) <= 20):
        return spec
    raise CrossValidationError(f"--cross-validate takes a number of folds (2-20) or 'category', not {spec!r}")


def split(dataset: Dataset, ids: Sequence[int], spec: str) -> dict[str, list[int]]:
    """Fold name -> its question ids (in run order); folds without questions are left out."""
    folds: dict[str, list[int]] = {}
    for qid in ids:
        question = dataset.question(qid)
        if question is None:
            continue
        name = question.category if spec == BY_CATEGORY else str(fold_of(qid, int(spec)))
        folds.setdefault(name, []).append(qid)
    if len(folds) < 2:
        raise CrossValidationError(f"cross-validation by {spec} needs questions in two folds at least")
    return dict(sorted(folds.items()))


def parse_sweep(spec: str) -> tuple[str, list[float]]:
    """`budget_per_1k=0.05,0.1,0.2` -> the knob and its values."""
    knob, _, values = spec.partition("=")
    if knob not in KNOBS:
        raise CrossValidationError(
            f"--sweep takes one of {', '.join(KNOBS)}, as KNOB=V1,V2,...; got {spec!r}"
        )
    try:
        numbers = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise CrossValidationError(f"--sweep {knob}: give numbers, as {knob}=0.1,0.2") from None
    if not numbers or any(not np.isfinite(v) or v < 0 for v in numbers):
        raise CrossValidationError(f"--sweep {knob}: give one or more numbers >= 0")
    if knob == "cost_quality_tradeoff" and any(v > 1 for v in numbers):
        raise CrossValidationError("--sweep cost_quality_tradeoff: values lie in [0, 1]")
    return knob, numbers


def with_knob(config: RouterConfig, knob: str, value: float) -> RouterConfig:
    """`config` with `algorithm.<knob> = value` on every decision whose algorithm learns
    (CrossValidationError when none does, or when the knob does not apply to one)."""
    document = config.to_document()
    changed = 0
    for decision in document.get("routing", {}).get("decisions", []):
        algorithm = decision.get("algorithm") or {}
        kind = algorithm.get("type")
        if kind not in ("knn", "mlp", "mf", "elo"):
            continue
        if knob == "budget_per_1k" and kind != "mf":
            raise CrossValidationError(f"decision {decision['name']}: budget_per_1k needs algorithm.type mf")
        algorithm[knob] = value
        if knob == "cost_quality_tradeoff":
            algorithm.pop("budget_per_1k", None)  # the tradeoff applies only without a budget
        changed += 1
    if not changed:
        raise CrossValidationError("--sweep needs a decision whose algorithm is knn, mlp, mf or elo")
    return RouterConfig.model_validate(document)


def recorded(dataset: Dataset, ids: Sequence[int], vectors: Mapping[int, np.ndarray]) -> Recorded:
    """The questions' vectors and every dataset model's outcomes and completion tokens (a
    missing answer counts as wrong, no tokens); prompt tokens by the router's own count."""
    models = dataset.models
    correct = np.zeros((len(ids), len(models)), dtype=bool)
    completion = np.zeros((len(ids), len(models)), dtype=np.float64)
    for row, qid in enumerate(ids):
        for col, model in enumerate(models):
            answer = dataset.answer(qid, model)
            if answer is not None:
                correct[row, col], completion[row, col] = answer.correct, answer.completion_tokens
    count = token_counter()
    prompt = np.array(
        [count(question_text(q)) for qid in ids if (q := dataset.question(qid))], dtype=np.float64
    )
    stacked = np.stack([vectors[qid] for qid in ids]) if vectors else np.zeros((len(ids), 0), np.float32)
    return Recorded(stacked, correct, completion, prompt)


@dataclass
class FoldTrainer:
    """Trains a fold's artifacts once (cached by fold) and gives the config that uses them."""

    config: RouterConfig
    dataset: Dataset
    planned: list[int]
    folds: dict[str, list[int]]
    table: VectorTable
    scratch: Path | None = None  # made on the first fold's training
    _configs: dict[str, RouterConfig] = field(default_factory=dict)

    def kinds(self) -> set[str]:
        """The artifacts the config's decisions need (CrossValidationError: one it cannot train)."""
        needed: set[str] = set()
        for decision in self.config.routing.decisions:
            algorithm = decision.algorithm
            kind = algorithm.type
            if kind == "automix" and algorithm.ml is not None:
                kind = (
                    "mf" if algorithm.ml.mf is not None else "mlp" if algorithm.ml.mlp is not None else "knn"
                )
            if kind == "mlp":
                raise CrossValidationError(
                    f"decision {decision.name}: --cross-validate trains knn, mf and elo predictors; "
                    "train mlp per fold with scripts/train_selectors.py"
                )
            if kind in ("knn", "mf") or (
                kind == "elo" and algorithm.elo and algorithm.elo.initial_ratings_path
            ):
                needed.add(kind)
        if not needed:
            raise CrossValidationError(
                "--cross-validate needs a decision with a knn, mf or elo (initial ratings) predictor"
            )
        return needed

    async def fold_config(self, fold: str, progress: FillProgress | None = None) -> RouterConfig:
        """The config routing `fold`: its predictors trained on the other folds' questions
        (`progress`: the embedding of those questions, the first time)."""
        if fold not in self._configs:
            held = set(self.folds[fold])
            train = [qid for qid in self.planned if qid not in held]
            if self.scratch is None:
                self.scratch = Path(tempfile.mkdtemp(prefix="svcsr-cv-"))
            out = self.scratch / f"fold-{len(self._configs)}"
            await self._train(train, out, progress)
            self._configs[fold] = _pointed_at(self.config, out)
        return self._configs[fold]

    async def _train(self, ids: list[int], out: Path, progress: FillProgress | None) -> None:
        kinds = self.kinds()
        dataset_models = tuple(self.dataset.models)
        texts = [question_text(q) for qid in ids if (q := self.dataset.question(qid))]
        vectors = {}
        if kinds & {"knn", "mf"}:
            await self.table.fill(texts, progress=progress)
            vectors = dict(zip(ids, await self.table.embed(texts), strict=True))
        data = recorded(self.dataset, ids, vectors)
        if "knn" in kinds:
            save_knn(out / KNN_FILE, fit_knn(data, dataset_models, prior_weight=KNN_PRIOR_WEIGHT))
        if "mf" in kinds:
            save_mf(out / MF_FILE, fit_mf(data, dataset_models))
        if "elo" in kinds:
            categories = [q.category for qid in ids if (q := self.dataset.question(qid))]
            outcomes = {m: data.correct[:, col].tolist() for col, m in enumerate(dataset_models)}
            tokens = {m: float(data.completion[:, col].mean()) for col, m in enumerate(dataset_models)}
            save_initial_ratings(out / ELO_FILE, initial_ratings_from(outcomes, categories, tokens))

    def close(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _pointed_at(config: RouterConfig, out: Path) -> RouterConfig:
    """`config` with every learned decision's artifact path set to the fold's directory."""
    document = copy.deepcopy(config.to_document())
    for decision in document.get("routing", {}).get("decisions", []):
        algorithm: dict[str, Any] = decision.get("algorithm") or {}
        kind = algorithm.get("type")
        if kind == "elo" and (algorithm.get("elo") or {}).get("initial_ratings_path"):
            algorithm["elo"]["initial_ratings_path"] = str(out / ELO_FILE)
            continue
        ml = algorithm.get("ml")
        if kind in ("knn", "mf") or (kind == "automix" and ml):
            ml = algorithm.setdefault("ml", {})
            family = kind if kind in ("knn", "mf") else ("mf" if ml.get("mf") is not None else "knn")
            settings = ml.get(family) or {}
            settings["pretrained_path"] = str(out / (KNN_FILE if family == "knn" else MF_FILE))
            ml[family] = settings
            ml.pop("models_path", None)
    return RouterConfig.model_validate(document)
