"""Lookup and store latency of the response-cache backends: one partition, 384-d unit vectors.

    .venv/bin/python bench/bench_cache.py [--sizes 1000 10000 100000] [--lookups 1000]
        [--rounds 3] [--stores 50] [--backends exact hnsw redis milvus-lite]
        [--redis-url redis://...] [--milvus-unsealed] [--json]

Backends, each built by app/cache/factory.py's rules from a ResponseCacheConfig:
exact: memory, linear scan; hnsw: memory with use_hnsw (faiss HNSW, M 16, efConstruction 200);
redis: RedisSemanticCache (RediSearch HNSW, COSINE) on a local valkey-server with the search
module (tests/fakes/stores.py) unless --redis-url names one; milvus-lite: MilvusSemanticCache
on a Milvus Lite directory in a temporary folder.

Fill: N random unit vectors in one partition, in bulk (`BenchBackend.fill`): store() one by
one searches for a duplicate before every insert, which makes a 100k fill take many minutes
on the exact scan, Redis and Milvus Lite alike. Every fill writes the records store() writes
and is checked afterwards (entry count; a stored vector must hit).
Lookups: each round times --lookups queries, half near-duplicates of stored vectors (hits,
similarity ~0.9999 at threshold 0.9) and half random (misses), shuffled; hit and miss
latencies are reported separately, each percentile as its median over --rounds rounds
(the bench shares its machine, so single rounds wander). Then --stores timed store() calls
on the full cache (each evicts one entry, as a full production cache does).
Ray replicas run with OMP_NUM_THREADS=1 (single-threaded BLAS); set it here to match them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy/faiss load their thread pools

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not a package; make `app` importable
    sys.path.insert(0, str(ROOT))

from app.cache.base import CacheTuning, ResponseCacheStore  # noqa: E402
from app.cache.factory import open_cache_store  # noqa: E402
from app.cache.memory import CacheEntry, ExactIndex, IndexFactory, InMemorySemanticCache  # noqa: E402
from app.config.global_config import ResponseCacheConfig  # noqa: E402
from bench.latency import percentile  # noqa: E402

DIM = 384
BACKENDS = ("exact", "hnsw", "redis", "milvus-lite")
PARTITION = "model|decision"
RESPONSE: dict[str, Any] = {"object": "chat.completion", "choices": [{"message": {"content": "x" * 400}}]}
FILL_BATCH = 1000  # rows per Redis pipeline / Milvus insert


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    rows = rng.standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def cache_settings(
    backend: str, size: int, redis_url: str | None = None, tag: str = ""
) -> ResponseCacheConfig:
    """The response_cache section that selects `backend` (a BACKENDS name), bounded at `size`.

    `tag` makes the Redis index and key prefix unique, so runs sharing a server never meet."""
    section: dict[str, Any] = {"enabled": True, "max_entries": size, "ttl_seconds": 3600}
    if backend in ("exact", "hnsw"):
        section.update(backend_type="memory", use_hnsw=backend == "hnsw")
    elif backend == "redis":
        section.update(
            backend_type="redis",
            redis={"url": redis_url, "index_name": f"bench_{tag}", "key_prefix": f"bench:{tag}:"},
        )
    else:
        section["backend_type"] = "milvus"
    return ResponseCacheConfig.model_validate(section)


# ---------------------------------------------------------------------- bulk fills


class _FillSwitch:
    filling = True


class _FillIndex:
    """A partition index that reports "no duplicate" while the bench fills the cache.

    store() searches the partition for a duplicate before every insert (a full scan on the
    exact index: quadratic over a fill); random 384-d unit vectors are never within
    DUPLICATE_SIMILARITY of each other, so skipping that search writes the same entries."""

    def __init__(self, inner: Any, switch: _FillSwitch) -> None:
        self.inner = inner
        self.dim: int = inner.dim
        self._switch = switch

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[CacheEntry]:
        return iter(self.inner)

    def add(self, vector: np.ndarray, entry: CacheEntry) -> None:
        self.inner.add(vector, entry)

    def remove(self, entry: CacheEntry) -> None:
        self.inner.remove(entry)

    def replace(self, entry: CacheEntry, vector: np.ndarray) -> None:
        self.inner.replace(entry, vector)

    def nearest(self, vector: np.ndarray) -> tuple[CacheEntry, float]:
        if self._switch.filling:
            return next(iter(self.inner)), -1.0
        result: tuple[CacheEntry, float] = self.inner.nearest(vector)
        return result


@dataclass
class BenchBackend:
    """A backend and the bench's bulk fill for it (`fill(partition, unit_rows, response)`)."""

    cache: ResponseCacheStore
    fill: Callable[[str, np.ndarray, dict[str, Any]], None]
    cleanup: list[Callable[[], Any]] = field(default_factory=list)

    def close(self) -> None:
        for step in self.cleanup:
            step()


