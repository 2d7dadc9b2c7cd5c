#!/usr/bin/env python
"""Added latency of the response-side plugins per answer: `response_jailbreak` (prompt guard
and harmful-content heads on the answer, in the Router's process) and `hallucination`
(sentence split + one MiniLM pass over answer and context sentences + overlap), each alone
and both together, p50/p99 over the answers of tests/data/hallucination_eval.jsonl.

This is RouterPipeline.check_answer, what a front door waits for once the answer is whole
(in the Ray graph add one handle hop to a Router replica). docs/hallucination.md quotes it.

  .venv/bin/python bench/bench_answer_checks.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.config.loader import parse_config  # noqa: E402
from app.config.plugins import HallucinationPlugin, ResponseJailbreakPlugin  # noqa: E402
from app.pipeline import PipelineServices, RouterPipeline, encoder_embed  # noqa: E402
from app.pipeline.answers.schemas import AnswerChecks  # noqa: E402
from app.pipeline.local_models import router_evaluators  # noqa: E402
from app.runtime.encoder import shared_encoder  # noqa: E402
from bench.documents import one_model_document  # noqa: E402
from bench.latency import percentile  # noqa: E402

DATA = ROOT / "tests" / "data" / "hallucination_eval.jsonl"


async def run(rounds: int) -> dict[str, dict[str, float]]:
    embed = encoder_embed(shared_encoder())
    services = PipelineServices(embed=embed, evaluators=router_evaluators(embed, None))
    pipeline = RouterPipeline(parse_config(one_model_document()).config, services)
    await pipeline.warm_up()
    items = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    cases = {
        "response_jailbreak": AnswerChecks(decision="d", response_jailbreak=ResponseJailbreakPlugin()),
        "hallucination": AnswerChecks(decision="d", hallucination=HallucinationPlugin()),
        "both": AnswerChecks(
            decision="d", response_jailbreak=ResponseJailbreakPlugin(), hallucination=HallucinationPlugin()
        ),
    }
    for checks in cases.values():  # warm every path once
        await pipeline.check_answer(checks, "Warm up the heads.", ["Warm up the encoder."])
    out: dict[str, dict[str, float]] = {}
    for name, checks in cases.items():
        samples: list[float] = []
        for _ in range(rounds):
            for item in items:
                answer = " ".join(s["text"] for s in item["sentences"])
                started = time.perf_counter()
                await pipeline.check_answer(checks, answer, [item["context"]])
                samples.append(time.perf_counter() - started)
        out[name] = {
            "answers": len(samples),
            "p50_ms": round(percentile(samples, 50, 1000), 2),
            "p99_ms": round(percentile(samples, 99, 1000), 2),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.rounds)), indent=2))


if __name__ == "__main__":
    main()
