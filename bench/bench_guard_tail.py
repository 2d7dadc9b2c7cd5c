"""The tail read's cost: the shipped config routed with the tail (this branch) and without it
(main's guard_texts: the same code with `tail` giving nothing), interleaved prompt by prompt,
each arm its own pipeline and vector table (no vector reuse across arms); docs/security.md
"What the guards cost".

    .venv/bin/python bench/bench_guard_tail.py [ROUNDS]
"""

import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import yaml  # noqa: E402

from app.common import chat_text  # noqa: E402
from bench.bench_guards import CONFIG, pipeline_of, prompts  # noqa: E402
from bench.latency import percentile  # noqa: E402

ORIGINAL = chat_text.tail


def set_tail(on):
    chat_text.tail = ORIGINAL if on else (lambda *a, **k: "")


async def timed(p, text, i, on):
    set_tail(on)
    body = {"model": "MoM", "messages": [{"role": "user", "content": text}]}
    t = time.perf_counter()
    plan = await p.route(body, {}, f"b-{i}")
    s = time.perf_counter() - t
    parts = max(
        (m.detail.get("parts_judged", 1) for m in plan.signals.matches if m.type == "jailbreak"), default=0
    )
    return s, parts


async def main(rounds):
    doc = yaml.safe_load(CONFIG.read_text())
    on_p, on_l = await pipeline_of(doc)
    off_p, off_l = await pipeline_of(doc)
    rng = random.Random(11)
    out = {"rounds": rounds, "load_start": os.getloadavg()}
    for kind in ("short", "long"):
        texts = prompts(kind, rounds + 10, rng)
        for i, t in enumerate(texts[:10]):
            await timed(on_p, f"w{i} {t}", i, True)
            await timed(off_p, f"w{i} {t}", i, False)
        on, off, d, parts_on, parts_off = [], [], [], [], []
        for i, t in enumerate(texts[10:]):
            order = [(on_p, True), (off_p, False)] if i % 2 == 0 else [(off_p, False), (on_p, True)]
            r = {}
            for p, flag in order:
                r[flag] = await timed(p, t, i, flag)
            on.append(r[True][0])
            off.append(r[False][0])
            d.append(r[True][0] - r[False][0])
            parts_on.append(r[True][1])
            parts_off.append(r[False][1])
        out[kind] = {
            "tail_p50_ms": percentile(on, 50, 1000),
            "no_tail_p50_ms": percentile(off, 50, 1000),
            "added_p50_ms": percentile(on, 50, 1000) - percentile(off, 50, 1000),
            "paired_added_p50_ms": percentile(d, 50, 1000),
            "paired_added_p99_ms": percentile(d, 99, 1000),
            "tail_p99_ms": percentile(on, 99, 1000),
            "no_tail_p99_ms": percentile(off, 99, 1000),
            "parts_judged_tail": sorted(set(parts_on)),
            "parts_judged_no_tail": sorted(set(parts_off)),
        }
    out["load_end"] = os.getloadavg()
    await on_l.aclose()
    await off_l.aclose()
    print(json.dumps(out, indent=1))


asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
