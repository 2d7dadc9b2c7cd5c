"""The multilingual guard head (app/models/multilingual.py; docs/model-cards/multilingual-guard.md):
a softmax head (benign / jailbreak / harmful) on multilingual-e5-small vectors, trained on the
guard encoder's rows (scripts/train_guard_encoder.py: every held-out text already dropped).

    .venv/bin/python scripts/train_guard_encoder.py --rows-only --everyday --multilingual --out /tmp/ml-rows
    .venv/bin/python scripts/train_multilingual_guard.py --rows /tmp/ml-rows --out DIR
    .venv/bin/python scripts/tune_guard_band.py --unread --rows /tmp/ml-rows/tuning.jsonl \
        --encoder DIR --scores /tmp/ml-tune-scores.json       # then DIR/guard_cut.json

The regularisation C is chosen on the tuning rows (log loss), never on a held-out text; the
cut is chosen by tune_guard_band.py on the tuning rows the heads do not read. Vectors are
cached by text in the domain head's e5 cache (`--cache`): the e5 pass is the slow part (about
40 ms a row on a 2-core AVX2 machine).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import train_domain as td  # noqa: E402
from guard_data import read_jsonl  # noqa: E402

from app.models.multilingual import CUT_FILE, MAX_TOKENS, MultilingualEncoder, SoftmaxHead  # noqa: E402

LABELS = ("benign", "jailbreak", "harmful")
C_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-9, 1.0))))


def main(argv: list[str] | None = None) -> int:
    from sklearn.linear_model import LogisticRegression

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=Path, required=True, help="train.jsonl and tuning.jsonl")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--cache", type=Path, default=td.parse_args([]).cache_dir, help="the vector cache's folder"
    )
    args = ap.parse_args(argv)
    train, tuning = read_jsonl(args.rows / "train.jsonl"), read_jsonl(args.rows / "tuning.jsonl")
    encoder = MultilingualEncoder.load(threads=2)  # offline: both cores
    # the domain head's e5 cache (keyed by text): a text either script embedded is not embedded again
    cache = td.EmbeddingCache(args.cache / f"e5-small-q4-{MAX_TOKENS}.npz")
    x = cache.embed([r["text"] for r in train], encoder, batch=32)
    xt = cache.embed([r["text"] for r in tuning], encoder, batch=32)
    y = np.array([LABELS.index(r["label"]) for r in train])
    yt = np.array([LABELS.index(r["label"]) for r in tuning])
    losses: dict[float, float] = {}
    models = {}
    for c in C_GRID:
        model = LogisticRegression(C=c, max_iter=3000, class_weight="balanced")
        model.fit(x, y)
        losses[c] = log_loss(model.predict_proba(xt), yt)
        models[c] = model
        print(f"[C] {c}: tuning log loss {losses[c]:.4f}")
    best = min(losses, key=lambda c: losses[c])
    model = models[best]
    # weights as (dim, classes) in LABELS order, which is the model's classes_ order (0, 1, 2)
    head = SoftmaxHead(model.coef_.T, model.intercept_, list(LABELS))
    head.save(
        args.out,
        {
            "head": "sklearn LogisticRegression, class_weight balanced",
            "C": best,
            "tuning_log_loss": losses,
            "train_rows": dict(Counter(r["label"] for r in train)),
            "train_sources": dict(Counter(f"{r['label']}/{r['source']}" for r in train)),
            "tuning_rows": dict(Counter(r["label"] for r in tuning)),
            "rows": "scripts/train_guard_encoder.py --rows-only --everyday --multilingual",
        },
    )
    if not (args.out / CUT_FILE).is_file():  # tune_guard_band.py --unread chooses the real one
        (args.out / CUT_FILE).write_text(json.dumps({"cut": 0.5}) + "\n")
    print("[train] wrote", args.out, "C", best)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