def build_backend(settings: ResponseCacheConfig, state_dir: Path, seal_milvus: bool = True) -> BenchBackend:
    """The backend `settings` selects (app/cache/factory.py) with its bulk fill.

    memory is built as the factory builds it, its partition indexes wrapped in _FillIndex;
    seal_milvus: flush Milvus after the fill (see _fill_milvus)."""
    if settings.backend_type == "memory":
        return _memory_backend(settings)
    cache = open_cache_store(settings, state_dir)
    if settings.backend_type == "redis":
        return BenchBackend(
            cache,
            lambda p, rows, r: _fill_redis(cache, settings, p, rows, r),
            [lambda: cache.clear(), getattr(cache, "close")],  # noqa: B009 - not on the protocol
        )
    if settings.backend_type == "milvus":
        return BenchBackend(
            cache,
            lambda p, rows, r: _fill_milvus(cache, settings, p, rows, r, seal_milvus),
            [getattr(cache, "close")],  # noqa: B009
        )
    raise ValueError(f"no bulk fill for backend_type {settings.backend_type!r}")


def _memory_backend(settings: ResponseCacheConfig) -> BenchBackend:
    switch = _FillSwitch()
    inner: IndexFactory = ExactIndex
    if settings.use_hnsw:
        from app.cache.hnsw import hnsw_index_factory

        inner = hnsw_index_factory(settings)
    tuning = CacheTuning.from_settings(settings)
    cache = InMemorySemanticCache(
        max_entries=tuning.max_entries,
        ttl_seconds=tuning.ttl_seconds,
        eviction_policy=tuning.eviction_policy,
        index_factory=lambda dim: _FillIndex(inner(dim), switch),
    )

    def fill(partition: str, rows: np.ndarray, response: dict[str, Any]) -> None:
        switch.filling = True
        try:
            for row in rows:
                cache.store(partition, row, response)
        finally:
            switch.filling = False

    return BenchBackend(cache, fill)


def _fill_redis(
    cache: Any, settings: ResponseCacheConfig, partition: str, rows: np.ndarray, response: dict[str, Any]
) -> None:
    """The first row goes through store() (which also creates the index); the others clone
    its footprint in pipelines: its hash under another member with the vector swapped, its
    score in every sorted set and its place in every set that holds it. Cloning what store()
    wrote, rather than spelling the records here, keeps the fill right when the layout of
    app/cache/redis_store.py changes."""
    import redis

    cache.store(partition, rows[0], response)
    prefix = settings.redis.key_prefix
    client: Any = redis.Redis.from_url(str(settings.redis.url))  # bytes replies: records cloned as is
    try:
        (entry_key,) = list(client.scan_iter(match=f"{prefix}e:*", count=1000))
        member = entry_key.decode().removeprefix(f"{prefix}e:")
        record, ttl_ms = client.hgetall(entry_key), client.pttl(entry_key)
        (vector_field,) = [k for k, v in record.items() if _is_row(v, rows[0])]
        scores, sets = _redis_memberships(client, prefix, member)
        head, dot, tail = member.rpartition(".")
        first = int(head, 16)
        for start in range(1, len(rows), FILL_BATCH):
            batch = rows[start : start + FILL_BATCH]
            members = [f"{first + start + i:0{len(head)}x}{dot}{tail}" for i in range(len(batch))]
            with client.pipeline(transaction=False) as pipe:
                for new, row in zip(members, batch, strict=True):
                    pipe.hset(f"{prefix}e:{new}", mapping={**record, vector_field: _vector_bytes(row)})
                    if ttl_ms > 0:
                        pipe.pexpire(f"{prefix}e:{new}", ttl_ms)
                for key, score in scores.items():
                    pipe.zadd(key, dict.fromkeys(members, score))
                for key in sets:
                    pipe.sadd(key, *members)
                pipe.execute()
    finally:
        client.close()


