"""Latency/throughput of the domain classifier on this CPU.

    .venv/bin/python bench/bench_domain.py [--rounds 200]

Reports p50/p99 of one classification at batch 1 (encoder + head, and the head alone via
classify_vectors, which is what the router pays when it reuses one encoder pass), and
texts/second for batches of 16 and 32.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.models.domain import DomainClassifier  # noqa: E402
from app.runtime.encoder import MiniLMEncoder  # noqa: E402
from bench.latency import percentile  # noqa: E402

PROMPTS = [
    "Can my landlord keep my deposit if I gave two weeks notice?",
    "explain why the sky is blue",
    "help me write a SQL query that joins orders and customers",
    "What should I eat to lower cholesterol?",
    "Why did the Roman Empire fall?",
    "What's the derivative of x^3 ln x?",
    "how do I price my consulting services",
    "A 2.0 kg block slides down a frictionless incline of 30 degrees. What is its acceleration?",
    "what are some fun things to do in Lisbon",
    "Is it morally wrong to lie to protect a friend's feelings?",
    "How does a transformer step down voltage in a power grid?",
    "why do I procrastinate when I'm stressed",
    "What happens to bond prices when interest rates rise?",
    "Balance this equation: C3H8 + O2 -> CO2 + H2O",
    "How do vaccines train B cells?",
    "What were the main causes of the Thirty Years' War, and how did the Peace of Westphalia change Europe?",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    encoder = MiniLMEncoder()
    encoder.warm_up()
    clf = DomainClassifier(encoder=encoder)
    clf.classify(PROMPTS)

    full, head = [], []
    for i in range(args.rounds):
        text = [PROMPTS[i % len(PROMPTS)]]
        t0 = time.perf_counter()
        clf.classify(text)
        full.append((time.perf_counter() - t0) * 1e3)
        vec = encoder.encode(text)
        t0 = time.perf_counter()
        clf.classify_vectors(vec, text)
        head.append((time.perf_counter() - t0) * 1e3)

    out = {
        "batch1_ms": {"p50": statistics.median(full), "p99": percentile(full, 99)},
        "head_only_batch1_ms": {"p50": statistics.median(head), "p99": percentile(head, 99)},
    }
    for size in (16, 32):
        batch = (PROMPTS * 2)[:size]
        times = []
        for _ in range(max(5, args.rounds // size)):
            t0 = time.perf_counter()
            clf.classify(batch)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        out[f"batch{size}"] = {"p50_ms": med * 1e3, "texts_per_s": size / med}
    print(json.dumps({k: {kk: round(vv, 2) for kk, vv in v.items()} for k, v in out.items()}, indent=2))


if __name__ == "__main__":
    main()
