"""Latency the request_params plugin adds to a routed request: RouterPipeline.route() on a chat
request carrying blocked and over-limit parameters, with the plugin (logprobs/top_logprobs
blocked, max_tokens clamped to 64, n to 1) and without it (same config, the plugin removed);
p50/p99 of each, `added_p50_ms` the difference of the medians, and the plugin step alone
(`apply_request_params` on a copy of the body).

    .venv/bin/python bench/bench_request_params.py [--requests 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config.loader import parse_config  # noqa: E402
from app.pipeline import RouterPipeline  # noqa: E402
from app.pipeline.plugins import apply_request_params  # noqa: E402
from bench.documents import keyword_decision, one_model_document  # noqa: E402
from bench.latency import p50_p99_ms, percentile  # noqa: E402

SETTINGS = {"blocked_params": ["logprobs", "top_logprobs"], "max_tokens_limit": 64, "max_n": 1}
BODY = {
    "model": "MoM",
    "messages": [{"role": "user", "content": "Keep it on a budget: name three rivers in Europe."}],
    "max_tokens": 4000,
    "n": 3,
    "logprobs": True,
    "top_logprobs": 2,
    "temperature": 0.2,
}


def document(with_plugin: bool) -> dict[str, Any]:
    plugins = [{"type": "request_params", "configuration": SETTINGS}] if with_plugin else []
    signals = {"keywords": [{"name": "budget", "keywords": ["budget"]}]}
    return one_model_document([keyword_decision("limited", "budget", plugins)], signals)


async def route_times(pipeline: RouterPipeline, requests: int, clamped: bool) -> list[float]:
    samples = []
    for _ in range(requests):
        body = json.loads(json.dumps(BODY))
        started = time.perf_counter()
        plan = await pipeline.route(body)
        samples.append(time.perf_counter() - started)
        assert plan.decision == "limited" and (plan.body["max_tokens"] == 64) == clamped
    return samples


def plugin_step(requests: int) -> dict[str, float]:
    samples = []
    for _ in range(requests):
        body = dict(BODY)
        started = time.perf_counter()
        apply_request_params(body, SETTINGS)
        samples.append(time.perf_counter() - started)
    return p50_p99_ms(samples)


async def run(requests: int) -> dict[str, Any]:
    without = await route_times(RouterPipeline(parse_config(document(False)).config), requests, False)
    with_plugin = await route_times(RouterPipeline(parse_config(document(True)).config), requests, True)
    return {
        "requests": requests,
        "route_without": p50_p99_ms(without),
        "route_with": p50_p99_ms(with_plugin),
        "added_p50_ms": round(percentile(with_plugin, 50, 1000) - percentile(without, 50, 1000), 4),
        "plugin": plugin_step(requests),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = asyncio.run(run(args.requests))
    print(json.dumps(results), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
