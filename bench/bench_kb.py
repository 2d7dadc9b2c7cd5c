"""The `kb` signal measured: label accuracy on MMLU-Pro questions and scoring latency.

Accuracy: four MMLU-Pro categories (/work/shared/data/mmlu-pro/questions.jsonl); per
category `--exemplars` questions form the knowledge base and `--held-out` others are the
requests (fixed seed). Each held-out question is embedded with the router's encoder (MiniLM)
and its winning label compared with its category, for `max` and `knn` (k = 5, 10).

Latency: one rule evaluated through KnowledgeBaseEvaluator (the query vector precomputed, as
the embedding signal shares it) over bases of 1k and 10k exemplars; 10k is padded with random
unit vectors (scoring cost does not depend on content). Also the map's PCA time.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_kb.py [--exemplars 100 --held-out 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.config.signals import KnowledgeBaseSignal
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.kb import KnowledgeBaseEvaluator, KnowledgeBaseFeed
from app.pipeline.signals.kb_data import (
    KbEntry,
    KbVectors,
    KnowledgeBase,
    KnowledgeBasesDocument,
    LoadedKb,
    score_labels,
)
from app.runtime.encoder import shared_encoder
from app.storage.kb_map import project

DATA = Path("/work/shared/data/mmlu-pro/questions.jsonl")
CATEGORIES = ("law", "biology", "history", "economics")


def split(exemplars: int, held_out: int, seed: int = 0) -> tuple[list[KbEntry], list[tuple[str, str]]]:
    by_category: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for line in DATA.read_text().split("\n"):  # not splitlines: questions hold U+2028
        if not line.strip():
            continue
        row = json.loads(line)
        if row["category"] in by_category:
            by_category[row["category"]].append(row["question"])
    rng = random.Random(seed)
    kb, test = [], []
    for category, questions in by_category.items():
        rng.shuffle(questions)
        kb += [KbEntry(text=q, label=category) for q in questions[:exemplars]]
        test += [(q, category) for q in questions[exemplars : exemplars + held_out]]
    return kb, test


def embed(texts: list[str]) -> np.ndarray:
    encoder = shared_encoder()
    return np.concatenate([np.asarray(encoder.encode(texts[i : i + 64])) for i in range(0, len(texts), 64)])


def base_of(entries: list[KbEntry]) -> KnowledgeBase:
    return KnowledgeBase(
        name="bench", entries=entries, content_hash="x", status="active", created_at="", updated_at=""
    )


class Source:
    """A store holding one active base (what a Router's feed reads)."""

    def __init__(self, base: KnowledgeBase, matrix: np.ndarray) -> None:
        self.document = KnowledgeBasesDocument(revision=1, bases={base.name: base})
        self.stored = KbVectors.of(matrix, base.content_hash, 1)

    def revision(self) -> int:
        return 1

    def load(self) -> KnowledgeBasesDocument:
        return self.document

    def vectors(self, name: str) -> KbVectors | None:
        return self.stored


async def evaluate_p50(source: Source, query: np.ndarray, method: str, runs: int = 300) -> dict[str, float]:
    feed = KnowledgeBaseFeed(source)  # refresh every 1 s, as a Router's
    rule = KnowledgeBaseSignal(
        name="r", kb="bench", method="knn" if method == "knn" else "max", threshold=0.3
    )
    evaluator = KnowledgeBaseEvaluator([rule], feed)
    await evaluator.warm_up()

    async def vector(texts: list[str]) -> np.ndarray:
        return query[None, :]

    times, cpu = [], []
    for _ in range(runs):
        ctx = SignalContext([{"role": "user", "content": "q"}], embed=vector)
        await ctx.query_vector()  # shared with other signals: not the kb signal's cost
        start, start_cpu = time.perf_counter(), time.thread_time()
        await evaluator.evaluate(ctx, frozenset({"r"}))
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.thread_time() - start_cpu) * 1000)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 3),
        "p99_ms": round(times[int(0.99 * len(times))], 3),
        # CPU time of the calling thread (BLAS single-threaded): the cost without the host's contention
        "cpu_p50_ms": round(statistics.median(cpu), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--exemplars", type=int, default=100)
    parser.add_argument("--held-out", type=int, default=50)
    parser.add_argument("--latency-only", action="store_true", help="random unit vectors, no encoder")
    args = parser.parse_args()
    kb, test = split(args.exemplars, args.held_out)
    report: dict[str, Any] = {"categories": CATEGORIES, "exemplars_per_label": args.exemplars}
    if args.latency_only:
        kb_vectors = np.random.default_rng(1).normal(size=(len(kb), 384)).astype(np.float32)
        kb_vectors /= np.linalg.norm(kb_vectors, axis=1, keepdims=True)
        test_vectors = kb_vectors[:1]
    else:
        kb_vectors = embed([e.text for e in kb])
        test_vectors = embed([q for q, _ in test])
        report.update(held_out_per_label=args.held_out, accuracy=accuracy(kb, kb_vectors, test, test_vectors))
    report["latency"] = latency(kb, kb_vectors, test_vectors[0])
    print(json.dumps(report, indent=1))


def accuracy(
    kb: list[KbEntry], kb_vectors: np.ndarray, test: list[tuple[str, str]], test_vectors: np.ndarray
) -> dict[str, float]:
    loaded = LoadedKb(base_of(kb), kb_vectors)
    out = {}
    for method, k in (("max", 1), ("knn", 5), ("knn", 10), ("knn", 25)):
        hits = 0
        for (_, truth), vector in zip(test, test_vectors, strict=True):
            scores, _ = score_labels(loaded, vector, method, k)
            hits += max(scores, key=scores.__getitem__) == truth
        out[f"{method}" + (f"@{k}" if method == "knn" else "")] = round(hits / len(test), 3)
    return out


def latency(kb: list[KbEntry], kb_vectors: np.ndarray, query: np.ndarray) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    latency: dict[str, Any] = {}
    for size in (1000, 10_000):
        pad = rng.normal(size=(max(0, size - len(kb)), kb_vectors.shape[1])).astype(np.float32)
        pad /= np.linalg.norm(pad, axis=1, keepdims=True)
        matrix = np.concatenate([kb_vectors, pad])[:size]
        entries = (kb * (size // len(kb) + 1))[:size]
        source = Source(base_of(entries), matrix)
        start = time.perf_counter()
        project(matrix)
        pca_ms = (time.perf_counter() - start) * 1000
        latency[str(size)] = {
            "max": asyncio.run(evaluate_p50(source, query, "max")),
            "knn": asyncio.run(evaluate_p50(source, query, "knn")),
            "map_pca_ms": round(pca_ms, 1),
        }
    return latency


if __name__ == "__main__":
    main()
