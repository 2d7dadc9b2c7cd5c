"""Latency session-aware routing adds to a routed request (docs/routing-quality.md "Agent
traffic"): RouterPipeline.route() on an agent's turns (an ask, then a tool loop's turns, each
in its own session) with `global.router.session_affinity` off, on over this replica's memory,
and on over Redis (a local valkey-server unless `--redis-url`); p50/p99 of each and
`added_p50_ms` against off. Targets: <= 1 ms (memory), <= 2 ms (Redis) at p50.

    .venv/bin/python bench/bench_sessions.py [--requests 2000] [--redis-url URL] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config.loader import parse_config  # noqa: E402
from app.pipeline import PipelineServices, RouterPipeline  # noqa: E402
from app.state.session_store import MemorySessionStore, RedisSessionStore, SessionStore  # noqa: E402
from app.state.shared_store import ManagementStoreSettings, redis_client  # noqa: E402
from bench.bench_cache import redis_server  # noqa: E402
from bench.latency import p50_p99_ms, percentile  # noqa: E402
from tests.fakes.configs import keyword_routing  # noqa: E402

PRICING = {
    "prompt_per_1m": 3.0,
    "cached_input_per_1m": 0.3,
    "cache_write_per_1m": 3.75,
    "completion_per_1m": 15,
}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}],
}
TURNS: list[list[dict[str, Any]]] = [
    [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug in sort"},
    ],
    [CALL, {"role": "tool", "tool_call_id": "c1", "content": "stock prices and tax news"}],
    [{"role": "assistant", "content": "done"}, {"role": "user", "content": "what tax applies to stock?"}],
]


def document(sessions: bool) -> dict[str, Any]:
    routes = [("money", 20, ["tax", "stock"], "money"), ("code", 10, ["bug", "sort"], "code")]
    return keyword_routing("http://127.0.0.1:9/v1", routes, "code", enabled=sessions, timeout_ms=1000)


async def route_times(pipeline: RouterPipeline, requests: int, label: str) -> list[float]:
    samples = []
    for i in range(requests // len(TURNS)):
        messages: list[dict[str, Any]] = []
        for turn in TURNS:
            messages += turn
            body = {"model": "MoM", "messages": list(messages)}
            started = time.perf_counter()
            plan = await pipeline.route(body, {"x-session-id": f"{label}-{i}"})
            samples.append(time.perf_counter() - started)
            assert plan.selected_model is not None
            if not label.startswith("off"):
                assert plan.session is not None and plan.session.action != "per_turn", plan.session
    return samples


async def measure(store: SessionStore | None, requests: int, label: str) -> list[float]:
    services = PipelineServices(sessions=store)
    pipeline = RouterPipeline(parse_config(document(store is not None)).config, services)
    await route_times(pipeline, min(requests, 300), f"{label}-warm")  # warm-up, not measured
    return await route_times(pipeline, requests, label)


async def run(requests: int, redis_url: str) -> dict[str, Any]:
    off = await measure(None, requests, "off")
    memory = await measure(MemorySessionStore(), requests, "memory")
    settings = ManagementStoreSettings(backend="redis", url=redis_url)
    shared = await measure(
        RedisSessionStore(redis_client(settings), f"bench:{time.time_ns()}:"), requests, "redis"
    )
    base = percentile(off, 50, 1000)
    return {
        "requests": len(off),
        "off": p50_p99_ms(off),
        "memory": p50_p99_ms(memory),
        "redis": p50_p99_ms(shared),
        "added_p50_ms": {
            "memory": round(percentile(memory, 50, 1000) - base, 4),
            "redis": round(percentile(shared, 50, 1000) - base, 4),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work, redis_server(args.redis_url, Path(work)) as url:
        results = asyncio.run(run(args.requests, url))
    print(json.dumps(results), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
