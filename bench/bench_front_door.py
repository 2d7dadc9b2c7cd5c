"""What a MoM chat request costs from the front door's bytes to its plan, Ray's transport aside.

`Exchange.begin(raw)` as both front doors call it: the client API's parse of the body, the
Router hop (its arguments and the returned plan pickled and unpickled, as a DeploymentHandle
call moves them), and `RouterPipeline.route()` with keyword and context signals only (no
encoder, no cache), so the figures are the request's parsing and validation plus a cheap
route. Two prompts: a short one and one of ~500 tokens (a system prompt and a long user
turn). One run measures both, interleaved, after a warm-up.

`parse` is the part of that a body's parsing costs, alone: the chat API's parse at the door,
the hop's pickling of the arguments, the plan and the signal context on the Router (the
human's ask); `responses_parse` is a Responses request's parse at the door (its translation
to a chat body included).

    .venv/bin/python bench/bench_front_door.py [--n 3000] [--json]

Prints p50 / p99 (ms) per prompt and scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import pickle
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config.document import RouterConfig  # noqa: E402
from app.exchange.client_api import ChatApi, ResponsesApi  # noqa: E402
from app.exchange.exchange import Exchange, ExchangeSettings, Forward  # noqa: E402
from app.pipeline import PipelineServices, RouterPipeline  # noqa: E402
from app.pipeline.answers.schemas import AnswerChecks, AnswerVerdict  # noqa: E402
from app.pipeline.phases.parse import new_plan  # noqa: E402
from app.pipeline.plan import Accounting, CompletionReport, RoutePlan  # noqa: E402
from app.pipeline.signals.base import SignalContext  # noqa: E402
from bench.bench_pipeline import document  # noqa: E402
from bench.latency import percentile  # noqa: E402

SYSTEM = "You are a helpful assistant for an operations team. Answer briefly and cite the runbook."
LONG_TURN = (
    "Our nightly job that compiles the billing service and deploys it to the staging cluster "
    "failed again. The build log shows the invoice module timing out while it waits for the "
    "ledger database, then the refund tests are skipped and the deploy step never starts. "
)


def prompt(text: str) -> dict[str, Any]:
    return {
        "model": "MoM",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
        "temperature": 0.2,
        "max_tokens": 256,
    }


class HopClient:
    """The Router behind a DeploymentHandle, with the handle's pickling and without Ray."""

    def __init__(self, pipeline: RouterPipeline) -> None:
        self._pipeline = pipeline

    async def route(self, *args: Any) -> RoutePlan:
        sent = pickle.loads(pickle.dumps(args, protocol=5))
        plan = await self._pipeline.route(*sent)
        back: RoutePlan = pickle.loads(pickle.dumps(plan, protocol=5))
        return back

    async def complete(self, plan: RoutePlan, report: CompletionReport) -> Accounting:
        raise NotImplementedError

    async def check_answer(self, checks: AnswerChecks, answer: str, context: list[str]) -> AnswerVerdict:
        raise NotImplementedError


async def begin(settings: ExchangeSettings, raw: bytes) -> float:
    start = time.perf_counter()
    step = await Exchange(settings, ChatApi()).begin(raw, {"content-type": "application/json"})
    elapsed = time.perf_counter() - start
    assert isinstance(step, Forward), step
    return elapsed


def parse(raw: bytes) -> float:
    start = time.perf_counter()
    body = ChatApi().parse(raw)
    sent = pickle.loads(pickle.dumps((body, {}, "id"), protocol=5))
    plan = new_plan(sent[0], {}, "id", AUTO)
    SignalContext(plan.body["messages"], body=plan.body)
    return time.perf_counter() - start


def responses_parse(raw: bytes) -> float:
    start = time.perf_counter()
    ResponsesApi().parse(raw)
    return time.perf_counter() - start


AUTO = frozenset({"MoM"})


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    doc = document()
    doc["routing"]["decisions"] = [
        d for d in doc["routing"]["decisions"] if d["name"].startswith("kw_") or d["name"] == "long_ctx"
    ]
    doc["routing"]["signals"].pop("embeddings")
    doc["global"]["stores"]["response_cache"]["enabled"] = False
    pipeline = RouterPipeline(RouterConfig.model_validate(doc), PipelineServices())
    settings = ExchangeSettings(router=HopClient(pipeline))
    long_text = (LONG_TURN * 8).strip()  # ~2,100 characters, ~500 tokens with the system prompt
    bodies = {
        "short": [
            json.dumps(prompt(f"please deploy the fix now (case {i})")).encode() for i in range(args.n)
        ],
        "500_tokens": [json.dumps(prompt(f"{long_text} (case {i})")).encode() for i in range(args.n)],
    }
    responses = {
        name: [
            json.dumps(
                {"model": "MoM", "instructions": SYSTEM, "input": m["messages"][1]["content"]}
            ).encode()
            for m in map(json.loads, raws)
        ]
        for name, raws in bodies.items()
    }
    for name in bodies:  # warm regexes, pydantic's validators, the allocator
        for raw in bodies[name][:200]:
            await begin(settings, raw)
            parse(raw)
        for raw in responses[name][:200]:
            responses_parse(raw)
    samples: dict[str, list[float]] = {}
    gc.collect()
    for i in range(args.n):
        for name, raws in bodies.items():
            samples.setdefault(name, []).append(await begin(settings, raws[i]))
            samples.setdefault(f"parse {name}", []).append(parse(raws[i]))
            samples.setdefault(f"responses_parse {name}", []).append(responses_parse(responses[name][i]))
    results = {
        name: {"p50_ms": round(percentile(s, 50, 1000), 4), "p99_ms": round(percentile(s, 99, 1000), 4)}
        for name, s in samples.items()
    }
    if args.json:
        print(json.dumps({"n": args.n, **results}, indent=2))
        return
    print(f"Exchange.begin() of a MoM chat request, and its parsing alone, {args.n} per prompt (ms)")
    for name, r in results.items():
        print(f"  {name:<26} p50 {r['p50_ms']:>7.4f}   p99 {r['p99_ms']:>7.4f}")


if __name__ == "__main__":
    asyncio.run(main())
