"""What learned model selection adds to a request: one decision's `order()` over its ten
modelRefs, given the request's MiniLM vector (the Router encodes each request once and the
selector reuses that vector, so the encoder pass is not selection's cost).

    .venv/bin/python bench/bench_selection.py [--rounds 2000] [--config configs/examples/cost-aware.yaml]

Prints p50/p99 in ms for the config's own algorithm (mf with budget_per_1k in the shipped
example) and, for comparison, knn and mf with cost_quality_tradeoff on the same refs; the
vectors are real MiniLM vectors of varied prompts. Also the one-off cost when a config
compiles (loading the artifact, finding the budget's price).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # as Ray replicas run (bench/bench_cache.py)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from app.config.document import RouterConfig  # noqa: E402
from app.config.loader import load_config  # noqa: E402
from app.pipeline.selection import ModelIndex  # noqa: E402
from app.pipeline.selectors import Selector, compile_selectors  # noqa: E402
from app.runtime.encoder import MiniLMEncoder  # noqa: E402
from bench.bench_domain import PROMPTS  # noqa: E402
from bench.latency import percentile  # noqa: E402


def with_algorithm(config: RouterConfig, algorithm: dict[str, object]) -> RouterConfig:
    document = config.to_document()
    document["routing"]["decisions"][0]["algorithm"] = algorithm
    return RouterConfig.model_validate(document)


def measure(selector: Selector, vectors: np.ndarray, rounds: int) -> dict[str, float]:
    def given(vector: np.ndarray) -> Callable[[], Awaitable[np.ndarray]]:
        async def fetch() -> np.ndarray:
            return vector

        return fetch

    async def run() -> list[float]:
        times = []
        for i in range(rounds):
            fetch = given(vectors[i % len(vectors)])
            started = time.perf_counter()
            await selector.order(fetch, 40 + i % 60)
            times.append((time.perf_counter() - started) * 1000)
        return times

    times = asyncio.run(run())[rounds // 10 :]  # the first tenth warms caches
    return {"p50_ms": round(percentile(times, 50), 4), "p99_ms": round(percentile(times, 99), 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "examples" / "cost-aware.yaml")
    args = ap.parse_args()
    encoder = MiniLMEncoder()
    encoder.warm_up()
    vectors = np.asarray(encoder.encode(PROMPTS), dtype=np.float32)
    base = load_config(args.config).config
    settings = {
        "configured": None,
        "mf cost_quality_tradeoff=0.1": {"type": "mf", "cost_quality_tradeoff": 0.1},
        "knn cost_quality_tradeoff=0.1": {"type": "knn", "cost_quality_tradeoff": 0.1},
    }
    out: dict[str, object] = {"config": str(args.config), "rounds": args.rounds}
    for name, algorithm in settings.items():
        config = base if algorithm is None else with_algorithm(base, algorithm)
        started = time.perf_counter()
        decision = config.routing.decisions[0]
        selector = compile_selectors([decision], config, ModelIndex(config))[decision.name]
        compile_ms = (time.perf_counter() - started) * 1000
        label = f"{name} ({decision.algorithm.type}, {len(decision.modelRefs)} models)"
        out[label] = {**measure(selector, vectors, args.rounds), "compile_ms": round(compile_ms, 1)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
