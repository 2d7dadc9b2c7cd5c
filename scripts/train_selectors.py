#!/usr/bin/env python
"""Train svc-sr's learned model selectors (`algorithm.type: knn | mlp | mf`) on recorded answers.

Data: a dataset directory in the ../shared/data/mmlu-pro format (questions.jsonl and
model_results.csv: what each model answered and whether it was right). Each question's text
(the question field, as the router sees it) is embedded with svc-sr's MiniLM encoder; the
selectors learn, from the vector, each model's chance to answer right.

- knn: the training vectors projected to 64 PCA dimensions and stored int8 (the neighbour
  search at run time), with every question's per-model outcomes.
- mlp: one hidden layer of 128 ReLU units, one sigmoid output per model (scikit-learn's
  MLPClassifier on the multi-label outcomes), exported to numpy arrays.
- mf: matrix factorisation over a learned question embedding and per-model embeddings, with a
  neighbour vote, calibrated, with per-model completion-token heads and a reference set for
  `budget_per_1k` (app/pipeline/learning/quality_fit.py `fit_mf`; numpy, about 30 s).
- elo: starting Elo ratings per model, overall and per category (`algorithm.elo.
  initial_ratings_path`): each recorded answer is a game against the anchor, and a rating is
  where the online update settles on those games (app/models/elo.py). No vectors needed.

Run:  .venv/bin/python scripts/train_selectors.py          (writes app/models/artifacts/selection/)
      .venv/bin/python scripts/train_selectors.py --dataset DIR --out DIR [--kinds mf elo]
`svc-sr benchmark run --cross-validate` trains the mf/knn artifacts of each fold itself
(app/benchmark/crossval.py), with the same functions.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not a package; make `app` importable
    sys.path.insert(0, str(ROOT))

from app.benchmark.crossval import KNN_PRIOR_WEIGHT, recorded  # noqa: E402
from app.benchmark.dataset import Dataset, question_text  # noqa: E402
from app.benchmark.local_services import VectorTable, shared_vector_table  # noqa: E402
from app.models.elo import ELO_FILE, initial_ratings_from, save_initial_ratings  # noqa: E402
from app.models.quality_mf import MF_FILE  # noqa: E402
from app.models.selection import (  # noqa: E402
    ARTIFACT_DIR,
    KNN_FILE,
    MLP_FILE,
    MlpQuality,
    save_knn,
    save_mf,
    save_mlp,
)
from app.pipeline.learning.quality_fit import fit_knn, fit_mf  # noqa: E402
from app.runtime.encoder import DEFAULT_MAX_TOKENS, vector_cache_name  # noqa: E402

SHARED_DATASET = ROOT.parent / "shared" / "data" / "mmlu-pro"
CACHE_DIR = Path.home() / ".cache" / "svc-sr" / "selection"
KNN_K = 40
MLP_HIDDEN = 128
SEED = 0
KINDS = ("knn", "mlp", "mf", "elo")


def embed_questions(dataset: Dataset) -> dict[int, np.ndarray]:
    """Every question's MiniLM vector (the benchmark's vector table, so the same encoder path as
    a run), cached on disk per dataset fingerprint: embedding takes about a minute on 2 cores."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cache = CACHE_DIR / f"vectors-{dataset.fingerprint[:16]}-{vector_cache_name(DEFAULT_MAX_TOKENS)}.npz"
    ids = [q.question_id for q in dataset.questions]
    if cache.exists():
        with np.load(cache) as data:
            if list(data["ids"]) == ids:
                return dict(zip(ids, data["vectors"], strict=True))
    table = shared_vector_table()
    texts = [question_text(q) for q in dataset.questions]
    started = time.perf_counter()
    vectors = asyncio.run(_embed(table, texts))
    print(f"embedded {len(texts)} questions in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    np.savez(cache, ids=np.array(ids), vectors=vectors)
    return dict(zip(ids, vectors, strict=True))


async def _embed(table: VectorTable, texts: list[str]) -> np.ndarray:
    await table.fill(texts)
    return await table.embed(texts)


def fit_mlp(
    vectors: np.ndarray, correct: np.ndarray, completion: np.ndarray, models: tuple[str, ...]
) -> MlpQuality:
    from sklearn.neural_network import MLPClassifier

    mlp = MLPClassifier(
        hidden_layer_sizes=(MLP_HIDDEN,), alpha=1e-3, max_iter=60, early_stopping=True, random_state=SEED
    )
    mlp.fit(vectors, correct.astype(int))
    return MlpQuality(
        models=models,
        mean_completion_tokens=completion.mean(axis=0),
        hidden_weights=mlp.coefs_[0].astype(np.float32),
        hidden_bias=mlp.intercepts_[0].astype(np.float32),
        output_weights=mlp.coefs_[1].astype(np.float32),
        output_bias=mlp.intercepts_[1].astype(np.float32),
    )


def train(
    dataset: Dataset,
    ids: list[int],
    out: Path,
    vectors: dict[int, np.ndarray] | None = None,
    kinds: tuple[str, ...] = KINDS,
) -> dict[str, object]:
    """The `kinds` artifacts (knn, mlp, mf, elo) trained on the questions `ids`, written to `out`."""
    models = tuple(dataset.models)
    needs_vectors = bool({"knn", "mlp", "mf"} & set(kinds))
    table = (vectors if vectors is not None else embed_questions(dataset)) if needs_vectors else {}
    data = recorded(dataset, ids, table)
    correct, completion = data.correct, data.completion
    meta: dict[str, object] = {
        "dataset_fingerprint": dataset.fingerprint,
        "trained_questions": len(ids),
        "trained_ids_sha256": hashlib.sha256(json.dumps(ids).encode()).hexdigest(),
    }
    if "elo" in kinds:
        category = {q.question_id: q.category for q in dataset.questions}
        ratings = initial_ratings_from(
            {m: correct[:, col].tolist() for col, m in enumerate(models)},
            [category[qid] for qid in ids],
            dict(zip(models, completion.mean(axis=0).tolist(), strict=True)),
            meta=meta,
        )
        save_initial_ratings(out / ELO_FILE, ratings)
    if needs_vectors:
        meta = {**meta, "encoder": "MiniLM-L6 int8 (app/runtime/encoder.py)"}
        if "knn" in kinds:
            save_knn(out / KNN_FILE, fit_knn(data, models, KNN_K, prior_weight=KNN_PRIOR_WEIGHT), meta)
        if "mlp" in kinds:
            save_mlp(out / MLP_FILE, fit_mlp(data.vectors, correct, completion, models), meta)
        if "mf" in kinds:
            save_mf(out / MF_FILE, fit_mf(data, models), meta)
    return meta


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", type=Path, default=SHARED_DATASET)
    parser.add_argument("--out", type=Path, default=ARTIFACT_DIR)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = parser.parse_args()
    dataset = Dataset.load(args.dataset)
    meta = train(dataset, [q.question_id for q in dataset.questions], args.out, kinds=tuple(args.kinds))
    sizes = {p.name: p.stat().st_size for p in sorted(args.out.glob("*_*.*"))}
    print(json.dumps({**meta, "artifacts": sizes}, indent=2))


if __name__ == "__main__":
    main()
