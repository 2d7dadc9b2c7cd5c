"""Cache hits through the Serve graph with the cache on Redis: one ResponseCache replica
against two (the replicas hold no entries; the choice docs/performance.md explains).

One run, same machine, same Redis: the graph deployed with N ResponseCache replicas, a set
of prompts answered once (stored), then every request a hit (checked), at concurrency 1 and
16; then the graph again with the other N. Redis is a local valkey-server with RediSearch
(tests/fakes/stores.py) unless --redis-url names one.

    .venv/bin/python bench/bench_cache_replicas.py [--requests 300] [--replicas 1 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.common.ports import free_port
from bench.latency import percentile  # noqa: E402
from tests.fakes.configs import cached_route, redis_store  # noqa: E402
from tests.fakes.stores import redis_with_search  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

PROMPTS = [f"cachebench question {i}: what is the capital of country number {i}?" for i in range(32)]
WRITE_WAIT_S = 30.0


async def ask(client: httpx.AsyncClient, url: str, prompt: str) -> tuple[float, bool]:
    body = {"model": "MoM", "messages": [{"role": "user", "content": prompt}]}
    began = time.perf_counter()
    response = await client.post(url, json=body)
    elapsed = time.perf_counter() - began
    response.raise_for_status()
    return elapsed, response.headers.get("x-vsr-cache-hit") == "true"


async def fill(url: str) -> None:
    """Every prompt answered once, then asked until it is a hit (the write follows the answer)."""
    async with httpx.AsyncClient(timeout=60) as client:
        for prompt in PROMPTS:
            await ask(client, url, prompt)
        deadline = time.monotonic() + WRITE_WAIT_S
        for prompt in PROMPTS:
            while not (await ask(client, url, prompt))[1]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{prompt!r} never became a cache hit")
                await asyncio.sleep(0.2)


async def hits(url: str, total: int, concurrency: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    sent = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal sent
        while sent < total:
            sent += 1
            elapsed, hit = await ask(client, url, PROMPTS[sent % len(PROMPTS)])
            if not hit:
                raise RuntimeError("a cached prompt missed")
            latencies.append(elapsed)

    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=concurrency)) as client:
        began = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        return latencies, total / (time.perf_counter() - began)


@contextlib.contextmanager
def redis(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with tempfile.TemporaryDirectory() as tmp, redis_with_search(Path(tmp)) as started:
        yield started


def measure(replicas: int, upstream_url: str, redis_url: str, port: int, requests: int) -> dict[str, Any]:
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    args = GraphArgs(
        config=cached_route(upstream_url, "cachebench", redis_store(redis_url, f"bench_{time.time_ns()}")),
        metrics={"enabled": False},
        decision_model=False,
        deployments={"ResponseCache": {"num_replicas": replicas}},
    )
    serve.run(build_app(args), name="svc-sr", route_prefix="/")
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    asyncio.run(fill(url))
    asyncio.run(hits(url, 64, 4))  # warm-up
    row: dict[str, Any] = {}
    for concurrency in (1, 16):
        latencies, rps = asyncio.run(hits(url, requests, concurrency))
        row[f"c{concurrency}"] = {
            "p50_ms": round(percentile(latencies, 50, scale=1000), 2),
            "p99_ms": round(percentile(latencies, 99, scale=1000), 2),
            "rps": round(rps, 1),
        }
    serve.delete("svc-sr")
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from deployments.serve_env import apply_fast_path_env

    apply_fast_path_env()  # as `svc-sr serve` does, before Serve is imported
    import ray
    from ray import serve

    results: dict[str, Any] = {}
    with FakeUpstream(name="instant") as upstream, redis(args.redis_url) as redis_url:
        port = free_port()
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            for replicas in args.replicas:
                results[f"ResponseCache x{replicas}"] = measure(
                    replicas, upstream.host_url, redis_url, port, args.requests
                )
        finally:
            serve.shutdown()
            ray.shutdown()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
