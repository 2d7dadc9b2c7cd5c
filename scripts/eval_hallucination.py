"""Measure the `hallucination` detector on tests/data/hallucination_eval.jsonl.

Each line: a context and the answer's sentences, each labelled supported or not (project
written: paraphrases of the context vs. wrong figures, wrong entities, invented claims).
Positive = unsupported. Prints precision/recall/F1 per threshold and the per-answer latency
(p50/p99) with the Router's MiniLM encoder; docs/hallucination.md quotes the output.

    PYTHONPATH=$PWD .venv/bin/python scripts/eval_hallucination.py [--thresholds 0.4,0.5,0.6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.pipeline.answers.hallucination import detect
from app.pipeline.services import encoder_embed
from app.runtime.encoder import shared_encoder

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "hallucination_eval.jsonl"


def load() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


async def run(thresholds: list[float], lexical_only: bool) -> dict[str, Any]:
    embed = None if lexical_only else encoder_embed(shared_encoder())
    items = load()
    if embed is not None:
        await embed(["warm up"])
    scored: list[tuple[float, bool]] = []  # (support, truly unsupported)
    latencies: list[float] = []
    for item in items:
        answer = " ".join(s["text"] for s in item["sentences"])
        started = time.perf_counter()
        result = await detect(answer, [item["context"]], embed, 0.0)
        latencies.append((time.perf_counter() - started) * 1000)
        by_text = {s.text: s.support for s in result.judged}
        for sentence in item["sentences"]:
            support = by_text.get(sentence["text"], 1.0)  # not judged: counted as supported
            scored.append((support, not sentence["supported"]))
    rows = []
    for threshold in thresholds:
        tp = sum(1 for support, bad in scored if bad and support < threshold)
        fp = sum(1 for support, bad in scored if not bad and support < threshold)
        fn = sum(1 for support, bad in scored if bad and support >= threshold)
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append(
            {
                "threshold": threshold,
                "precision": round(precision, 3),
                "recall": round(recall, 3),
                "f1": round(f1, 3),
            }
        )
    return {
        "answers": len(items),
        "sentences": len(scored),
        "unsupported": sum(1 for _, bad in scored if bad),
        "encoder": not lexical_only,
        "latency_ms_p50": round(float(np.percentile(latencies, 50)), 2),
        "latency_ms_p99": round(float(np.percentile(latencies, 99)), 2),
        "by_threshold": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--thresholds", default="0.3,0.35,0.4,0.45,0.5,0.55,0.6,0.65")
    parser.add_argument("--lexical-only", action="store_true", help="no encoder (similarity at the floor)")
    args = parser.parse_args()
    thresholds = [float(t) for t in args.thresholds.split(",")]
    print(json.dumps(asyncio.run(run(thresholds, args.lexical_only)), indent=2))


if __name__ == "__main__":
    main()
