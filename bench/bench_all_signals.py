"""Routing overhead with every signal on: the shipped configs/config.yaml (domain classifier,
jailbreak guard and harmful-content classifier as the global prompt guard, the PII detector in
every decision, keyword, embedding and context signals, the semantic cache), its backends
pointed at an instant upstream on 127.0.0.1.

One run, same machine, same upstream: each row is svc-sr against the upstream called directly,
so the overhead is a difference measured in the same run. Rows: short prompts (~15 tokens) and
~500-token prompts at concurrency 1 and 16, then one client at 50, 500, 2,000 and 8,000 prompt
tokens. Prompts are ordinary questions (none blocked) and all differ (every cache lookup misses
and every answer is stored).

    .venv/bin/python bench/bench_all_signals.py [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.common.ports import free_port  # noqa: E402
from bench.bench_routing import run_load, summary  # noqa: E402
from tests.fakes.configs import served_default  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

SHORT = [
    "What is the derivative of the natural logarithm",
    "How do vaccines train the immune system",
    "Why did the Roman republic become an empire",
    "Explain how a hash table handles collisions",
    "What makes a contract void rather than voidable",
    "How does inflation affect the value of savings",
    "What is the difference between speed and velocity",
    "Why do some chemical reactions release heat",
    "How can I improve my sleep schedule",
    "What did Aristotle think about virtue",
]

SENTENCES = [
    "The committee reviewed the proposal in detail and asked for a clearer budget.",
    "Water expands when it freezes, which is why pipes can burst in winter.",
    "A good unit test checks one behaviour and fails for a single clear reason.",
    "Historians still debate how much the printing press changed ordinary lives.",
    "The patient reported mild headaches that became worse in the evenings.",
    "Interest rates rose sharply, and many families postponed buying a house.",
    "The algorithm sorts the list in place and never allocates a second array.",
    "Plants in the shade grew taller but produced fewer flowers than the others.",
    "The court held that the clause was too vague to be enforced against the tenant.",
    "Students who explained the idea aloud remembered it better a week later.",
    "The bridge was designed to sway slightly so that strong winds would not crack it.",
    "Several philosophers argued that knowledge requires more than true belief.",
]


def prompt(i: int, tokens: int) -> str:
    """An ordinary question with about `tokens` tokens of context before it, unique per i."""
    if tokens <= 20:
        return f"{SHORT[i % len(SHORT)]}? Please answer for reader number {i}."
    rng = random.Random(i)
    words: list[str] = []
    while len(words) * 1.12 < tokens - 20:  # MiniLM's tokenizer: about 1.12 tokens a word here
        words += rng.choice(SENTENCES).split()
    context = " ".join(words)
    return f"Here are my notes (set {i}): {context} Given these notes, {SHORT[i % len(SHORT)].lower()}?"


def without_metrics(document: dict[str, Any]) -> dict[str, Any]:
    document["global"]["services"]["observability"]["metrics"]["enabled"] = False
    return document


def row(results: dict[str, Any], label: str, direct: dict[str, Any], routed: dict[str, Any]) -> None:
    results[label] = {
        "direct": direct,
        "svc-sr": routed,
        "overhead_p50_ms": routed["p50_ms"] - direct["p50_ms"],
        "overhead_p99_ms": routed["p99_ms"] - direct["p99_ms"],
    }


async def measure(url: str, model: str, total: int, concurrency: int, tokens: int) -> dict[str, float]:
    latencies, rps = await run_load(url, model, total, concurrency, lambda i: prompt(i, tokens))
    return {**summary(latencies), "rps": rps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from deployments.serve_env import apply_fast_path_env

    apply_fast_path_env()
    import ray
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    results: dict[str, Any] = {}
    with FakeUpstream(name="instant") as upstream, tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp, "config.yaml")
        config_path.write_text(yaml.safe_dump(without_metrics(served_default(upstream.host_url))))
        port = free_port()
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            serve.run(
                build_app(GraphArgs(config_path=str(config_path), metrics={"enabled": False})),
                name="svc-sr",
                route_prefix="/",
            )
            routed = f"http://127.0.0.1:{port}/v1/chat/completions"
            direct = f"{upstream.base_url}/chat/completions"
            asyncio.run(measure(routed, "MoM", 40, 4, 500))  # warm-up: replicas, encoder shapes, pools
            for tokens, concurrency in ((15, 1), (15, 16), (500, 1), (500, 16)):
                total = args.requests if tokens < 100 else max(args.requests // 2, 50)
                d = asyncio.run(measure(direct, "gemma-general", total, concurrency, tokens))
                r = asyncio.run(measure(routed, "MoM", total, concurrency, tokens))
                row(results, f"{tokens}tok@c{concurrency}", d, r)
            for tokens in (50, 2000, 8000):
                total = 40 if tokens <= 2000 else 15
                d = asyncio.run(measure(direct, "gemma-general", total, 1, tokens))
                r = asyncio.run(measure(routed, "MoM", total, 1, tokens))
                row(results, f"{tokens}tok@c1", d, r)
        finally:
            serve.shutdown()
            ray.shutdown()
    rounded = json.loads(json.dumps(results), parse_float=lambda v: round(float(v), 2))
    print(json.dumps({"config": "configs/config.yaml (every signal on)", **rounded}, indent=2))


if __name__ == "__main__":
    main()
