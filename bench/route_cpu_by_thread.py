"""Where a routed request's CPU goes, by thread (docs/performance.md, "A short MoM route's CPU,
by thread"): `RouterPipeline.route()` with the shipped config in one process (no Ray), distinct
short questions one at a time (`bench_all_signals.py`'s short row), BLAS capped at one thread as
in the serving replicas. Every function the pipeline sends to a worker thread
(`asyncio.to_thread`) is timed with that thread's own CPU clock; the event loop's thread is the
rest of the orchestration.

    .venv/bin/python bench/route_cpu_by_thread.py [--requests 200] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.runtime.threads import limit_blas_threads  # noqa: E402

limit_blas_threads()  # before numpy's pools start, as a replica does

from app.benchmark.local_services import local_services, shared_vector_table  # noqa: E402
from app.benchmark.runner import AUTO_MODEL, as_config  # noqa: E402
from app.pipeline.pipeline import RouterPipeline  # noqa: E402
from bench.bench_all_signals import prompt  # noqa: E402  (the stack bench's short questions)

SHORT_TOKENS = 15  # bench_all_signals' short row, whose Router CPU this splits

THREAD_CPU: collections.Counter[str] = collections.Counter()
CALLS: collections.Counter[str] = collections.Counter()
_to_thread = asyncio.to_thread


async def timed_to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    name = getattr(func, "__qualname__", None) or type(func).__name__

    def run() -> Any:
        started = time.thread_time()
        try:
            return func(*args, **kwargs)
        finally:
            THREAD_CPU[name] += time.thread_time() - started
            CALLS[name] += 1

    return await _to_thread(run)


async def measure(requests: int) -> dict[str, Any]:
    asyncio.to_thread = timed_to_thread  # every offload in the pipeline goes through it
    loaded = as_config(str(ROOT / "configs" / "config.yaml"))
    local = local_services(loaded, shared_vector_table())
    try:
        pipeline = RouterPipeline(loaded, local.services, rng=random.Random(0))
        await pipeline.warm_up()
        for i in range(30):  # warm: first calls load and compile
            body = {
                "model": AUTO_MODEL,
                "messages": [{"role": "user", "content": prompt(1_000_000 + i, SHORT_TOKENS)}],
            }
            await pipeline.route(body, {}, f"warm-{i}")
        THREAD_CPU.clear()
        CALLS.clear()
        cpu, loop_cpu = time.process_time(), time.thread_time()
        for i in range(requests):
            body = {"model": AUTO_MODEL, "messages": [{"role": "user", "content": prompt(i, SHORT_TOKENS)}]}
            await pipeline.route(body, {}, f"r{i}")
        per = 1000.0 / requests
        return {
            "requests": requests,
            "process_cpu_ms_per_route": round((time.process_time() - cpu) * per, 2),
            "event_loop_thread_ms_per_route": round((time.thread_time() - loop_cpu) * per, 2),
            "worker_threads_ms_per_route": {k: round(v * per, 2) for k, v in THREAD_CPU.most_common()},
            "calls_per_route": {k: round(v / requests, 2) for k, v in CALLS.most_common()},
        }
    finally:
        asyncio.to_thread = _to_thread
        await local.aclose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = asyncio.run(measure(args.requests))
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
