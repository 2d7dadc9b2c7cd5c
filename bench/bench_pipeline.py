"""Latency of RouterPipeline.route() (no Ray, no upstream call).

Scenarios:
- engine: the decision engine alone, 10 decisions with AND/OR/NOT trees;
- keyword: route() with keyword + context signals only (no encoder involved);
- full: route() with keyword + embedding signals and the semantic cache on (real
  int8 MiniLM encoder, in-memory cache holding --cache-entries answers); the query
  embedding is computed once and shared by the embedding signal and the cache;
- encoder: one MiniLM encode of a query, the floor of the "full" scenario.

Usage: nice .venv/bin/python bench/bench_pipeline.py [--n 300]
Prints p50 / p90 / p99 in milliseconds per scenario (and JSON with --json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cache import InMemorySemanticCache  # noqa: E402
from app.config.document import RouterConfig  # noqa: E402
from app.pipeline import PipelineServices, RouterPipeline, cache_calls, encoder_embed  # noqa: E402
from app.pipeline.decisions import index_matches, select_decision  # noqa: E402
from app.pipeline.plan import SignalMatch  # noqa: E402
from app.runtime.encoder import shared_encoder  # noqa: E402
from bench.latency import percentile  # noqa: E402

TOPICS = [
    "bake sourdough bread",
    "fix a segfault in C++",
    "the causes of World War I",
    "integrate x squared",
    "write a haiku about autumn",
    "tax rules for freelancers",
    "train a neural network",
    "repair a bike chain",
    "the French revolution",
    "photosynthesis in plants",
    "invest in index funds",
    "learn Spanish quickly",
]
TEMPLATES = [
    "How do I {t}?",
    "Can you explain {t} in simple terms?",
    "What is the best way to {t}? urgent please",
    "I need help: {t}",
    "Give me three tips to {t}.",
]


def document() -> dict[str, Any]:
    decisions = [
        {
            "name": f"kw_{i}",
            "priority": 10 + i,
            "rules": {
                "operator": "AND",
                "conditions": [
                    {"type": "keyword", "name": f"kw_{i}"},
                    {"operator": "NOT", "conditions": [{"type": "context", "name": "long"}]},
                ],
            },
            "modelRefs": [{"model": "large"}],
        }
        for i in range(4)
    ]
    decisions += [
        {
            "name": f"emb_{i}",
            "priority": 5,
            "rules": {
                "operator": "OR",
                "conditions": [
                    {"type": "embedding", "name": f"emb_{i}"},
                    {"type": "keyword", "name": "urgent"},
                ],
            },
            "modelRefs": [{"model": "small"}, {"model": "large"}],
            "plugins": [
                {"type": "semantic-cache", "configuration": {"similarity_threshold": 0.9}},
                {"type": "system_prompt", "configuration": {"system_prompt": "Be helpful."}},
            ],
        }
        for i in range(4)
    ]
    decisions.append(
        {
            "name": "long_ctx",
            "priority": 1,
            "rules": {"type": "context", "name": "long"},
            "modelRefs": [{"model": "large"}],
        }
    )
    return {
        "providers": {
            "defaults": {"default_model": "small"},
            "models": [
                {"name": "small", "backend_refs": [{"endpoint": "127.0.0.1:8000"}]},
                {
                    "name": "large",
                    "backend_refs": [
                        {"endpoint": "127.0.0.1:8001", "weight": 1},
                        {"endpoint": "127.0.0.1:8002", "weight": 2},
                    ],
                },
            ],
        },
        "routing": {
            "signals": {
                "keywords": [
                    {"name": f"kw_{i}", "keywords": [w, f"{w}s", f"{w}ing"]}
                    for i, w in enumerate(["deploy", "invoice", "refund", "compile"])
                ]
                + [{"name": "urgent", "keywords": ["urgent", "asap", "now", "immediately"]}],
                "embeddings": [
                    {
                        "name": f"emb_{i}",
                        "threshold": 0.6,
                        "candidates": [f"question about {t}" for t in group],
                    }
                    for i, group in enumerate([TOPICS[0:3], TOPICS[3:6], TOPICS[6:9], TOPICS[9:12]])
                ],
                "context": [{"name": "long", "min_tokens": "4K"}],
            },
            "decisions": decisions,
        },
        "global": {"stores": {"response_cache": {"enabled": True, "similarity_threshold": 0.9}}},
    }


def queries(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(TEMPLATES).format(t=rng.choice(TOPICS)) + f" (case {i})" for i in range(n)]


def percentiles(samples_s: list[float]) -> dict[str, float]:
    def at(q: float) -> float:
        return round(percentile(samples_s, q, scale=1000), 3)

    return {"p50": at(50), "p90": at(90), "p99": at(99), "mean": round(statistics.fmean(samples_s) * 1000, 3)}


def bench_engine(n: int) -> dict[str, float]:
    config = RouterConfig.model_validate(document())
    decisions = config.routing.decisions
    rng = random.Random(0)
    names = [("keyword", f"kw_{i}") for i in range(4)] + [("keyword", "urgent"), ("context", "long")]
    names += [("embedding", f"emb_{i}") for i in range(4)]
    samples = []
    for _ in range(n):
        signals = index_matches(
            SignalMatch(type=t, name=nm, matched=rng.random() < 0.3, confidence=rng.random())
            for t, nm in names
        )
        start = time.perf_counter()
        select_decision(decisions, signals, "priority")
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


async def bench_route(pipe: RouterPipeline, texts: list[str]) -> dict[str, float]:
    samples = []
    for text in texts:
        body = {"model": "MoM", "messages": [{"role": "user", "content": text}]}
        start = time.perf_counter()
        await pipe.route(body)
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--cache-entries", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    encoder = shared_encoder()
    encoder.warm_up()
    results: dict[str, Any] = {"n": args.n}

    results["engine"] = bench_engine(max(args.n * 10, 1000))

    keyword_doc = document()
    keyword_doc["routing"]["decisions"] = [
        d
        for d in keyword_doc["routing"]["decisions"]
        if d["name"].startswith("kw_") or d["name"] == "long_ctx"
    ]
    keyword_doc["global"]["stores"]["response_cache"]["enabled"] = False
    keyword_pipe = RouterPipeline(RouterConfig.model_validate(keyword_doc), PipelineServices())
    await bench_route(keyword_pipe, queries(50, seed=9))  # warm caches of regexes etc.
    results["keyword"] = await bench_route(keyword_pipe, queries(args.n, seed=1))

    cache = InMemorySemanticCache(max_entries=args.cache_entries * 2)
    calls = cache_calls(cache)
    full_pipe = RouterPipeline(
        RouterConfig.model_validate(document()),
        PipelineServices(
            embed=encoder_embed(encoder),
            cache_lookup=calls.lookup,
            cache_store=calls.store,
            cache_epoch=calls.epoch,
        ),
    )
    await full_pipe.warm_up()
    fill = encoder.encode(queries(args.cache_entries, seed=2))
    for i, vector in enumerate(fill):
        cache.store(f"small|emb_{i % 4}", vector, {"choices": [{"message": {"content": str(i)}}]}, 0)
    await bench_route(full_pipe, queries(30, seed=8))
    results["full"] = await bench_route(full_pipe, queries(args.n, seed=3))
    results["cache_hit_ratio_in_full"] = round(cache.stats().hit_ratio, 3)

    samples = []
    for text in queries(args.n, seed=4):
        start = time.perf_counter()
        encoder.encode([text])
        samples.append(time.perf_counter() - start)
    results["encoder"] = percentiles(samples)
    results["full_minus_encoder_p50_ms"] = round(results["full"]["p50"] - results["encoder"]["p50"], 3)

    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"route() latency, {args.n} requests per scenario (ms)")
    for name in ("engine", "keyword", "full", "encoder"):
        r = results[name]
        print(
            f"  {name:<8} p50 {r['p50']:>8.3f}  p90 {r['p90']:>8.3f}  p99 {r['p99']:>8.3f}  mean {r['mean']:>8.3f}"
        )
    print(f"  pipeline overhead over one encode (p50): {results['full_minus_encoder_p50_ms']:.3f} ms")
    print(f"  cache hit ratio during 'full': {results['cache_hit_ratio_in_full']}")


if __name__ == "__main__":
    asyncio.run(main())
