"""The multilingual guard head (app/models/multilingual.py; docs/model-cards/multilingual-guard.md):
a softmax head (benign / jailbreak / harmful) on multilingual-e5-small vectors, trained on the
guard encoder's rows (scripts/train_guard_encoder.py: every held-out text already dropped).

    .venv/bin/python scripts/train_guard_encoder.py --rows-only --everyday --multilingual --out /tmp/ml-rows
    .venv/bin/python scripts/train_multilingual_guard.py --rows /tmp/ml-rows --out DIR
    .venv/bin/python scripts/tune_guard_band.py --unread --rows /tmp/ml-rows/tuning.jsonl \
        --encoder DIR --scores /tmp/ml-tune-scores.json       # then DIR/guard_cut.json

The regularisation C is chosen on the tuning rows (log loss), never on a held-out text; the
cut is chosen by tune_guard_band.py on the tuning rows the heads do not read. Vectors are
cached per rows file (`--cache`): the e5 pass is the slow part (about 40 ms a row here).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from guard_data import read_jsonl  # noqa: E402

from app.models.multilingual import CUT_FILE, MultilingualEncoder, SoftmaxHead  # noqa: E402

LABELS = ("benign", "jailbreak", "harmful")
C_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def vectors(encoder: MultilingualEncoder, texts: list[str], cache: Path) -> np.ndarray:
    """The e5 vectors of `texts`, from `cache` when it holds exactly these texts."""
    digest = hashlib.sha256("\n\x00".join(texts).encode()).hexdigest()
    if cache.is_file():
        held = np.load(cache)
        if str(held["digest"]) == digest:
            return held["vectors"]
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for lo in range(0, len(texts), 32):
        out[lo : lo + 32] = encoder.encode(texts[lo : lo + 32])
        if lo % 640 == 0:
            print(f"[e5] {lo}/{len(texts)}", file=sys.stderr, flush=True)
    np.savez(cache, vectors=out, digest=digest)
    return out


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-9, 1.0))))


def main(argv: list[str] | None = None) -> int:
    from sklearn.linear_model import LogisticRegression

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=Path, required=True, help="train.jsonl and tuning.jsonl")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=Path("/tmp"), help="where the vectors are cached")
    args = ap.parse_args(argv)
    train, tuning = read_jsonl(args.rows / "train.jsonl"), read_jsonl(args.rows / "tuning.jsonl")
    encoder = MultilingualEncoder.load(threads=2)  # offline: both cores
    x = vectors(encoder, [r["text"] for r in train], args.cache / "ml-guard-train.npz")
    xt = vectors(encoder, [r["text"] for r in tuning], args.cache / "ml-guard-tuning.npz")
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
