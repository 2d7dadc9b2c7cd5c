"""What the guards add to a request's routing: the shipped configs/config.yaml against the same
file with its guards taken out (no global prompt guard, no `pii` plugins), both routed by
`RouterPipeline.route()` in this process over the Router's own local models (the heads on the
request's vector, the pattern PII checks; app/benchmark/local_services.py). A config whose
`cascade_judge` is `encoder` pays the guard encoder's pass for prompts in its band: the count of
those is printed (`cascaded`); an LLM cascade stays idle (no guardrail LLM here).

Prompts: short ordinary questions (~15 tokens) and ~500-token ones, all distinct, none refused.
The two pipelines are measured interleaved, prompt by prompt, so machine load hits both alike;
the added p50 is the difference of the two p50s, and the paired p50 (median of the per-prompt
differences) is printed beside it.

    .venv/bin/python bench/bench_guards.py [--rounds 200] [--config FILE] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.benchmark.local_services import VectorTable, local_services  # noqa: E402
from app.config.loader import parse_config  # noqa: E402
from app.pipeline.pipeline import RouterPipeline  # noqa: E402
from bench.bench_all_signals import SENTENCES, SHORT  # noqa: E402
from bench.latency import percentile  # noqa: E402

CONFIG = ROOT / "configs" / "config.yaml"


def without_guards(document: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(document)
    doc["global"]["model_catalog"]["modules"].pop("prompt_guard", None)
    for decision in doc["routing"]["decisions"]:
        decision["plugins"] = [
            p for p in decision.get("plugins", []) if p.get("type") not in ("pii", "jailbreak")
        ]
    return doc


def prompts(kind: str, n: int, rng: random.Random) -> list[str]:
    if kind == "short":
        return [f"{SHORT[i % len(SHORT)]} (case {i})?" for i in range(n)]
    out = []
    for i in range(n):
        body = " ".join(rng.choice(SENTENCES) for _ in range(28))  # ~500 tokens
        out.append(f"Case {i}. Please summarise this passage in three sentences. {body}")
    return out


async def pipeline_of(document: dict[str, Any]) -> tuple[RouterPipeline, Any]:
    config = parse_config(document).config
    local = local_services(config, VectorTable())  # no shared table: each route pays its encoder pass
    pipeline = RouterPipeline(config, local.services, rng=random.Random(0))
    await pipeline.warm_up()
    return pipeline, local


async def timed(pipeline: RouterPipeline, text: str, index: int) -> tuple[float, bool, bool]:
    """(seconds, refused, cascaded: a guard's band judge was asked)."""
    body = {"model": "MoM", "messages": [{"role": "user", "content": text}]}
    started = time.perf_counter()
    plan = await pipeline.route(body, {}, f"bench-{index}")
    seconds = time.perf_counter() - started
    cascaded = any("cascade" in m.detail for m in plan.signals.matches)
    return seconds, plan.immediate is not None and plan.immediate.kind == "block", cascaded


async def run(rounds: int, config: Path = CONFIG) -> dict[str, Any]:
    document = yaml.safe_load(config.read_text())
    guarded, g_local = await pipeline_of(document)
    bare, b_local = await pipeline_of(without_guards(document))
    rng = random.Random(7)
    out: dict[str, Any] = {"config": str(config), "rounds": rounds, "load": os.getloadavg()}
    try:
        for kind in ("short", "long"):
            texts = prompts(kind, rounds + 10, rng)
            for i, text in enumerate(texts[:10]):  # warm both paths (first calls, caches)
                await timed(guarded, f"warm {i} {text}", i)
                await timed(bare, f"warm {i} {text}", i)
            with_g, without, paired, blocked, cascaded = [], [], [], 0, 0
            for i, text in enumerate(texts[10:]):
                first, second = (guarded, bare) if i % 2 == 0 else (bare, guarded)
                t1, b1, c1 = await timed(first, text, i)
                t2, b2, c2 = await timed(second, text + " ", i)  # a different text: no vector reuse
                tg, tb = (t1, t2) if first is guarded else (t2, t1)
                blocked += int(b1 if first is guarded else b2)
                cascaded += int(c1 if first is guarded else c2)
                with_g.append(tg)
                without.append(tb)
                paired.append(tg - tb)
            out[kind] = {
                "guarded_p50_ms": round(percentile(with_g, 50, 1000), 3),
                "unguarded_p50_ms": round(percentile(without, 50, 1000), 3),
                "added_p50_ms": round(percentile(with_g, 50, 1000) - percentile(without, 50, 1000), 3),
                "paired_added_p50_ms": round(percentile(paired, 50, 1000), 3),
                "guarded_p99_ms": round(percentile(with_g, 99, 1000), 3),
                "unguarded_p99_ms": round(percentile(without, 99, 1000), 3),
                "paired_added_p99_ms": round(percentile(paired, 99, 1000), 3),
                "blocked": blocked,
                "cascaded": cascaded,
            }
    finally:
        await g_local.aclose()
        await b_local.aclose()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--config", type=Path, default=CONFIG, help="a config to measure (default: the shipped one)"
    )
    args = parser.parse_args()
    result = asyncio.run(run(args.rounds, args.config))
    for kind, label in (("short", "short prompt (~15 tokens)"), ("long", "~500-token prompt")):
        r = result[kind]
        print(
            f"guards' added p50, {label}: {r['added_p50_ms']:.2f} ms (paired {r['paired_added_p50_ms']:.2f} ms; "
            f"route p50 {r['guarded_p50_ms']:.2f} vs {r['unguarded_p50_ms']:.2f} ms without guards, "
            f"p99 {r['guarded_p99_ms']:.2f} vs {r['unguarded_p99_ms']:.2f} ms, paired added p99 "
            f"{r['paired_added_p99_ms']:.2f} ms; {r['blocked']} refused, {r['cascaded']} cascaded)"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
