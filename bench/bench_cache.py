"""Lookup latency of the semantic cache backends, one partition, 384-d unit vectors.

    .venv/bin/python bench/bench_cache.py [--sizes 1000 10000] [--lookups 2000]
        [--backends exact hnsw milvus-lite]

exact: the in-memory linear scan; hnsw: the in-memory cache with use_hnsw (faiss HNSW,
M 16, efConstruction 200); milvus-lite: MilvusSemanticCache on a Milvus Lite directory in a
temporary folder (HNSW index, COSINE).

Half the queries are near-duplicates of stored vectors (hits), half are random (misses),
so both paths are timed. Prints p50/p99 per size for lookup and store.
Ray replicas run with OMP_NUM_THREADS=1 (single-threaded BLAS); set it here to match them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not a package; make `app` importable
    sys.path.insert(0, str(ROOT))

from app.cache.base import CacheTuning  # noqa: E402
from app.cache.memory import memory_cache  # noqa: E402
from app.config.cache_stores import HnswSettings, MilvusCacheSettings  # noqa: E402
from bench.latency import percentile  # noqa: E402

DIM = 384


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    rows = rng.standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def build(backend: str, size: int, workdir: Path) -> Any:
    tuning = CacheTuning(max_entries=size, ttl_seconds=3600)
    if backend == "milvus-lite":
        from app.cache.milvus_store import MilvusSemanticCache

        settings = MilvusCacheSettings(uri=str(workdir / f"bench-{size}.db"))
        return MilvusSemanticCache(settings, tuning)
    return memory_cache(tuning, HnswSettings(use_hnsw=backend == "hnsw"))


BACKENDS = ("exact", "hnsw", "milvus-lite")


def run(
    size: int, lookups: int, backend: str = "exact", seed: int = 0, workdir: Path | None = None
) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    cache = build(backend, size, workdir or Path(tempfile.mkdtemp()))
    stored = unit_rows(rng, size)
    response = {"object": "chat.completion", "choices": [{"message": {"content": "x" * 400}}]}
    store_times = []
    for row in stored:
        start = time.perf_counter()
        cache.store("model|decision", row, response)
        store_times.append(time.perf_counter() - start)
    near = stored[rng.integers(0, size, lookups // 2)] + 0.01 * unit_rows(rng, lookups // 2)
    queries = np.concatenate([near, unit_rows(rng, lookups - lookups // 2)])
    rng.shuffle(queries)
    lookup_times = []
    hits = 0
    for query in queries:
        start = time.perf_counter()
        hit = cache.lookup("model|decision", query, 0.9)
        lookup_times.append(time.perf_counter() - start)
        hits += hit is not None
    p50, p99 = (percentile(lookup_times, q, scale=1000) for q in (50, 99))
    s50, s99 = (percentile(store_times, q, scale=1000) for q in (50, 99))
    return {
        "entries": cache.stats().entries,
        "lookup_p50_ms": p50,
        "lookup_p99_ms": p99,
        "store_p50_ms": s50,
        "store_p99_ms": s99,
        "hit_rate": hits / lookups,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["exact", "hnsw"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        for backend in args.backends:
            for size in args.sizes:
                report(backend, run(size, args.lookups, backend, workdir=Path(workdir)))


def report(backend: str, r: dict[str, float]) -> None:
    print(
        f"{backend:<11} entries={r['entries']:>6}  lookup p50 {r['lookup_p50_ms']:.3f} ms  p99 {r['lookup_p99_ms']:.3f} ms"
        f"  | store p50 {r['store_p50_ms']:.3f} ms  p99 {r['store_p99_ms']:.3f} ms  | hit rate {r['hit_rate']:.2f}"
    )


if __name__ == "__main__":
    main()