def _is_row(value: bytes, row: np.ndarray) -> bool:
    """Whether a hash field holds `row` (as store() renormalised it) as float32 bytes."""
    return len(value) == row.size * 4 and bool(np.allclose(np.frombuffer(value, dtype=np.float32), row))


def _vector_bytes(row: np.ndarray) -> bytes:
    return np.ascontiguousarray(row, dtype=np.float32).tobytes()


def _redis_memberships(client: Any, prefix: str, member: str) -> tuple[dict[bytes, float], list[bytes]]:
    """The sorted sets (with the member's score) and sets under `prefix` that hold `member`."""
    scores: dict[bytes, float] = {}
    sets: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        kind = client.type(key).decode()
        if kind == "zset" and (score := client.zscore(key, member)) is not None:
            scores[key] = score
        elif kind == "set" and client.sismember(key, member):
            sets.append(key)
    return scores, sets


def _fill_milvus(
    cache: Any,
    settings: ResponseCacheConfig,
    partition: str,
    rows: np.ndarray,
    response: dict[str, Any],
    seal: bool,
) -> None:
    """The first row goes through store() (which also creates the collection); the others are
    copies of the row it wrote, with a new id and vector, inserted in batches through a second
    client on the same uri (cloned, not spelled here, so schema changes need no edit).

    seal: flush the collection afterwards. Milvus Lite keeps new rows in a memtable, searched
    row by row, until it passes MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES (128 MiB) or a flush
    seals it into a segment with the HNSW index; unsealed, a lookup costs ~25 us per row."""
    from pymilvus import MilvusClient

    cache.store(partition, rows[0], response)
    collection = settings.milvus.collection
    client = MilvusClient(uri=cache.uri)
    try:
        (written,) = client.query(collection.name, filter='id != ""', output_fields=["*"], limit=2)
        vector_field = collection.vector_field.name
        for start in range(1, len(rows), FILL_BATCH):
            batch = [
                {**written, "id": uuid.uuid4().hex, vector_field: row.tolist()}
                for row in rows[start : start + FILL_BATCH]
            ]
            client.insert(collection.name, batch)
        if seal:
            client.flush(collection.name)
    finally:
        client.close()


# ---------------------------------------------------------------------- measurement


