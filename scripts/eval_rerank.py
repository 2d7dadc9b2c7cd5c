#!/usr/bin/env python
"""Measure `minilm-reranker` (app/srun/rerank.py) on project-written queries:
app/models/data/rerank_eval.jsonl, each row {query, documents[4], relevant (index)}; the
distractors share words or topic with the query on purpose. Reports top-1 accuracy and MRR for
cosine only, BM25 only and the fusion the worker serves.

Run:  .venv/bin/python scripts/eval_rerank.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not a package; make `app` importable
    sys.path.insert(0, str(ROOT))

from app.runtime.encoder import shared_encoder  # noqa: E402
from app.srun.rerank import bm25_scores, fuse  # noqa: E402

DATA = ROOT / "app/models/data/rerank_eval.jsonl"


def main() -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    encoder = shared_encoder()
    ranks: dict[str, list[int]] = {"cosine": [], "bm25": [], "fused": []}
    for row in rows:
        vectors = encoder.encode([row["query"], *row["documents"]])
        cos = vectors[1:] @ vectors[0]
        bm = bm25_scores(row["query"], row["documents"])
        for name, scores in (("cosine", cos), ("bm25", bm), ("fused", fuse(cos, bm))):
            order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
            ranks[name].append(order.index(row["relevant"]) + 1)
    out = {
        name: {
            "top1": round(float(np.mean([r == 1 for r in rs])), 3),
            "mrr": round(float(np.mean([1 / r for r in rs])), 3),
        }
        for name, rs in ranks.items()
    }
    print(json.dumps({"queries": len(rows), **out}, indent=2))


if __name__ == "__main__":
    main()
