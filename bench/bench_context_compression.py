"""Latency the context_compression plugin adds to a routed request, for conversations of 10, 50
and 200 turns (a user message and an assistant reply of ~60 words each, one system message), a
1,024-token budget and the last 4 turns kept, so every size is compressed.

Two figures per size and strategy:
- `plugin`: the plugin step alone, exactly as route() runs it (`apply_compression` on the
  request's plan: counting every message, choosing the turns, building the summary); `cold`:
  every message tokenized (the count cache cleared first), `warm`: the history already counted
  (a client resending its conversation: only new messages are tokenized);
- `route`: RouterPipeline.route() (warm) with the plugin, and without it (same config, the plugin
  removed), p50/p99 of each; `added_p50` is the difference of the medians.

    .venv/bin/python bench/bench_context_compression.py [--requests 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config.loader import parse_config  # noqa: E402
from app.config.plugins import ContextCompressionPlugin  # noqa: E402
from app.pipeline import RouterPipeline  # noqa: E402
from app.pipeline.compression import COUNTS, apply_compression, warm_up  # noqa: E402
from app.pipeline.plan import RoutePlan  # noqa: E402
from bench.documents import keyword_decision, one_model_document  # noqa: E402
from bench.latency import p50_p99_ms, percentile  # noqa: E402

SIZES = (10, 50, 200)
BUDGET = 1024
TEXT = (
    "the river carried light stone across a quiet valley where paper lanterns hung from old "
    "garden walls and music drifted from an open window toward the silver forest near the harbor"
)
WORDS = TEXT.split(" ")


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(60))
        messages.append({"role": "user", "content": f"Question {i}: {text}. What do you think?"})
        messages.append({"role": "assistant", "content": f"Answer {i}. {text}."})
    messages[-2]["content"] += " Please recap."
    return messages


def document(strategy: str | None) -> dict[str, Any]:
    compression = {
        "type": "context_compression",
        "configuration": {"max_tokens": BUDGET, "keep_last_turns": 4, "strategy": strategy},
    }
    plugins = [] if strategy is None else [compression]
    signals = {"keywords": [{"name": "recap", "keywords": ["recap"]}]}
    return one_model_document([keyword_decision("long", "recap", plugins)], signals)


def plugin_step(messages: list[dict[str, Any]], strategy: str, requests: int) -> dict[str, Any]:
    config = ContextCompressionPlugin(max_tokens=BUDGET, keep_last_turns=4, strategy=strategy)  # type: ignore[arg-type]  # a checked literal
    out: dict[str, Any] = {}
    outcome = None
    for kind in ("cold", "warm"):
        samples = []
        for _ in range(requests):
            if kind == "cold":
                COUNTS.clear()  # every message new to the router (not timed)
            plan = RoutePlan(request_id="b", requested_model="MoM", auto=True, body={"messages": messages})
            started = time.perf_counter()
            apply_compression(plan, config)
            samples.append(time.perf_counter() - started)
            outcome = plan.compression
        out[kind] = p50_p99_ms(samples, 3)
    assert outcome is not None and outcome.compressed and not outcome.over_budget
    return {**out, "tokens_before": outcome.tokens_before, "tokens_after": outcome.tokens_after}


async def route_times(pipeline: RouterPipeline, messages: list[dict[str, Any]], requests: int) -> list[float]:
    samples = []
    for _ in range(requests):
        body = {"model": "MoM", "messages": copy.copy(messages)}
        started = time.perf_counter()
        plan = await pipeline.route(body)
        samples.append(time.perf_counter() - started)
        assert plan.decision == "long"
    return samples


async def run(requests: int) -> dict[str, Any]:
    warm_up()
    plain = RouterPipeline(parse_config(document(None)).config)
    results: dict[str, Any] = {"budget": BUDGET, "requests": requests, "sizes": {}}
    for turns in SIZES:
        messages = conversation(turns)
        without = await route_times(plain, messages, requests)
        row: dict[str, Any] = {"route_without": p50_p99_ms(without, 3)}
        for strategy in ("drop", "summarize"):
            pipeline = RouterPipeline(parse_config(document(strategy)).config)
            with_plugin = await route_times(pipeline, messages, requests)
            row[strategy] = {
                "plugin": plugin_step(messages, strategy, requests),
                "route_with": p50_p99_ms(with_plugin, 3),
                "added_p50_ms": round(percentile(with_plugin, 50, 1000) - percentile(without, 50, 1000), 3),
            }
        results["sizes"][str(turns)] = row
        print(f"{turns:>4} turns: {json.dumps(row)}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = asyncio.run(run(args.requests))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