def _median_of(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def time_lookups(
    cache: ResponseCacheStore, stored: np.ndarray, lookups: int, rng: np.random.Generator
) -> dict[str, float]:
    """One round: half near-duplicates of stored rows, half random rows, shuffled."""
    half = lookups // 2
    near = stored[rng.integers(0, len(stored), half)] + 0.01 * unit_rows(rng, half)
    queries = [(q, True) for q in near] + [(q, False) for q in unit_rows(rng, lookups - half)]
    order = rng.permutation(len(queries))
    times: dict[bool, list[float]] = {True: [], False: []}
    found = {True: 0, False: 0}
    for i in order:
        query, is_hit = queries[i]
        start = time.perf_counter()
        hit = cache.lookup(PARTITION, query, 0.9)
        times[is_hit].append(time.perf_counter() - start)
        found[is_hit] += hit is not None
    every = times[True] + times[False]
    return {
        "hit_p50_ms": percentile(times[True], 50, scale=1000),
        "hit_p99_ms": percentile(times[True], 99, scale=1000),
        "miss_p50_ms": percentile(times[False], 50, scale=1000),
        "miss_p99_ms": percentile(times[False], 99, scale=1000),
        "all_p99_ms": percentile(every, 99, scale=1000),
        "recall": found[True] / max(half, 1),  # near-duplicates found (ANN indexes may miss)
        "false_hits": found[False],
    }


def run(
    bench: BenchBackend, size: int, lookups: int, rounds: int = 3, stores: int = 50, seed: int = 0
) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    stored = unit_rows(rng, size)
    began = time.perf_counter()
    bench.fill(PARTITION, stored, RESPONSE)
    fill_s = time.perf_counter() - began
    entries = bench.cache.stats().entries
    # Stored rows must be found: most of a sample (ANN indexes miss some; recall says how many).
    found = sum(bench.cache.lookup(PARTITION, row, 0.99) is not None for row in stored[-20:])
    if entries != size or found < 10:
        raise RuntimeError(
            f"bulk fill went wrong: {entries} entries of {size}, {found} of 20 stored rows found"
        )
    measured = [time_lookups(bench.cache, stored, lookups, rng) for _ in range(rounds)]
    store_times = []
    for row in unit_rows(rng, stores):
        start = time.perf_counter()
        bench.cache.store(PARTITION, row, RESPONSE)
        store_times.append(time.perf_counter() - start)
    result = {key: _median_of(measured, key) for key in measured[0] if key not in ("recall", "false_hits")}
    return {
        "entries": entries,
        "fill_s": fill_s,
        **result,
        "recall": min(r["recall"] for r in measured),
        "false_hits": sum(r["false_hits"] for r in measured),
        "store_p50_ms": percentile(store_times, 50, scale=1000) if store_times else float("nan"),
        "store_p99_ms": percentile(store_times, 99, scale=1000) if store_times else float("nan"),
    }


@contextmanager
def redis_server(url: str | None, workdir: Path) -> Iterator[str]:
    """`url`, or a local valkey-server with the search module for the bench's lifetime."""
    if url:
        yield url
        return
    from tests.fakes.stores import redis_with_search

    folder = workdir / "redis"
    folder.mkdir()
    with redis_with_search(folder) as local:
        yield local


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--lookups", type=int, default=1000, help="per round, half hits and half misses")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", type=int, default=50)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--redis-url", help="a Redis with the search module (default: start a local one)")
    parser.add_argument(
        "--milvus-unsealed", action="store_true", help="leave the filled rows in Milvus Lite's memtable"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per result line")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        url = stack.enter_context(redis_server(args.redis_url, workdir)) if "redis" in args.backends else None
        for backend in args.backends:
            for size in args.sizes:
                state_dir = workdir / f"{backend}-{size}"
                state_dir.mkdir()
                bench = build_backend(
                    cache_settings(backend, size, url, tag=f"{size}_{os.getpid()}"), state_dir
                )
                try:
                    result = run(bench, size, args.lookups, args.rounds, args.stores)
                finally:
                    bench.close()
                report(backend, result, as_json=args.json)


def report(backend: str, r: dict[str, float], as_json: bool = False) -> None:
    if as_json:
        print(json.dumps({"backend": backend, **{k: round(v, 4) for k, v in r.items()}}), flush=True)
        return
    print(
        f"{backend:<11} entries={r['entries']:>6} fill {r['fill_s']:6.1f} s | lookup hit p50 {r['hit_p50_ms']:.3f}"
        f" p99 {r['hit_p99_ms']:.3f} | miss p50 {r['miss_p50_ms']:.3f} p99 {r['miss_p99_ms']:.3f}"
        f" | all p99 {r['all_p99_ms']:.3f} ms | recall {r['recall']:.3f} false hits {r['false_hits']}"
        f" | store p50 {r['store_p50_ms']:.3f} p99 {r['store_p99_ms']:.3f} ms",
        flush=True,
    )


if __name__ == "__main__":
    main()
