"""Routing overhead: requests through svc-sr vs the same instant upstream called directly.

One run, same machine, same upstream: concurrency 1 and 16, non-stream chat requests
with keyword + embedding signals evaluated and the semantic cache on (lookups miss,
because every prompt differs, so each request pays signals + lookup + store).

    .venv/bin/python bench/bench_routing.py [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.common.ports import free_port
from bench.latency import percentile  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

TOPICS = [
    "derivative",
    "integral",
    "python function",
    "sql query",
    "french revolution",
    "photosynthesis",
    "interest rates",
    "contract law",
    "neural networks",
    "blood pressure",
]


def bench_config(upstream: FakeUpstream) -> dict:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "general"},
            "models": [
                {"name": "general", "backend_refs": [{"base_url": upstream.host_url}]},
                {"name": "expert", "backend_refs": [{"base_url": upstream.host_url}]},
            ],
        },
        "routing": {
            "signals": {
                "keywords": [{"name": "math", "operator": "OR", "keywords": ["derivative", "integral"]}],
                "embeddings": [
                    {
                        "name": "code",
                        "threshold": 0.6,
                        "candidates": ["write a python function", "fix my code"],
                    }
                ],
            },
            "decisions": [
                {
                    "name": "math",
                    "priority": 10,
                    "modelRefs": [{"model": "expert"}],
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "math"}]},
                },
                {
                    "name": "code",
                    "priority": 5,
                    "modelRefs": [{"model": "expert"}],
                    "rules": {"operator": "OR", "conditions": [{"type": "embedding", "name": "code"}]},
                },
            ],
        },
        "global": {"stores": {"response_cache": {"enabled": True, "similarity_threshold": 0.99}}},
    }


def prompt(i: int) -> str:
    return f"Question {i}: tell me something new about {TOPICS[i % len(TOPICS)]} (variant {i * 7919 % 1000})"


async def run_load(
    url: str, model: str, total: int, concurrency: int, make_prompt: Callable[[int], str] = prompt
) -> tuple[list[float], float]:
    latencies: list[float] = []
    counter = iter(range(total))
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=concurrency)) as client:

        async def worker() -> None:
            for i in counter:
                body = {"model": model, "messages": [{"role": "user", "content": make_prompt(i)}]}
                started = time.perf_counter()
                response = await client.post(url, json=body)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    raise RuntimeError(f"{response.status_code}: {response.text[:200]}")

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    return latencies, total / elapsed


def summary(latencies: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(latencies, 50, scale=1000), "p99_ms": percentile(latencies, 99, scale=1000)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument(
        "--embedding-hop",
        action="store_true",
        help="the Router calls the Embedding deployment instead of encoding itself",
    )
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from deployments.serve_env import apply_fast_path_env

    apply_fast_path_env()  # as `svc-sr serve` does, before Serve is imported; SVC_SR_SERVE_FAST_PATH=0 to compare
    import ray
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    results: dict[str, dict] = {}
    with FakeUpstream(name="instant") as upstream, tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp, "bench.yaml")
        config_path.write_text(yaml.safe_dump(bench_config(upstream)))
        port = free_port()
        serve_path = (
            "haproxy+throughput-optimized"
            if os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1"
            else "proxy actor (Serve default)"
        )
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            serve.run(
                build_app(
                    GraphArgs(
                        config_path=str(config_path),
                        router_local_encoder=not args.embedding_hop,
                        metrics={"enabled": False},
                    )
                ),
                name="svc-sr",
                route_prefix="/",
            )
            routed = f"http://127.0.0.1:{port}/v1/chat/completions"
            direct = f"{upstream.base_url}/chat/completions"
            asyncio.run(run_load(routed, "MoM", 40, 4))  # warm-up: replicas, encoder shapes, pools
            asyncio.run(run_load(direct, "general", 40, 4))
            for concurrency in (1, 16):
                for label, url, model in (("direct", direct, "general"), ("svc-sr", routed, "MoM")):
                    latencies, rps = asyncio.run(run_load(url, model, args.requests, concurrency))
                    results[f"{label}@c{concurrency}"] = {**summary(latencies), "rps": rps}
        finally:
            serve.shutdown()
            ray.shutdown()
    for concurrency in (1, 16):
        d, r = results[f"direct@c{concurrency}"], results[f"svc-sr@c{concurrency}"]
        results[f"overhead@c{concurrency}"] = {
            "p50_ms": r["p50_ms"] - d["p50_ms"],
            "p99_ms": r["p99_ms"] - d["p99_ms"],
        }
    rows = {k: {m: round(v, 2) for m, v in row.items()} for k, row in results.items()}
    print(json.dumps({"serve_path": serve_path, "router_encodes": not args.embedding_hop, **rows}, indent=2))


if __name__ == "__main__":
    main()
